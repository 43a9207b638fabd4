package kubemaster

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// TestStatusByGroup: the replica statuses count each group's nodes apart
// (a parameter-server job's ps, chief and worker); an allreduce job's
// worker counts are written even before it has nodes.
func TestStatusByGroup(t *testing.T) {
	node := func(group, state string) *roverv1.ManagedNode {
		return &roverv1.ManagedNode{Group: group, State: state}
	}
	j := &roverv1.GetJobResponse{ManagedNodes: []*roverv1.ManagedNode{
		node("ps", "Running"), node("ps", "Pending"), node("chief", "Succeeded"),
		node("worker", "Succeeded"), node("", "Failed"),
	}}
	want := map[elasticv1.ReplicaType]*replicaCounts{
		elasticv1.PS:     {Initial: 2, Pending: 1, Active: 1},
		elasticv1.Chief:  {Initial: 1, Succeeded: 1},
		elasticv1.Worker: {Initial: 2, Succeeded: 1, Failed: 1},
	}
	if d := cmp.Diff(want, statusOf(j).ReplicaStatuses); d != "" {
		t.Errorf("replica statuses (-want +got):\n%s", d)
	}
	empty := statusOf(&roverv1.GetJobResponse{}).ReplicaStatuses
	if d := cmp.Diff(map[elasticv1.ReplicaType]*replicaCounts{elasticv1.Worker: {}}, empty); d != "" {
		t.Errorf("a job with no nodes (-want +got):\n%s", d)
	}
}
