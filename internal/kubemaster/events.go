package kubemaster

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/eventlog"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The job's event log, carried to Kubernetes: each event becomes a
// Kubernetes Event (events.k8s.io) on the ElasticJob, and one on the pod
// of the node concerned, with the event's kind as its reason in CamelCase
// (worker_failed: WorkerFailed); the restarts and worlds set the job's
// Restarting condition. A crash loop must not flood the API server, so the
// Events go through a token bucket per severity (eventBudget); the job's
// end always passes, and the first Event after a pause says how many were
// left out. The event log keeps them all (`rover events`).

// CondRestarting is the condition of an ElasticJob that the master writes:
// true from a restart (a world ended and the workers restart, or a node is
// relaunched) until the next world forms; false once it did, and at the
// end. The operator writes the others (Created, Running, Succeeded, Failed,
// Suspended).
const CondRestarting = "Restarting"

// The reasons of CondRestarting.
const (
	ReasonWorkersRestarting = "WorkersRestarting"
	ReasonNodeRelaunched    = "NodeRelaunched"
	ReasonWorldFormed       = "WorldFormed"
	ReasonJobSucceeded      = "JobSucceeded"
	ReasonJobFailed         = "JobFailed"
)

// maxNote is the longest note of an events.k8s.io Event the API server
// accepts.
const maxNote = 1024

// eventBudget bounds the Kubernetes Events of one severity: burst at
// once, then one per every.
type eventBudget struct {
	burst  int
	every  time.Duration
	tokens float64
	at     time.Time // of the last refill
	// dropped counts the events left out since the last that passed.
	dropped int
}

func newEventBudget(burst int, every time.Duration) *eventBudget {
	return &eventBudget{burst: burst, every: every, tokens: float64(burst)}
}

// take reports whether an event at now may become a Kubernetes Event, and
// how many were left out before it. The job's end always passes.
func (b *eventBudget) take(now time.Time, always bool) (ok bool, dropped int) {
	if !b.at.IsZero() && now.After(b.at) {
		b.tokens = min(float64(b.burst), b.tokens+float64(now.Sub(b.at))/float64(b.every))
	}
	if b.at.IsZero() || now.After(b.at) {
		b.at = now
	}
	if b.tokens < 1 && !always {
		b.dropped++
		return false, 0
	}
	b.tokens = max(0, b.tokens-1)
	dropped, b.dropped = b.dropped, 0
	return true, dropped
}

// eventReason is an event kind as a Kubernetes reason: CamelCase.
func eventReason(k eventlog.Kind) string {
	var b strings.Builder
	for _, w := range strings.Split(string(k), "_") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// eventNote is the Event's note: the event's message, and what was left
// out before it, within maxNote.
func eventNote(e eventlog.Event, dropped int) string {
	note := e.Message
	if dropped > 0 {
		note = fmt.Sprintf("%s (%d earlier events not recorded as Kubernetes Events: rover events lists them)", note, dropped)
	}
	if len(note) > maxNote {
		note = truncate(note, maxNote-len("…")) + "…"
	}
	return note
}

// eventSink carries the master's event log to the API server. It creates
// the Events itself, one call each, rather than through client-go's
// broadcaster: the job's end is recorded before the master pod exits, and
// the budget, not the broadcaster's aggregation, bounds them.
type eventSink struct {
	log    *eventlog.Log
	events eventsv1client.EventsV1Interface
	client client.Client
	job    *elasticv1.ElasticJob
	logger *slog.Logger
	// instance is the reporting instance (the master pod); nonce makes the
	// Events' names unique across the job's masters.
	instance string
	nonce    string
	budgets  map[eventlog.Severity]*eventBudget
}

func newEventSink(l *eventlog.Log, ev eventsv1client.EventsV1Interface, cl client.Client, job *elasticv1.ElasticJob, logger *slog.Logger) *eventSink {
	host, _ := os.Hostname()
	return &eventSink{log: l, events: ev, client: cl, job: job, logger: logger,
		instance: cmp.Or(host, "rover-master"), nonce: strconv.FormatInt(time.Now().UnixNano(), 36),
		budgets: map[eventlog.Severity]*eventBudget{
			eventlog.Normal:  newEventBudget(20, 10*time.Second),
			eventlog.Warning: newEventBudget(20, 10*time.Second),
		}}
}

// run follows the event log from its first event until ctx ends, and
// returns the number of the last event it carried.
func (s *eventSink) run(ctx context.Context) uint64 {
	var cursor uint64
	for {
		wake := s.log.Wait()
		evs, _ := s.log.Since(cursor, 0)
		for _, e := range evs {
			s.record(ctx, e)
			cursor = e.Seq
		}
		select {
		case <-ctx.Done():
			return cursor
		case <-wake:
		}
	}
}

// drain carries what the log holds after event number after: the job's
// end, appended as the master stopped.
func (s *eventSink) drain(ctx context.Context, after uint64) {
	evs, _ := s.log.Since(after, 0)
	for _, e := range evs {
		s.record(ctx, e)
	}
}

// record carries one event: a Kubernetes Event on the job (and one on the
// node's pod) within the budget, and the Restarting condition.
func (s *eventSink) record(ctx context.Context, e eventlog.Event) {
	end := e.Kind == eventlog.JobSucceeded || e.Kind == eventlog.JobFailed
	b := s.budgets[e.Severity]
	if b == nil {
		b = s.budgets[eventlog.Normal]
	}
	if ok, dropped := b.take(e.Time, end); ok {
		job := corev1.ObjectReference{APIVersion: elasticv1.GroupVersion.String(), Kind: elasticv1.ElasticJobKind,
			Namespace: s.job.Namespace, Name: s.job.Name, UID: s.job.UID}
		if e.Node == "" {
			s.create(ctx, e, dropped, job, nil)
		} else {
			pod := corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: s.job.Namespace, Name: e.Node}
			s.create(ctx, e, dropped, job, &pod)
			s.create(ctx, e, dropped, pod, &job)
		}
	}
	if c, ok := restartingCondition(e); ok {
		s.setCondition(ctx, c)
	}
}

// create creates the Event of e regarding an object.
func (s *eventSink) create(ctx context.Context, e eventlog.Event, dropped int, regarding corev1.ObjectReference, related *corev1.ObjectReference) {
	typ := corev1.EventTypeNormal
	if e.Severity == eventlog.Warning {
		typ = corev1.EventTypeWarning
	}
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.job.Namespace, Name: fmt.Sprintf("%s.%s.%d", regarding.Name, s.nonce, e.Seq)},
		EventTime:  metav1.NewMicroTime(e.Time), ReportingController: reportingController, ReportingInstance: s.instance,
		Action: cmp.Or(truncate(e.Action, 128), "Observed"), Reason: eventReason(e.Kind), Type: typ,
		Regarding: regarding, Related: related, Note: eventNote(e, dropped),
	}
	if _, err := s.events.Events(s.job.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		s.logger.Warn("record a Kubernetes Event", "job", s.job.Name, "reason", ev.Reason, "regarding", regarding.Name, "err", err)
	}
}

// reportingController names the master in the Events it records.
const reportingController = "rover.dev/master"

// truncate cuts s to at most max bytes, at a rune boundary.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && s[max]&0xC0 == 0x80 {
		max--
	}
	return s[:max]
}

// restartingCondition is the Restarting condition an event sets, if any.
func restartingCondition(e eventlog.Event) (metav1.Condition, bool) {
	c := metav1.Condition{Type: CondRestarting, Message: e.Message, LastTransitionTime: metav1.NewTime(e.Time)}
	switch e.Kind {
	case eventlog.Restart:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonWorkersRestarting
	case eventlog.NodeRelaunched:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonNodeRelaunched
	case eventlog.RendezvousCompleted:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonWorldFormed
	case eventlog.JobSucceeded:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonJobSucceeded
	case eventlog.JobFailed:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonJobFailed
	default:
		return c, false
	}
	c.Message = truncate(c.Message, 32768)
	return c, true
}

// setCondition sets a condition on the job's status: read, set, patched
// with the resourceVersion read, so that the operator's conditions (written
// alike) are never lost; a conflict reads again.
func (s *eventSink) setCondition(ctx context.Context, c metav1.Condition) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var job elasticv1.ElasticJob
		if err := s.client.Get(ctx, client.ObjectKeyFromObject(s.job), &job); err != nil {
			return err
		}
		old := job.DeepCopy()
		c.ObservedGeneration = job.Generation
		if !meta.SetStatusCondition(&job.Status.Conditions, c) {
			return nil
		}
		return s.client.Status().Patch(ctx, &job, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil {
		s.logger.Warn("set the job's condition", "job", s.job.Name, "condition", c.Type, "status", c.Status, "err", err)
	}
}
