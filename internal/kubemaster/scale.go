package kubemaster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/nodemanager"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Event reasons the master records on its job.
const (
	ReasonScaled       = "Scaled"
	ReasonScaleRefused = "ScaleRefused"
)

// scaler makes the master follow how many worker nodes the job's users
// want: spec.replicaSpecs.worker.replicas (which `kubectl scale` sets
// through the /scale subresource) and DLRover's manual ScalePlans. The job's
// spec stays the one record of the count: a ScalePlan that is carried out
// sets it, and a count the job cannot run (outside its --nnodes) is set
// back, with a warning event, so that a restarted master plans the job
// from a spec it accepts. Informers, not polling, bring the changes.
type scaler struct {
	// ps: the job is a parameter-server job, whose ScalePlans may move
	// and add PS (psscale.go).
	ps     bool
	client client.Client
	master *master.Master
	job    types.NamespacedName
	log    *slog.Logger
	events events.EventRecorder
	clock  func() time.Time

	wake chan struct{}

	mu      sync.Mutex
	latest  *elasticv1.ElasticJob           // the newest job seen
	plans   map[string]*elasticv1.ScalePlan // plans not settled yet, by name
	settled map[types.UID]bool              // plans settled by this master
	applied int32                           // the replicas last carried out; 0: none yet
	wrote   string                          // the job's resource version after the master's last write of its replicas
}

func newScaler(cl client.Client, m *master.Master, job types.NamespacedName, ps bool, log *slog.Logger, rec events.EventRecorder) *scaler {
	return &scaler{ps: ps, client: cl, master: m, job: job, log: log, events: rec, clock: time.Now,
		wake: make(chan struct{}, 1), plans: map[string]*elasticv1.ScalePlan{}, settled: map[types.UID]bool{}}
}

// run watches the job and its ScalePlans until ctx ends, and acts on them.
func (s *scaler) run(ctx context.Context, cfg *rest.Config) error {
	c, err := cache.New(cfg, cache.Options{
		Scheme:            Scheme(),
		DefaultNamespaces: map[string]cache.Config{s.job.Namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&elasticv1.ElasticJob{}: {Field: fields.OneTermEqualSelector("metadata.name", s.job.Name)},
			&elasticv1.ScalePlan{}:  {Label: labels.SelectorFromSet(labels.Set{elasticv1.LabelJobName: s.job.Name})},
		},
	})
	if err != nil {
		return fmt.Errorf("watch the job's scaling: %w", err)
	}
	for obj, fn := range map[client.Object]func(any){&elasticv1.ElasticJob{}: s.onJob, &elasticv1.ScalePlan{}: s.onPlan} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("watch the job's scaling: %w", err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: fn, UpdateFunc: func(_, o any) { fn(o) },
		}); err != nil {
			return fmt.Errorf("watch the job's scaling: %w", err)
		}
	}
	started := make(chan error, 1)
	go func() { started <- c.Start(ctx) }()
	for {
		select {
		case <-ctx.Done():
			<-started
			return nil
		case err := <-started:
			return fmt.Errorf("watch the job's scaling: %w", err)
		case <-s.wake:
			s.step(ctx)
		case c := <-s.master.ScaleChanges():
			s.recordScaleChange(ctx, c)
		}
	}
}

func (s *scaler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *scaler) onJob(o any) {
	if job, ok := o.(*elasticv1.ElasticJob); ok {
		s.mu.Lock()
		if !olderThan(job.ResourceVersion, s.wrote) {
			s.latest = job
		}
		s.mu.Unlock()
		s.poke()
	}
}

// olderThan reports whether resource version v is older than w: the job
// as it was before the master's own write of its replicas (w), which the
// informer may still deliver after it. Versions are etcd's revisions;
// where either is not a number, neither is older.
func olderThan(v, w string) bool {
	a, errA := strconv.ParseUint(v, 10, 64)
	b, errB := strconv.ParseUint(w, 10, 64)
	return errA == nil && errB == nil && a < b
}

func (s *scaler) onPlan(o any) {
	p, ok := o.(*elasticv1.ScalePlan)
	if !ok || planSettled(p) {
		return
	}
	if t, ok := p.Labels[elasticv1.LabelScaleType]; ok && t != elasticv1.ScaleTypeManual {
		return // a plan of another kind (DLRover's master writes "auto" ones)
	}
	s.mu.Lock()
	if !s.settled[p.UID] {
		s.plans[p.Name] = p
	}
	s.mu.Unlock()
	s.poke()
}

func planSettled(p *elasticv1.ScalePlan) bool {
	return p.Status.Phase == elasticv1.PhaseSucceeded || p.Status.Phase == elasticv1.PhaseFailed
}

// step follows the job's replicas, then settles the plans, oldest first.
func (s *scaler) step(ctx context.Context) {
	s.mu.Lock()
	job := s.latest
	plans := slices.Collect(maps.Values(s.plans))
	s.mu.Unlock()
	if job != nil {
		s.followSpec(ctx, job)
	}
	slices.SortFunc(plans, func(a, b *elasticv1.ScalePlan) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, p := range plans {
		s.settle(ctx, job, p)
	}
}

func workerReplicas(job *elasticv1.ElasticJob) int32 {
	if w := job.Spec.ReplicaSpecs[elasticv1.Worker]; w != nil && w.Replicas != nil {
		return *w.Replicas
	}
	return 0
}

// followSpec scales to the spec's worker replicas when they changed.
func (s *scaler) followSpec(ctx context.Context, job *elasticv1.ElasticJob) {
	n := workerReplicas(job)
	if n == 0 || n == s.applied {
		return
	}
	why := fmt.Sprintf("spec.replicaSpecs.worker.replicas is %d", n)
	err := s.master.Scale(ctx, string(elasticv1.Worker), int(n), why)
	switch {
	case err == nil:
		if s.applied != 0 {
			s.event(job, corev1.EventTypeNormal, ReasonScaled, "Scale", "%s: scaled the workers from %d to %d nodes", why, s.applied, n)
		}
		s.applied = n
	case errors.Is(err, nodemanager.ErrBadScale) && s.applied != 0:
		msg := fmt.Sprintf("%s, which this job cannot run: %v; replicas is set back to %d", why, err, s.applied)
		s.event(job, corev1.EventTypeWarning, ReasonScaleRefused, "Scale", "%s", msg)
		s.log.Warn("scale refused", "replicas", n, "err", err)
		if err := s.setReplicas(ctx, elasticv1.Worker, s.applied); err != nil {
			s.log.Error("set the job's replicas back", "replicas", s.applied, "err", err)
		}
	case errors.Is(err, nodemanager.ErrBadScale), errors.Is(err, nodemanager.ErrJobOver), errors.Is(err, master.ErrNoNodes):
		s.log.Info("not scaling", "replicas", n, "err", err)
	default:
		s.log.Warn("scale the workers", "replicas", n, "err", err)
	}
}

// setReplicas writes the replicas of group t in the job's spec.
func (s *scaler) setReplicas(ctx context.Context, t elasticv1.ReplicaType, n int32) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"replicaSpecs": map[string]any{
		string(t): map[string]any{"replicas": n}}}})
	if err != nil {
		return err
	}
	obj := &elasticv1.ElasticJob{ObjectMeta: metav1.ObjectMeta{Namespace: s.job.Namespace, Name: s.job.Name}}
	if err := s.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return err
	}
	s.mu.Lock()
	s.wrote = obj.ResourceVersion
	if s.latest != nil && olderThan(s.latest.ResourceVersion, obj.ResourceVersion) {
		s.latest = obj // what the informer will deliver; older events are dropped
	}
	s.mu.Unlock()
	return nil
}

func (s *scaler) event(job *elasticv1.ElasticJob, kind, reason, action, format string, a ...any) {
	if s.events != nil {
		s.events.Eventf(job, nil, kind, reason, action, format, a...)
	}
}
