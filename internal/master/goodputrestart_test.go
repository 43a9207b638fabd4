package master

import (
	"context"
	"fmt"
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
//
// The master is killed at several points of round 2: before its first
// step, and within and after goodputJournalEvery of it (when what moved the
// accounting came only by heartbeats, which the agents do not send again).
func TestGoodputAcrossMasterRestart(t *testing.T) {
	for _, kill := range []float64{13.7, 14.5, 20, 40} {
		t.Run(fmt.Sprintf("killed at %vs", kill), func(t *testing.T) { goodputAcrossMasterRestart(t, kill) })
	}
}

func goodputAcrossMasterRestart(t *testing.T, killAt float64) {
	ctx := context.Background()
	st := store.NewMemory()
	t0 := time.Unix(1000, 0)
	c := restoredCore(t, st, 2, t0)
	join := func(c *core, id string, round int, at time.Time) {
		t.Helper()
		joinNode(t, c, id, 2, round, at)
		if err := c.connected(id, true, at); err != nil {
			t.Fatal(err)
		}
	}
	ev := func(kind roverv1.NodeEventKind, round int64, at time.Time) *roverv1.NodeEvent {
		return &roverv1.NodeEvent{Kind: kind, Round: round, TimeUnixNanos: at.UnixNano()}
	}
	restarts := 0
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
			logRestart(c.log, *done, c.peerRestores(int(done.NewRound)))
			restarts++
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
	// Round 2: started at 13s, resumed from step 10 at 13.5s, a step a
	// second from 14s; the master is killed at killAt and back 5s later,
	// its state what its store holds. The agents' heartbeats go on to
	// whichever master serves; what the dead one was sent is gone.
	cur := c
	restartMaster := func(at float64) {
		cur = restoredCore(t, st, 2, sec(at+5))
		for s := at + 5; s < at+8; s++ { // the agents' backoff
			if err := cur.tick(ctx, sec(s)); err != nil {
				t.Fatal(err)
			}
		}
		join(cur, "a", 2, sec(at+8))
		join(cur, "b", 2, sec(at+8))
	}
	if killAt < 13.5 {
		for _, n := range []string{"a", "b"} {
			beat(cur, n, 2, 0, sec(13), ev(roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED, 2, sec(13)))
		}
		restartMaster(killAt)
	}
	for _, n := range []string{"a", "b"} {
		var evs []*roverv1.NodeEvent
		if killAt >= 13.5 {
			evs = append(evs, ev(roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED, 2, sec(13)))
		}
		evs = append(evs, &roverv1.NodeEvent{Kind: roverv1.NodeEventKind_NODE_EVENT_KIND_RESUMED, Round: 2, Step: 10,
			Source: roverv1.CheckpointSource_CHECKPOINT_SOURCE_MEMORY, TimeUnixNanos: sec(13.5).UnixNano()})
		beat(cur, n, 2, 0, sec(13.5), evs...)
	}
	// The master's tick (every 50ms) follows: a kill within that window
	// loses the events, as documented.
	if err := cur.tick(ctx, sec(13.55)); err != nil {
		t.Fatal(err)
	}
	step := int64(10)
	for at := 14.0; at <= 80; at++ {
		if killAt >= 13.5 && at > killAt && at <= killAt+8 {
			step++ // the workers go on while no master serves
			continue
		}
		if killAt >= 13.5 && at > killAt+8 && cur == c {
			restartMaster(killAt)
		}
		step++
		beat(cur, "a", 2, step, sec(at))
		beat(cur, "b", 2, step, sec(at))
		if err := cur.tick(ctx, sec(at)); err != nil {
			t.Fatal(err)
		}
	}
	c2 := cur
	if restarts != 1 {
		t.Errorf("%d restarts logged, want 1", restarts)
	}
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

// TestClockOffsetsOfLostNodesArePruned: a job that loses and replaces
// nodes for ever keeps clock offsets for about as many nodes as it has.
func TestClockOffsetsOfLostNodesArePruned(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(1000, 0)
	c := newCore("job", store.NewMemory())
	if _, err := c.restore(ctx, t0); err != nil {
		t.Fatal(err)
	}
	rc := rdzvConfig(1, 4)
	rc.MaxRestarts = 10_000
	cfg, err := validateRendezvous(rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.configure(ctx, *cfg, t0); err != nil {
		t.Fatal(err)
	}
	most := 0
	for i := range 1000 {
		id := fmt.Sprintf("n%d", i)
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		req, _, err := validateJoin(joinReq(id, rc).Msg)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.join(ctx, req, memoryReport{}, 0, at); err != nil {
			t.Fatalf("node %d: %v (%v)", i, err, c.job())
		}
		c.goodputHeartbeat(id, &roverv1.Heartbeat{SentUnixNanos: at.UnixNano()}, at)
		if err := c.apply(ctx, &jobstate.Event{Type: jobstate.EventNodeLost, Time: at, Node: id, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		most = max(most, len(c.offsets))
		c.mu.Unlock()
	}
	if most > 2*minOffsetsPrune {
		t.Errorf("%d clock offsets held for a job of at most 4 nodes, want at most %d", most, 2*minOffsetsPrune)
	}
}
