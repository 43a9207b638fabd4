package master

import (
	"context"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/goodput"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/store"
)

// TestGoodputProgressAmongItsHeartbeatsEvents: a heartbeat's progress is up
// to a second older than the heartbeat, and the saves it carries are newer.
// The report goes in among the events at its own time, so a restart's first
// step ends at the step's time, not at the round's second save that came in
// the same heartbeat (the soak saw first_step 0.4-0.9s where the step logs
// showed 0.1s).
func TestGoodputProgressAmongItsHeartbeatsEvents(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(1000, 0)
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	c := restoredCore(t, store.NewMemory(), 1, t0)
	ev := func(kind roverv1.NodeEventKind, round, step int64, at float64) *roverv1.NodeEvent {
		return &roverv1.NodeEvent{Kind: kind, Round: round, Step: step, TimeUnixNanos: sec(at).UnixNano(), BlockingNanos: int64(time.Millisecond)}
	}
	beat := func(round, step int64, stepAt, at float64, events ...*roverv1.NodeEvent) *goodput.Restart {
		t.Helper()
		hb := &roverv1.Heartbeat{SentUnixNanos: sec(at).UnixNano(), Events: events}
		if step > 0 {
			hb.Progress = &roverv1.NodeProgress{Round: round, Workers: []*roverv1.WorkerProgress{{Step: step, StepUnixNanos: sec(stepAt).UnixNano()}}}
		}
		_, done := c.goodputHeartbeat("a", hb, sec(at))
		return done
	}
	const (
		started = roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED
		resumed = roverv1.NodeEventKind_NODE_EVENT_KIND_RESUMED
		saved   = roverv1.NodeEventKind_NODE_EVENT_KIND_CHECKPOINT_SAVED
	)
	joinNode(t, c, "a", 1, 0, sec(0))
	// Round 1: its first step at 1.0s is reported with a save at 1.9s.
	beat(1, 1, 1.0, 2.0, ev(started, 1, 0, 0.1), ev(saved, 1, 2, 1.9))
	if got := c.st.Goodput.View(sec(2)).Badput[goodput.Startup]; got != time.Second {
		t.Errorf("startup %v, want 1s: the launch to the first step", got)
	}
	for s := int64(2); s <= 10; s++ {
		beat(1, 10*s, float64(s), float64(s))
	}
	if err := c.apply(ctx, &jobstate.Event{Type: jobstate.EventWorkerFailed, Time: sec(10.2), Node: "a", Round: 1, DiedAt: sec(10.1)}); err != nil {
		t.Fatal(err)
	}
	joinNode(t, c, "a", 1, 2, sec(10.3))
	// Round 2 resumes at 11.0s; its first step at 11.1s comes with saves
	// at 11.3 and 11.5.
	beat(2, 0, 0, 11.0, ev(started, 2, 0, 10.4), ev(resumed, 2, 100, 11.0))
	done := beat(2, 101, 11.1, 11.6, ev(saved, 2, 102, 11.3), ev(saved, 2, 104, 11.5))
	if done == nil {
		t.Fatal("the first step of round 2 did not complete its restart")
	}
	if want := 100 * time.Millisecond; done.FirstStep < want-time.Millisecond || done.FirstStep > want+time.Millisecond {
		t.Errorf("the restart's first step took %v, want %v: resumed at 11.0s, the step at 11.1s", done.FirstStep, want)
	}
}
