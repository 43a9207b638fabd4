package kubemaster

import (
	"context"
	"encoding/json"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/kubenames"
	"github.com/roverml/rover/internal/master"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReasonAutoScaled is the Event reason of a change of the worker count the
// master made on its own.
const ReasonAutoScaled = "AutoScaled"

// recordScaleChange records a change of the worker count the master made
// on its own (an auto-scaling grow or shrink, a node given up pending), as
// DLRover's master records its own: a ScalePlan labelled
// scale-type: auto for the new worker count, already Succeeded, and the
// job's replicas set to it, so that the spec stays the record of the
// count (a restarted master plans the job from it) and the scaler does not
// take the spec's old count for a user's.
func (s *scaler) recordScaleChange(ctx context.Context, c master.ScaleChange) {
	n := int32(c.Nodes)
	group := elasticv1.Worker
	if c.Group != "" {
		group = elasticv1.ReplicaType(c.Group)
	}
	s.mu.Lock()
	job := s.latest
	s.mu.Unlock()
	plan := &elasticv1.ScalePlan{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.job.Namespace, GenerateName: s.job.Name + "-auto-",
			Labels: map[string]string{elasticv1.LabelJobName: s.job.Name, elasticv1.LabelScaleType: elasticv1.ScaleTypeAuto}},
		Spec: elasticv1.ScalePlanSpec{OwnerJob: s.job.Name,
			ReplicaResourceSpecs: map[elasticv1.ReplicaType]elasticv1.ReplicaResourceSpec{group: {Replicas: n}}},
	}
	if c.Migrated != "" {
		// A PS moved to more CPU, as DLRover's master writes its own:
		// the pod in migratePods with the resources of its new pod.
		plan.Spec.MigratePods = []elasticv1.PodMeta{{Name: c.Migrated, Type: group, RankIndex: int32(c.Rank),
			Service:  kubenames.ReplicaService(s.job.Name, c.Group, c.Rank),
			Resource: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(c.MilliCPU, resource.DecimalSI)}}}
	}
	if group == elasticv1.PS {
		for i := range c.Nodes {
			plan.Spec.PsHosts = append(plan.Spec.PsHosts, kubenames.ReplicaAddr(s.job.Name, s.job.Namespace, c.Group, i))
		}
	}
	if job != nil {
		plan.OwnerReferences = []metav1.OwnerReference{{APIVersion: elasticv1.GroupVersion.String(), Kind: "ElasticJob",
			Name: job.Name, UID: job.UID}}
	}
	msg := c.Message
	if err := s.client.Create(ctx, plan); err != nil {
		s.log.Warn("write the auto-scaling ScalePlan", "nodes", n, "err", err)
	} else {
		now := metav1.NewTime(s.clock())
		body, _ := json.Marshal(map[string]any{"status": elasticv1.ScalePlanStatus{Phase: elasticv1.PhaseSucceeded,
			CreateTime: &now, FinishTime: &now, Message: msg}})
		if err := s.client.Status().Patch(ctx, plan, client.RawPatch(types.MergePatchType, body)); err != nil {
			s.log.Warn("write the auto-scaling ScalePlan's status", "plan", plan.Name, "err", err)
		}
	}
	switch {
	case c.Migrated != "": // the count is the same
	case group != elasticv1.Worker:
		if err := s.setReplicas(ctx, group, n); err != nil {
			s.log.Warn("set the job's replicas to the auto-scaled count", "group", group, "replicas", n, "err", err)
		}
	default:
		if err := s.setReplicas(ctx, elasticv1.Worker, n); err != nil {
			s.log.Warn("set the job's replicas to the auto-scaled count", "replicas", n, "err", err)
		} else {
			s.applied = n // run's goroutine only, as followSpec
		}
	}
	if job != nil {
		s.event(job, corev1.EventTypeNormal, ReasonAutoScaled, "Scale", "%s", msg)
	}
}
