package master

import (
	"context"
	"math"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/store"
	"google.golang.org/protobuf/proto"
)

// TestGoodputOverRPC drives a one-node job through a worker failure with
// the heartbeats an agent whose clock is an hour behind the master's
// sends: GetJob's goodput shows the restart's phases in the master's
// clock, the steps rolled back and the ratio; a heartbeat's events past
// the limit are dropped.
func TestGoodputOverRPC(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fc := &fakeClock{now: t0}
	_, c := startMaster(t, Config{Job: "j", Clock: fc})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	agent := func(d time.Duration) int64 { return t0.Add(d - time.Hour).UnixNano() } // the agent's clock
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	send := func(s session, sent time.Duration, np *roverv1.NodeProgress, events ...*roverv1.NodeEvent) {
		t.Helper()
		hb := &roverv1.Heartbeat{Progress: np, Events: events, SentUnixNanos: agent(sent)}
		if err := s.Send(&roverv1.SessionRequest{Msg: &roverv1.SessionRequest_Heartbeat{Heartbeat: hb}}); err != nil {
			t.Fatalf("send a heartbeat: %v", err)
		}
	}
	progress := func(round, step int64, at time.Duration) *roverv1.NodeProgress {
		return &roverv1.NodeProgress{Round: round, Workers: []*roverv1.WorkerProgress{{Step: step, StepUnixNanos: agent(at)}}}
	}
	ev := func(kind roverv1.NodeEventKind, round int64, at time.Duration) *roverv1.NodeEvent {
		return &roverv1.NodeEvent{Kind: kind, Round: round, TimeUnixNanos: agent(at)}
	}
	goodputUntil := func(what string, ok func(*roverv1.JobGoodput) bool) *roverv1.JobGoodput {
		t.Helper()
		return jobUntil(ctx, t, c, what, func(j *roverv1.GetJobResponse) bool { return ok(j.GetGoodput()) }).GetGoodput()
	}

	cfg := rdzvConfig(1, 1)
	cfg.MaxRestarts = 3
	s := openSessionRank(ctx, t, c, "a", 0, cfg)
	nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 1 })
	fc.advance(ms(500))
	send(s, ms(500), progress(1, 1, ms(500)), ev(roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED, 1, ms(100)))
	goodputUntil("the first step", func(g *roverv1.JobGoodput) bool { return g.GetPhase() == "training" })
	fc.advance(ms(1500))
	send(s, 2*time.Second, progress(1, 10, 2*time.Second))
	goodputUntil("step 10", func(g *roverv1.JobGoodput) bool { return g.GetStep() == 10 })

	// A worker dies at 2.3s (the agent's clock, an hour behind); the
	// master hears of it at 2.5s.
	fc.advance(ms(500))
	if _, err := c.ReportFailure(ctx, connect.NewRequest(&roverv1.ReportFailureRequest{NodeId: "a", Round: 1,
		Failures: []*roverv1.WorkerFailure{{Rank: 0, ExitCode: -9, Signal: 9, TimeUnixNanos: agent(ms(2300))}}})); err != nil {
		t.Fatal(err)
	}
	// Its agent vouches that the workers had completed step 11 (at 2.2s),
	// which no report carried.
	send(s, ms(2500), nil, &roverv1.NodeEvent{Kind: roverv1.NodeEventKind_NODE_EVENT_KIND_LAST_STEP, Round: 1, Step: 11,
		TimeUnixNanos: agent(ms(2200))})
	goodputUntil("the last step", func(g *roverv1.JobGoodput) bool { return g.GetStep() == 11 })
	fc.advance(ms(200))
	req := joinReq("a", cfg)
	req.Msg.Round, req.Msg.RequestedRank = 2, 0
	if _, err := c.Join(ctx, req); err != nil {
		t.Fatal(err)
	}
	nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 2 })
	fc.advance(ms(1300)) // 4.0s
	send(s, 4*time.Second, progress(2, 9, 4*time.Second),
		ev(roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED, 2, ms(2900)),
		ev(roverv1.NodeEventKind_NODE_EVENT_KIND_RESTORE_STARTED, 2, ms(3500)),
		&roverv1.NodeEvent{Kind: roverv1.NodeEventKind_NODE_EVENT_KIND_RESUMED, Round: 2, Step: 8,
			Source: roverv1.CheckpointSource_CHECKPOINT_SOURCE_MEMORY, TimeUnixNanos: agent(ms(3600))})
	g := goodputUntil("the restart's first step", func(g *roverv1.JobGoodput) bool {
		r := g.GetLatestRestarts()
		return len(r) == 1 && r[0].GetDone()
	})
	r := g.GetLatestRestarts()[0]
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-6 }
	for _, p := range []struct {
		name      string
		got, want float64
	}{
		{"detect", r.GetDetectSeconds(), 0.2}, {"stop", r.GetStopSeconds(), 0.2}, {"rendezvous", r.GetRendezvousSeconds(), 0},
		{"spawn", r.GetSpawnSeconds(), 0.2}, {"init", r.GetInitSeconds(), 0.6}, {"restore", r.GetRestoreSeconds(), 0.1},
		{"first step", r.GetFirstStepSeconds(), 0.4}, {"downtime", r.GetDowntimeSeconds(), 1.7},
	} {
		if !near(p.got, p.want) {
			t.Errorf("restart phase %s: %.3fs, want %.3fs", p.name, p.got, p.want)
		}
	}
	if r.GetRound() != 1 || r.GetNewRound() != 2 || !r.GetResumed() || r.GetResumedStep() != 8 ||
		r.GetSource() != roverv1.CheckpointSource_CHECKPOINT_SOURCE_MEMORY || r.GetLostSteps() != 3 {
		t.Errorf("restart %v, want round 1->2 resumed at step 8 from memory, 3 steps lost (to the last step)", r)
	}
	if g.GetRestarts() != 1 || g.GetLostSteps() != 3 || g.GetRatio() <= 0 || g.GetRatio() >= 1 || !near(g.GetWallSeconds(), 4) {
		t.Errorf("goodput %v, want 1 restart, 3 lost steps, a ratio in (0,1) over 4s", g)
	}
	if b := g.GetBadput(); len(b) == 0 || b[0].GetSeconds() < b[len(b)-1].GetSeconds() {
		t.Errorf("badput %v, want causes largest first", b)
	}
	if len(g.GetFailures()) != 1 {
		t.Errorf("failures by cause %v, want one", g.GetFailures())
	}

	// 70 saves in one heartbeat: the first 64 count.
	var saves []*roverv1.NodeEvent
	for i := range 70 {
		saves = append(saves, &roverv1.NodeEvent{Kind: roverv1.NodeEventKind_NODE_EVENT_KIND_CHECKPOINT_SAVED, Round: 2,
			Step: int64(10 + i), BlockingNanos: int64(time.Millisecond), TimeUnixNanos: agent(ms(4100))})
	}
	fc.advance(ms(200))
	send(s, ms(4200), progress(2, 12, ms(4200)), saves...)
	// One heartbeat: once any of its saves counts, all it takes do (a save
	// of a step above the newest report reports it: the step goes to 73).
	g = goodputUntil("the saves", func(g *roverv1.JobGoodput) bool { return g.GetSaves() > 0 })
	if g.GetSaves() != MaxNodeEvents {
		t.Errorf("%d saves counted from 70 events, want the first %d", g.GetSaves(), MaxNodeEvents)
	}
}

// TestAgentTime: an agent's time moves into the master's clock by the
// heartbeat's offset, and never after the receipt.
func TestAgentTime(t *testing.T) {
	now := time.Unix(1000, 0)
	off := offsetOf(time.Unix(400, 0).UnixNano(), now) // the agent is 600s behind
	for _, c := range []struct {
		off  clockOffset
		in   int64
		want time.Time
	}{
		{off, time.Unix(399, 0).UnixNano(), time.Unix(999, 0)},
		{off, time.Unix(500, 0).UnixNano(), now}, // after the receipt: clamped
		{off, 0, now},
		{offsetOf(0, now), time.Unix(1, 0).UnixNano(), now}, // no sent time
	} {
		if got := c.off.agentTime(c.in, now); !got.Equal(c.want) {
			t.Errorf("agentTime(%d) with %+v = %v, want %v", c.in, c.off, got, c.want)
		}
	}
}

// TestGoodputJournaled: what heartbeats feed the accounting is journaled
// with the next event that feeds it and by the tick, never once per
// heartbeat, and a master restored from the store shows the same goodput.
func TestGoodputJournaled(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	now := time.Unix(1000, 0)
	c := restoredCore(t, st, 2, now)
	join := func(id string, at time.Time) {
		t.Helper()
		joinNode(t, c, id, 2, 0, at)
	}
	records := func() int {
		t.Helper()
		got, err := st.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(got.Records)
	}
	join("a", now)
	join("b", now)
	beat := func(node string, round, step int64, at time.Time) {
		hb := &roverv1.Heartbeat{SentUnixNanos: at.UnixNano(), Progress: &roverv1.NodeProgress{Round: round,
			Workers: []*roverv1.WorkerProgress{{Step: step, StepUnixNanos: at.UnixNano()}}}}
		c.goodputHeartbeat(node, hb, at)
	}
	n := records()
	for i := range 20 {
		now = now.Add(time.Second)
		beat("a", 1, int64(10*(i+1)), now)
		beat("b", 1, int64(10*(i+1)), now)
	}
	if got := records(); got != n {
		t.Fatalf("heartbeats wrote %d journal records", got-n)
	}
	if err := c.tick(ctx, now); err != nil {
		t.Fatal(err)
	}
	if got := records(); got != n+2 {
		t.Fatalf("the tick wrote %d records, want the goodput state and its event", got-n)
	}
	if err := c.tick(ctx, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := records(); got != n+2 {
		t.Errorf("a tick within 30s of the last goodput record wrote %d more", got-n-2)
	}
	// More progress, then a failure: the state goes before the failure.
	for range 5 {
		now = now.Add(time.Second)
		beat("a", 1, 200+int64(now.Unix()), now)
	}
	fail := &jobstate.Event{Type: jobstate.EventWorkerFailed, Time: now.Add(time.Second), Node: "a", Round: 1, DiedAt: now.Add(500 * time.Millisecond)}
	if err := c.apply(ctx, fail); err != nil {
		t.Fatal(err)
	}
	join("a", now.Add(2*time.Second))
	join("b", now.Add(2*time.Second))
	end := now.Add(time.Minute)
	want := c.jobAt(end).GetGoodput()

	restored := newCore("job", st)
	if _, err := restored.restore(ctx, end); err != nil {
		t.Fatal(err)
	}
	got := restored.jobAt(end).GetGoodput()
	if !proto.Equal(want, got) {
		t.Errorf("restored goodput\n%v\nwant\n%v", got, want)
	}
	if want.GetRestarts() != 1 || want.GetPhase() != "spawn" || want.GetGoodputSeconds() <= 0 {
		t.Errorf("goodput %v, want a restart in its spawn after some goodput", want)
	}
}
