package master

import (
	"context"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/store"
)

// TestGoodputAcrossMasterRestart: a master restored from its store in the
// middle of a job's second round, then fed what the agents send on their
// return (a join with the round they are in, heartbeats with the same
// round's progress), goes on accounting as if it had never stopped: no
// restart invented, the steps after the outage goodput, nothing lost.
func TestGoodputAcrossMasterRestart(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	t0 := time.Unix(1000, 0)
	c := newCore("job", st)
	if _, err := c.restore(ctx, t0); err != nil {
		t.Fatal(err)
	}
	cfg, err := validateRendezvous(rdzvConfig(2, 2))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.configure(ctx, *cfg, t0); err != nil {
		t.Fatal(err)
	}
	join := func(c *core, id string, round int, at time.Time) {
		t.Helper()
		req, _, err := validateJoin(joinReq(id, rdzvConfig(2, 2)).Msg)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.join(ctx, req, nil, round, at); err != nil {
			t.Fatal(err)
		}
		if err := c.connected(id, true, at); err != nil {
			t.Fatal(err)
		}
	}
	ev := func(kind roverv1.NodeEventKind, round int64, at time.Time) *roverv1.NodeEvent {
		return &roverv1.NodeEvent{Kind: kind, Round: round, TimeUnixNanos: at.UnixNano()}
	}
	beat := func(c *core, node string, round, step int64, at time.Time, events ...*roverv1.NodeEvent) {
		t.Helper()
		hb := &roverv1.Heartbeat{SentUnixNanos: at.UnixNano(), Events: events}
		if step > 0 {
			hb.Progress = &roverv1.NodeProgress{Round: round, Workers: []*roverv1.WorkerProgress{{Step: step, StepUnixNanos: at.UnixNano()}}}
		}
		if err := c.seen(node, at); err != nil {
			t.Fatal(err)
		}
		if _, done := c.goodputHeartbeat(node, hb, at); done != nil {
			logRestart(c.log, *done)
		}
	}
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	join(c, "a", 0, sec(0))
	join(c, "b", 0, sec(0))
	// Round 1: started at 1s, first step at 2s, a step a second to 10.
	for _, n := range []string{"a", "b"} {
		beat(c, n, 1, 0, sec(1), ev(roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED, 1, sec(1)))
	}
	for s := int64(1); s <= 10; s++ {
		beat(c, "a", 1, s, sec(float64(s)+1))
		beat(c, "b", 1, s, sec(float64(s)+1))
		if err := c.tick(ctx, sec(float64(s)+1)); err != nil {
			t.Fatal(err)
		}
	}
	// A worker of a fails after step 10; round 2 resumes from step 10.
	fail := &jobstate.Event{Type: jobstate.EventWorkerFailed, Time: sec(11.5), Node: "a", Round: 1, DiedAt: sec(11.4)}
	if err := c.apply(ctx, fail); err != nil {
		t.Fatal(err)
	}
	join(c, "a", 0, sec(12))
	join(c, "b", 0, sec(12))
	if r := c.job().GetRound(); r != 2 {
		t.Fatalf("round %d after the failure, want 2", r)
	}
	for _, n := range []string{"a", "b"} {
		beat(c, n, 2, 0, sec(13), ev(roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED, 2, sec(13)),
			&roverv1.NodeEvent{Kind: roverv1.NodeEventKind_NODE_EVENT_KIND_RESUMED, Round: 2, Step: 10,
				Source: roverv1.CheckpointSource_CHECKPOINT_SOURCE_MEMORY, TimeUnixNanos: sec(13.5).UnixNano()})
	}
	step := int64(10)
	at := 14.0
	run := func(c *core, until float64) {
		for ; at <= until; at++ {
			step++
			beat(c, "a", 2, step, sec(at))
			beat(c, "b", 2, step, sec(at))
			if err := c.tick(ctx, sec(at)); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(c, 40)
	// The master is killed after step 37 (at 40s) and back at 45s, its
	// state what its store holds.
	c2 := newCore("job", st)
	if _, err := c2.restore(ctx, sec(45)); err != nil {
		t.Fatal(err)
	}
	if err := c2.configure(ctx, *cfg, sec(45)); err != nil {
		t.Fatal(err)
	}
	for _, s := range []float64{45, 46, 47, 48} { // the agents' backoff
		if err := c2.tick(ctx, sec(s)); err != nil {
			t.Fatal(err)
		}
	}
	join(c2, "a", 2, sec(48))
	join(c2, "b", 2, sec(48))
	at = 48
	step += 7 // the workers went on
	run(c2, 80)
	g := c2.jobAt(sec(80)).GetGoodput()
	t.Logf("goodput %v", g)
	if g.GetRestarts() != 1 || g.GetLostSteps() != 0 || g.GetStep() != step {
		t.Errorf("after the master restart: %d restarts, %d steps lost, at step %d; want 1, 0, %d", g.GetRestarts(), g.GetLostSteps(), g.GetStep(), step)
	}
	// Good time: the steps of round 1 after the first (1..10 at 2..11s:
	// 9s) and of round 2 after its first (14..80s: 66s).
	if want := 75.0; g.GetGoodputSeconds() < want-0.01 || g.GetGoodputSeconds() > want+0.01 {
		t.Errorf("goodput %.3fs, want %.1fs", g.GetGoodputSeconds(), want)
	}
}
