package kubemaster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/kubenames"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// planAsk is what a ScalePlan asks for, once checked: a worker count, a
// PS count, and PS to migrate to more CPU; zero fields ask nothing.
type planAsk struct {
	workers int32
	ps      int32
	migrate []psMove
}

// psMove is one PS of a ScalePlan's migratePods: its rank and the CPU its
// new pod asks for.
type psMove struct {
	rank     int
	milliCPU int64
}

// settle carries out one ScalePlan, or refuses it, and records how.
func (s *scaler) settle(ctx context.Context, job *elasticv1.ElasticJob, p *elasticv1.ScalePlan) {
	ask, err := planActions(p, s.job.Name, s.job.Namespace, s.ps)
	var done []string
	if err == nil && ask.workers > 0 {
		n := ask.workers
		why := fmt.Sprintf("ScalePlan %s asks for %d worker nodes", p.Name, n)
		if err = s.master.Scale(ctx, string(elasticv1.Worker), int(n), why); err == nil {
			if err = s.setReplicas(ctx, elasticv1.Worker, n); err == nil {
				s.applied = n
				done = append(done, fmt.Sprintf("scaled the workers to %d nodes", n))
			}
		}
	}
	if err == nil && ask.ps > 0 {
		why := fmt.Sprintf("ScalePlan %s asks for %d PS", p.Name, ask.ps)
		if err = s.master.Scale(ctx, string(elasticv1.PS), int(ask.ps), why); err == nil {
			if err = s.setReplicas(ctx, elasticv1.PS, ask.ps); err == nil {
				done = append(done, fmt.Sprintf("scaled the PS to %d", ask.ps))
			}
		}
	}
	for _, mv := range ask.migrate {
		if err != nil {
			break
		}
		why := fmt.Sprintf("ScalePlan %s migrates PS %d to %dm of CPU", p.Name, mv.rank, mv.milliCPU)
		if err = s.master.MigratePS(ctx, mv.rank, mv.milliCPU, why); err == nil {
			done = append(done, fmt.Sprintf("migrating PS %d to a pod of %dm CPU", mv.rank, mv.milliCPU))
		}
	}
	if ctx.Err() != nil {
		return
	}
	phase, msg := elasticv1.PhaseSucceeded, strings.Join(done, "; ")
	if err != nil {
		phase, msg = elasticv1.PhaseFailed, err.Error()
		if job != nil {
			s.event(job, corev1.EventTypeWarning, ReasonScaleRefused, "Scale", "ScalePlan %s: %s", p.Name, msg)
		}
	} else if job != nil {
		s.event(job, corev1.EventTypeNormal, ReasonScaled, "Scale", "ScalePlan %s: %s", p.Name, msg)
	}
	now := metav1.NewTime(s.clock())
	body, _ := json.Marshal(map[string]any{"status": elasticv1.ScalePlanStatus{Phase: phase, CreateTime: &now, FinishTime: &now, Message: msg}})
	if err := s.client.Status().Patch(ctx, p.DeepCopy(), client.RawPatch(types.MergePatchType, body)); err != nil {
		s.log.Warn("write a ScalePlan's status", "plan", p.Name, "err", err)
		return // tried again on the plan's next event
	}
	s.mu.Lock()
	delete(s.plans, p.Name)
	s.settled[p.UID] = true
	s.mu.Unlock()
	s.log.Info("ScalePlan settled", "plan", p.Name, "phase", phase, "message", msg)
}

// planActions checks p and returns what it asks for, or an error naming
// the first field Rover does not carry out. An allreduce job's plan gives
// a worker count; a parameter-server job's (ps) may also give a PS count
// (replicaResourceSpecs.ps.replicas, or psHosts: the PS Services, in
// order), and PS to migrate to more CPU (migratePods, each a PS with a
// resource.cpu).
func planActions(p *elasticv1.ScalePlan, job, namespace string, ps bool) (planAsk, error) {
	sp := p.Spec
	var ask planAsk
	unsupported := func(field, why string) error {
		return fmt.Errorf("spec.%s is not supported: %s", field, why)
	}
	switch {
	case sp.OwnerJob != job:
		return ask, fmt.Errorf("spec.ownerJob is %q but the plan is labelled for job %q: make them agree", sp.OwnerJob, job)
	case len(sp.CreatePods) > 0:
		return ask, unsupported("createPods", "Rover creates the pods a count needs; give replicaResourceSpecs.<type>.replicas")
	case len(sp.RemovePods) > 0:
		return ask, unsupported("removePods", "Rover removes the highest ranks when the count goes down; give replicaResourceSpecs.worker.replicas")
	case !ps && len(sp.MigratePods) > 0:
		return ask, unsupported("migratePods", "this AllreduceStrategy job has no PS to migrate, and Rover does not move its workers; delete a pod and Rover relaunches it")
	case !ps && len(sp.PsHosts) > 0:
		return ask, unsupported("psHosts", "this is an AllreduceStrategy job, without parameter servers")
	}
	for _, t := range slices.Sorted(func(yield func(elasticv1.ReplicaType) bool) {
		for t := range sp.ReplicaResourceSpecs {
			if !yield(t) {
				return
			}
		}
	}) {
		r := sp.ReplicaResourceSpecs[t]
		switch {
		case t == elasticv1.Worker:
			ask.workers = r.Replicas
		case t == elasticv1.PS && ps:
			ask.ps = r.Replicas
		case ps:
			return ask, unsupported("replicaResourceSpecs."+string(t), "a parameter-server job scales its worker and ps groups")
		default:
			return ask, unsupported("replicaResourceSpecs."+string(t), "Rover runs one worker group")
		}
		if len(r.Resource) > 0 {
			return ask, unsupported("replicaResourceSpecs."+string(t)+".resource", "Rover does not change a running node's resources this way (an OOM-killed node comes back with more memory on its own; a PS is moved to more CPU by migratePods)")
		}
	}
	if len(sp.PsHosts) > 0 {
		for i, h := range sp.PsHosts {
			if want := kubenames.ReplicaAddr(job, namespace, string(elasticv1.PS), i); h != want && h != kubenames.ReplicaService(job, string(elasticv1.PS), i) {
				return ask, fmt.Errorf("spec.psHosts[%d] is %q: Rover's PS %d is reached at its Service %s; list the PS Services in order (the count is what is carried out)", i, h, i, want)
			}
		}
		if ask.ps > 0 && ask.ps != int32(len(sp.PsHosts)) {
			return ask, fmt.Errorf("spec.psHosts lists %d PS but replicaResourceSpecs.ps.replicas is %d: make them agree", len(sp.PsHosts), ask.ps)
		}
		ask.ps = int32(len(sp.PsHosts))
	}
	for i, pod := range sp.MigratePods {
		field := fmt.Sprintf("spec.migratePods[%d]", i)
		rank, ok := psRank(pod, job)
		if !ok {
			return ask, fmt.Errorf("%s (%q) is not a PS of job %s: give type: ps and rankIndex, or the name of a PS pod (%s-ps-RANK-N); only PS are migrated", field, pod.Name, job, job)
		}
		cpu, ok := pod.Resource[corev1.ResourceCPU]
		if !ok || cpu.MilliValue() <= 0 {
			return ask, fmt.Errorf("%s: resource.cpu is missing: give the CPU the PS's new pod asks for", field)
		}
		if len(pod.Resource) > 1 {
			return ask, unsupported(field[len("spec."):]+".resource", "a PS is migrated to more CPU; its memory grows on its own after an OOM kill")
		}
		ask.migrate = append(ask.migrate, psMove{rank: rank, milliCPU: cpu.MilliValue()})
	}
	if ask.workers == 0 && ask.ps == 0 && len(ask.migrate) == 0 {
		if ps {
			return ask, errors.New("the plan asks for nothing: give replicaResourceSpecs.worker.replicas or .ps.replicas, psHosts, or migratePods")
		}
		return ask, errors.New("spec.replicaResourceSpecs.worker.replicas is missing: give the number of worker nodes wanted")
	}
	return ask, nil
}

// psRank reads the PS rank of a migratePods entry: type ps and its
// rankIndex, or a PS pod's name (<job>-ps-<rank>-<relaunch>).
func psRank(pod elasticv1.PodMeta, job string) (int, bool) {
	if pod.Type == elasticv1.PS {
		return int(pod.RankIndex), pod.RankIndex >= 0
	}
	var rank, relaunch int
	if rest, ok := strings.CutPrefix(pod.Name, job+"-ps-"); ok {
		if n, err := fmt.Sscanf(rest, "%d-%d", &rank, &relaunch); err == nil && n == 2 && rank >= 0 {
			return rank, true
		}
	}
	return 0, false
}
