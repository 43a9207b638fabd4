package kubemaster

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/k8stest"
	"github.com/roverml/rover/internal/master"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestAutoScaleWritesScalePlan: on a real API server, with exactly
// deploy/rbac/master-role.yaml's permissions, an auto-scaling change the
// master carried out is recorded as DLRover's master records one: a
// ScalePlan labelled scale-type: auto, owned by the job, for the new
// worker count, Succeeded with the decision's reason; and the job's
// replicas set to it. A second change writes a second plan.
func TestAutoScaleWritesScalePlan(t *testing.T) {
	env := k8stest.Start(t, k8stest.Options{CRDDirs: []string{"deploy/crd"}, Scheme: Scheme()})
	ctx := context.Background()
	ns := "autoscale"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	_, masterCfg := env.AddUser(t, k8stest.ApplyMasterRole(t, env.Client, ns))
	cl, err := client.New(masterCfg, client.Options{Scheme: Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	job := ddpJob(t, ns)
	job.Spec.ReplicaSpecs[elasticv1.Worker].Replicas = new(int32(1))
	if err := env.Client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	s := newScaler(cl, nil, client.ObjectKeyFromObject(job), false, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	s.latest = job
	s.recordScaleChange(ctx, master.ScaleChange{Nodes: 2, Why: "auto-scale grow: predicted_gain",
		Message: "auto-scale: grow from 1 to 2 nodes: each added node is assumed to add 0.70 of a node's share"})
	s.recordScaleChange(ctx, master.ScaleChange{Nodes: 3, Why: "auto-scale grow: predicted_gain",
		Message: "auto-scale: grow from 2 to 3 nodes: each added node is predicted to add 0.85 of a node's share"})

	var plans elasticv1.ScalePlanList
	if err := env.Client.List(ctx, &plans, client.InNamespace(ns),
		client.MatchingLabels{elasticv1.LabelJobName: job.Name, elasticv1.LabelScaleType: elasticv1.ScaleTypeAuto}); err != nil {
		t.Fatal(err)
	}
	if len(plans.Items) != 2 {
		t.Fatalf("%d auto ScalePlans, want 2: %+v", len(plans.Items), plans.Items)
	}
	seen := map[int32]bool{}
	for _, p := range plans.Items {
		n := p.Spec.ReplicaResourceSpecs[elasticv1.Worker].Replicas
		seen[n] = true
		if p.Spec.OwnerJob != job.Name || p.Status.Phase != elasticv1.PhaseSucceeded ||
			!strings.Contains(p.Status.Message, "auto-scale: grow from") || len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != job.UID {
			t.Errorf("ScalePlan %s: %+v", p.Name, p)
		}
	}
	if !seen[2] || !seen[3] {
		t.Errorf("plans for %v nodes, want 2 and 3", seen)
	}
	var got elasticv1.ElasticJob
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(job), &got); err != nil {
		t.Fatal(err)
	}
	if r := workerReplicas(&got); r != 3 || s.applied != 3 {
		t.Errorf("the job's replicas %d (applied %d), want 3: the spec records the auto-scaled count", r, s.applied)
	}
}
