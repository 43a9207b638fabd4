package kubernetes

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/platform"
)

// Watch follows the job's pods with an informer of its own: once its cache
// has synced it reports the state of every pod of the job (sorted by node
// id), then Synced, then each change of state as it happens, until ctx
// ends. A pod's state is reported once however often the pod changes
// without changing state; a pod that is being deleted, or is gone, is
// reported Deleted once.
func (p *Platform) Watch(ctx context.Context, fn func(platform.Event)) error {
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(p.opts.Client, 0,
		informers.WithNamespace(p.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = p.selector().String() }))
	inf := factory.Core().V1().Pods().Informer()
	// Forbidden does not heal by retrying: Watch fails with what to grant.
	// Other failures are retried by the informer, with backoff.
	forbidden := make(chan error, 1)
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if apierrors.IsForbidden(err) {
			select {
			case forbidden <- err:
			default:
			}
			return
		}
		p.log.Warn("watching the job's pods failed; retrying", "err", err)
	}); err != nil {
		cancel()
		return fmt.Errorf("watch the pods of job %s: %w", p.opts.Job, err)
	}
	q := &queue{ready: make(chan struct{}, 1)}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { q.push(obj, false) },
		UpdateFunc: func(_, obj any) { q.push(obj, false) },
		DeleteFunc: func(obj any) { q.push(obj, true) },
	})
	if err != nil {
		cancel()
		return fmt.Errorf("watch the pods of job %s: %w", p.opts.Job, err)
	}
	factory.Start(ctx.Done())
	defer func() {
		cancel()
		factory.Shutdown() // waits for the informer's goroutines
	}()

	// Once the handler has had every pod of the first list, the queue
	// holds them (and maybe changes since): report each pod's latest.
	select {
	case <-reg.HasSyncedChecker().Done():
	case <-ctx.Done():
		return ctx.Err()
	case err := <-forbidden:
		return p.forbidden(err)
	}
	pods := inf.GetStore()
	p.pods.Store(&pods)
	defer p.pods.CompareAndSwap(&pods, nil)
	w := &watcher{p: p, fn: fn, last: map[string]platform.Event{}}
	latest := map[string]change{}
	for _, c := range q.take() {
		latest[c.pod.Name] = c
	}
	for _, id := range slices.Sorted(maps.Keys(latest)) {
		w.observe(latest[id])
	}
	fn(platform.Event{Kind: platform.Synced, Time: p.opts.Now()})
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-forbidden:
			return p.forbidden(err)
		case <-q.ready:
		}
		for _, c := range q.take() {
			w.observe(c)
		}
	}
}

func (p *Platform) forbidden(err error) error {
	return fmt.Errorf("watch the pods of job %s in namespace %s: %w (grant the master's service account get, list and watch on pods there)",
		p.opts.Job, p.opts.Namespace, err)
}

// selector picks the job's node pods: those labelled with the job's name, a
// replica type other than the master's, a rank and a relaunch count.
func (p *Platform) selector() labels.Selector {
	req := func(key string, op selection.Operator, vals ...string) labels.Requirement {
		r, err := labels.NewRequirement(key, op, vals)
		if err != nil {
			panic(fmt.Sprintf("kubernetes platform: label requirement on %s: %v", key, err)) // New checked the job name
		}
		return *r
	}
	return labels.NewSelector().Add(
		req(elasticv1.LabelJobName, selection.Equals, p.opts.Job),
		req(elasticv1.LabelReplicaType, selection.Exists),
		req(elasticv1.LabelReplicaType, selection.NotEquals, string(elasticv1.DLRoverMaster)),
		req(elasticv1.LabelRankIndex, selection.Exists),
		req(elasticv1.LabelRelaunchCount, selection.Exists),
	)
}

// change is one pod as the informer delivered it; gone when it was removed.
type change struct {
	pod  *corev1.Pod
	gone bool
}

// queue hands the informer's notifications to Watch's loop. It is
// unbounded so that the informer never waits on fn; ready (size one) says
// that it is not empty.
type queue struct {
	mu      sync.Mutex
	changes []change
	ready   chan struct{}
}

func (q *queue) push(obj any, gone bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	q.mu.Lock()
	q.changes = append(q.changes, change{pod: pod, gone: gone})
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *queue) take() []change {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.changes
	q.changes = nil
	return c
}

// watcher turns pod changes into events, each state once.
type watcher struct {
	p    *Platform
	fn   func(platform.Event)
	last map[string]platform.Event // the state last reported, by node id
}

func (w *watcher) observe(c change) {
	if !w.p.owns(c.pod) {
		return
	}
	id := c.pod.Name
	prev, seen := w.last[id]
	if c.gone {
		delete(w.last, id) // ids are never reused: nothing more comes of this one
	}
	if seen && prev.Kind == platform.Deleted {
		return // Deleted is the last event of an id
	}
	var ev platform.Event
	if c.gone || c.pod.DeletionTimestamp != nil {
		ev = platform.Event{NodeID: id, Kind: platform.Deleted, Host: c.pod.Spec.NodeName}
	} else {
		var ok bool
		if ev, ok = w.p.State(c.pod); !ok {
			return
		}
	}
	if !c.gone {
		w.last[id] = ev
	}
	if seen && prev == ev { // neither has a Time yet
		return
	}
	ev.Time = w.p.opts.Now()
	w.fn(ev)
}

// State maps a pod to the state of its node, without Time; ok is false
// while the state is unknown (phase Unknown: the node is out of touch).
//
//   - Pending: not yet scheduled, or its containers are waiting; Reason
//     says why when Kubernetes says (Unschedulable, ContainerCreating,
//     ImagePullBackOff).
//   - Running, with Host the node it runs on.
//   - Exited, once the pod has Succeeded or Failed, or the training
//     container has terminated: ExitCode is the container's exit code (-1
//     when it never reported one, as for a pod evicted before it started),
//     Signal is the code less 128 when the reason says the container was
//     killed (OOMKilled, Evicted, Preempted, DeadlineExceeded), Reason is
//     the container's reason unless it is the generic Error or Completed,
//     in which case the pod's reason (Evicted, Preempted,
//     DeadlineExceeded, UnexpectedAdmissionError) comes first.
func (p *Platform) State(pod *corev1.Pod) (platform.Event, bool) {
	ev := platform.Event{NodeID: pod.Name, Host: pod.Spec.NodeName}
	cs := p.containerStatus(pod)
	var term *corev1.ContainerStateTerminated
	if cs != nil {
		term = cs.State.Terminated
	}
	switch phase := pod.Status.Phase; {
	case phase == corev1.PodSucceeded || phase == corev1.PodFailed || term != nil:
		ev.Kind = platform.Exited
		ev.ExitCode, ev.Signal, ev.Reason = exit(pod, term)
	case phase == corev1.PodRunning:
		ev.Kind = platform.Running
	case phase == corev1.PodPending || phase == "":
		ev.Kind = platform.Pending
		ev.Reason = pendingReason(pod, cs)
	default:
		return platform.Event{}, false
	}
	return ev, true
}

// exit returns how the pod's training container ended.
func exit(pod *corev1.Pod, term *corev1.ContainerStateTerminated) (code, signal int, reason string) {
	code = -1
	if pod.Status.Phase == corev1.PodSucceeded {
		code = 0
	}
	var cReason string
	if term != nil {
		code, cReason = int(term.ExitCode), term.Reason
	}
	switch {
	case cReason != "" && cReason != "Error" && cReason != "Completed":
		reason = cReason
	case pod.Status.Reason != "":
		reason = pod.Status.Reason
	default:
		reason = cReason
	}
	if code > 128 && code < 128+65 && killedReasons[reason] {
		signal = code - 128
	}
	return code, signal, reason
}

// killedReasons are the reasons that say the kubelet killed the container,
// so an exit code above 128 is 128 plus the signal it was killed with.
var killedReasons = map[string]bool{"OOMKilled": true, "Evicted": true, "Preempted": true, "DeadlineExceeded": true}

func pendingReason(pod *corev1.Pod, cs *corev1.ContainerStatus) string {
	if cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
		return cs.State.Waiting.Reason
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason != "" {
			return c.Reason
		}
	}
	return ""
}

// containerStatus is the status of pod's training container, nil when the
// kubelet has not reported it. The training container has its group's
// template's name; a pod made from another template falls back to its
// only container.
func (p *Platform) containerStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	t, main := p.template(pod.Labels[elasticv1.LabelReplicaType])
	name := t.Spec.Containers[main].Name
	for i := range pod.Status.ContainerStatuses {
		if cs := &pod.Status.ContainerStatuses[i]; cs.Name == name {
			return cs
		}
	}
	if len(pod.Status.ContainerStatuses) == 1 {
		return &pod.Status.ContainerStatuses[0]
	}
	return nil
}
