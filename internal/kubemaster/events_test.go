package kubemaster

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/roverml/rover/internal/eventlog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEventBudgetBoundsACrashLoop: a crash loop of a thousand failures in
// a minute makes the burst and one Event per period; the job's end always
// passes, counting those left out since the last Event.
func TestEventBudgetBoundsACrashLoop(t *testing.T) {
	b := newEventBudget(20, 10*time.Second)
	t0 := time.Unix(1000, 0)
	passed := 0
	for i := range 1000 {
		if ok, _ := b.take(t0.Add(time.Duration(i)*60*time.Millisecond), false); ok {
			passed++
		}
	}
	// 60 s: the burst of 20 and about one per 10 s.
	if passed < 20 || passed > 27 {
		t.Errorf("%d of 1000 events in a minute passed, want the burst of 20 and about 6 more", passed)
	}
	if ok, dropped := b.take(t0.Add(60*time.Second), true); !ok || dropped == 0 || dropped > 1000-passed {
		t.Errorf("the job's end: passed %v, counting %d left out; want it to pass, counting those since the last Event", ok, dropped)
	}
	if ok, dropped := b.take(t0.Add(10*time.Minute), false); !ok || dropped != 0 {
		t.Errorf("after a pause: passed %v, %d counted again; want it to pass, counting none", ok, dropped)
	}
}

func TestEventReasonIsCamelCase(t *testing.T) {
	for kind, want := range map[eventlog.Kind]string{
		eventlog.WorkerFailed: "WorkerFailed", eventlog.Restart: "Restart", eventlog.CheckpointCommitted: "CheckpointCommitted",
		eventlog.JobSucceeded: "JobSucceeded", eventlog.NodeCheck: "NodeCheck",
	} {
		if got := eventReason(kind); got != want {
			t.Errorf("reason of %s: %q, want %q", kind, got, want)
		}
	}
}

func TestEventNoteIsBounded(t *testing.T) {
	note := eventNote(eventlog.Event{Message: strings.Repeat("é", 2000)}, 7)
	if len(note) > maxNote || !utf8.ValidString(note) {
		t.Errorf("note of %d bytes (valid UTF-8: %v), bound %d", len(note), utf8.ValidString(note), maxNote)
	}
	if got := eventNote(eventlog.Event{Message: "m"}, 3); !strings.Contains(got, "3 earlier events") {
		t.Errorf("note %q does not count the events left out", got)
	}
}

func TestRestartingCondition(t *testing.T) {
	for _, tc := range []struct {
		kind   eventlog.Kind
		status metav1.ConditionStatus
		reason string
	}{
		{eventlog.Restart, metav1.ConditionTrue, ReasonWorkersRestarting},
		{eventlog.NodeRelaunched, metav1.ConditionTrue, ReasonNodeRelaunched},
		{eventlog.RendezvousCompleted, metav1.ConditionFalse, ReasonWorldFormed},
		{eventlog.JobSucceeded, metav1.ConditionFalse, ReasonJobSucceeded},
		{eventlog.JobFailed, metav1.ConditionFalse, ReasonJobFailed},
	} {
		c, ok := restartingCondition(eventlog.Event{Kind: tc.kind, Message: "why"})
		if !ok || c.Type != CondRestarting || c.Status != tc.status || c.Reason != tc.reason || c.Message != "why" {
			t.Errorf("%s: %+v, want %s %s", tc.kind, c, tc.status, tc.reason)
		}
	}
	if _, ok := restartingCondition(eventlog.Event{Kind: eventlog.CheckpointCommitted}); ok {
		t.Error("a checkpoint set the Restarting condition")
	}
}
