package jobstate

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/goodput"
	"github.com/roverml/rover/internal/jobconfig"
)

// gpStep is one step of a scripted job: a journaled event, or an input
// that comes between events (a heartbeat's progress or lifecycle event).
type gpStep struct {
	e  *Event
	hb func(g *Goodput)
}

func at(d time.Duration) time.Time { return t0.Add(d) }

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func progressStep(node string, round, step int64, t time.Duration) gpStep {
	return gpStep{hb: func(g *Goodput) { g.Progress(node, round, 0, step, at(t)) }}
}

func nodeStep(node string, e NodeEvent) gpStep {
	return gpStep{hb: func(g *Goodput) { g.Event(node, e) }}
}

func failure(node string, round int, died, t time.Duration) *Event {
	return &Event{Type: EventWorkerFailed, Time: at(t), Node: node, Round: round, DiedAt: at(died),
		Failures: []json.RawMessage{json.RawMessage(`{"NodeID":"` + node + `","Rank":0,"Signal":9,"ExitCode":-9,"Round":` + itoa(round) + `}`)}}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func joinAt(id string, t time.Duration) *Event { return joinEvent(id, at(t)) }

// gpScript is a two-node job: round 1 trains to step 30, a worker of a is
// killed (round 2, resumed from memory at step 28), node b is lost and
// comes back (round 4), and the job succeeds.
func gpScript() []gpStep {
	round := func(r int64, t time.Duration, resumed int64, from goodput.Source) []gpStep {
		var out []gpStep
		for _, e := range []NodeEvent{
			{Kind: WorkersStarted, Round: r, At: at(t)},
			{Kind: RestoreStarted, Round: r, At: at(t + ms(500))},
			{Kind: Resumed, Round: r, Step: resumed, From: from, At: at(t + ms(600))},
		} {
			out = append(out, nodeStep("a", e), nodeStep("b", e))
		}
		return out
	}
	s := []gpStep{
		{e: &Event{Type: EventConfigure, Time: at(0), Config: twoNodeConfig()}},
		{e: joinAt("a", ms(100))}, {e: joinAt("b", ms(200))}, // round 1
	}
	s = append(s, round(1, ms(300), -1, goodput.FromNothing)...)
	for step := int64(1); step <= 30; step++ {
		s = append(s, progressStep("a", 1, step, time.Second+time.Duration(step)*ms(100)))
		if step%10 == 0 {
			s = append(s, nodeStep("a", NodeEvent{Kind: CheckpointSaved, Round: 1, Step: step, Blocking: ms(5), At: at(time.Second + time.Duration(step)*ms(100))}))
		}
	}
	s = append(s,
		gpStep{e: failure("a", 1, ms(4050), ms(4100))},
		gpStep{e: joinAt("a", ms(4300))}, gpStep{e: joinAt("b", ms(4400))}) // round 2
	s = append(s, round(2, ms(4500), 28, goodput.FromMemory)...)
	for step := int64(29); step <= 40; step++ {
		s = append(s, progressStep("b", 2, step, ms(5500)+time.Duration(step-28)*ms(100)))
	}
	s = append(s,
		gpStep{e: &Event{Type: EventNodeLost, Time: at(ms(7000)), Node: "b", Reason: "silent"}}, // round 3 opens
		gpStep{e: joinAt("a", ms(7100))},
		gpStep{e: joinAt("b", ms(9000))}) // round 3 forms
	s = append(s, round(3, ms(9100), 40, goodput.FromStorage)...)
	for step := int64(41); step <= 50; step++ {
		s = append(s, progressStep("a", 3, step, ms(10000)+time.Duration(step-40)*ms(100)))
	}
	s = append(s,
		gpStep{e: &Event{Type: EventNodeSucceeded, Time: at(ms(11200)), Node: "a", Round: 3}},
		gpStep{e: &Event{Type: EventNodeSucceeded, Time: at(ms(11300)), Node: "b", Round: 3}})
	return s
}

// drive applies steps to s as the master's core does: a journaled event
// goes after the goodput state when heartbeats changed it (EventGoodput),
// both appended to journal.
func drive(t *testing.T, s *State, journal *[][]byte, steps []gpStep) {
	t.Helper()
	for _, st := range steps {
		if st.hb != nil {
			st.hb(s.Goodput)
			continue
		}
		if s.Goodput.Dirty() {
			b, err := s.Goodput.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			rec, _ := (&Event{Type: EventGoodput, Goodput: b}).Marshal()
			*journal = append(*journal, rec)
		}
		rec, err := st.e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		*journal = append(*journal, rec)
		_, _ = s.Apply(st.e)
	}
}

func replayJournal(t *testing.T, journal [][]byte) *State {
	t.Helper()
	s := NewState(sameString, jsonFailures{})
	for i, rec := range journal {
		e, err := UnmarshalEvent(rec)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		_, _ = s.Apply(e)
	}
	s.Live = true
	return s
}

func newLiveState() *State {
	s := NewState(sameString, jsonFailures{})
	s.Live = true
	return s
}

// TestGoodputFromEvents: the events Apply sees and the heartbeats' inputs
// make the job's goodput: restarts with their phases and causes, the steps
// rolled back, the end.
func TestGoodputFromEvents(t *testing.T) {
	s := newLiveState()
	var journal [][]byte
	drive(t, s, &journal, gpScript())
	v := s.Goodput.View(at(ms(20000)))
	if v.Phase != "ended" || v.Round != 3 || v.Step != 50 {
		t.Errorf("phase %s round %d step %d, want ended in round 3 at step 50", v.Phase, v.Round, v.Step)
	}
	if v.Wall != ms(11300) {
		t.Errorf("wall %v, want 11.3s (launch to the job's end)", v.Wall)
	}
	if v.Ratio <= 0 || v.Ratio >= 1 {
		t.Errorf("ratio %v, want within (0,1)", v.Ratio)
	}
	if v.Restarts != 2 || len(v.Latest) != 2 {
		t.Fatalf("%d restarts (%d kept), want 2: %+v", v.Restarts, len(v.Latest), v.Latest)
	}
	if v.Lost != 2 {
		t.Errorf("lost %d steps, want 2 (29 and 30, resumed from 28)", v.Lost)
	}
	if v.Saves != 3 || v.Badput[goodput.Checkpoint] != 3*ms(5) {
		t.Errorf("saves %d blocking %v, want 3 saves of 5ms", v.Saves, v.Badput[goodput.Checkpoint])
	}
	first, second := v.Latest[0], v.Latest[1]
	want := goodput.Restart{Round: 1, NewRound: 2, Reason: first.Reason,
		Detect: ms(50), Stop: ms(300), Rendezvous: 0, Spawn: ms(100), Init: ms(500), Restore: ms(100), FirstStep: ms(500),
		Resumed: true, ResumedStep: 28, From: goodput.FromMemory, LostSteps: 2, Lost: first.Lost, Done: true,
		Nodes: []goodput.NodeRestore{{Node: "a", Step: 28, From: goodput.FromMemory}, {Node: "b", Step: 28, From: goodput.FromMemory}}}
	if diff := cmp.Diff(want, first); diff != "" {
		t.Errorf("the failure's restart (-want +got):\n%s", diff)
	}
	if first.Reason == "" || v.Failures[first.Reason] != 1 {
		t.Errorf("the failure's cause %q counted %v, want once", first.Reason, v.Failures)
	}
	if second.Round != 2 || second.NewRound != 3 || second.Reason != "membership" || !second.Done || second.From != goodput.FromStorage {
		t.Errorf("the loss's restart %+v, want round 2->3 for membership, resumed from storage", second)
	}
	// b was lost at 7.0s: stopped at once; a stopped when it joined at 7.1s.
	if second.Stop != ms(100) || second.Rendezvous != ms(1900) {
		t.Errorf("the loss's stop %v and rendezvous %v, want 100ms and 1.9s", second.Stop, second.Rendezvous)
	}
	if r, ok := s.Goodput.TakeRestart(at(ms(20000))); !ok || r.NewRound != 3 {
		t.Errorf("TakeRestart %+v %v, want the completed restart to round 3", r, ok)
	}
	if _, ok := s.Goodput.TakeRestart(at(ms(20000))); ok {
		t.Errorf("TakeRestart returned a restart twice")
	}
}

// TestGoodputMasterRestart: a master restarted at any journaled event (its
// journal replayed, or its snapshot restored) and then driven on reports
// the same goodput as one that never restarted.
func TestGoodputMasterRestart(t *testing.T) {
	script := gpScript()
	whole := newLiveState()
	var journal [][]byte
	drive(t, whole, &journal, script)
	end := at(ms(20000))
	want := whole.Goodput.View(end)
	restarts := 0
	for i, st := range script {
		if st.e == nil {
			continue // a restart loses the heartbeats after the last record: the next report makes up for them
		}
		restarts++
		live := newLiveState()
		var before [][]byte
		drive(t, live, &before, script[:i+1])
		replayed := replayJournal(t, before)
		snap, err := live.MarshalSnapshot("run")
		if err != nil {
			t.Fatal(err)
		}
		restored := NewState(sameString, jsonFailures{})
		if err := restored.RestoreSnapshot(snap, "run"); err != nil {
			t.Fatalf("step %d: restore the snapshot: %v", i, err)
		}
		restored.Live = true
		for name, s := range map[string]*State{"replayed": replayed, "restored": restored} {
			var rest [][]byte
			drive(t, s, &rest, script[i+1:])
			if diff := cmp.Diff(want, s.Goodput.View(end)); diff != "" {
				t.Errorf("restarted at step %d (%s), the goodput differs (-uninterrupted +%s):\n%s", i, st.e.Type, name, diff)
			}
		}
	}
	if restarts < 10 {
		t.Errorf("restarted at %d events only", restarts)
	}
}

// TestGoodputOldSnapshot: a snapshot written before the accounting
// existed restores without it; the job is accounted from its next round.
func TestGoodputOldSnapshot(t *testing.T) {
	s := NewState(sameString, jsonFailures{})
	for _, e := range []*Event{{Type: EventConfigure, Time: t0, Config: twoNodeConfig()}, joinAt("a", 0)} {
		if _, err := s.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := NewState(sameString, jsonFailures{}).MarshalSnapshot("run"); strings.Contains(string(b), `"goodput"`) {
		t.Fatalf("a job not launched snapshots its goodput: %s", b)
	}
	withGoodput, err := s.MarshalSnapshot("run")
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage // the snapshot as an older master wrote it
	if err := json.Unmarshal(withGoodput, &fields); err != nil || fields["goodput"] == nil {
		t.Fatalf("the snapshot of a configured job has no goodput (%v): %s", err, withGoodput)
	}
	delete(fields, "goodput")
	b, _ := json.Marshal(fields)
	restored := NewState(sameString, jsonFailures{})
	if err := restored.RestoreSnapshot(b, "run"); err != nil {
		t.Fatal(err)
	}
	if restored.Goodput.Launched() {
		t.Fatalf("an old snapshot restored a launched accounting")
	}
	if _, err := restored.Apply(joinAt("b", time.Second)); err != nil {
		t.Fatal(err)
	}
	if v := restored.Goodput.View(at(2 * time.Second)); v.Phase != "startup" || v.Round != 1 || v.Wall != time.Second {
		t.Errorf("after the round formed: phase %s round %d wall %v, want startup in round 1 for 1s", v.Phase, v.Round, v.Wall)
	}
	bad := strings.Replace(string(b), `"schema":1`, `"schema":1,"goodput":{"machine":{"schema":99}}`, 1)
	if err := NewState(sameString, jsonFailures{}).RestoreSnapshot([]byte(bad), "run"); err == nil {
		t.Errorf("restored a snapshot with a bad goodput state")
	}
}

// TestGoodputHostileProgress: steps going back, a step of 2^63-1, a node of
// an old round and times before launch keep the ratio within 0..1.
func TestGoodputHostileProgress(t *testing.T) {
	s := newLiveState()
	var journal [][]byte
	drive(t, s, &journal, []gpStep{
		{e: &Event{Type: EventConfigure, Time: at(0), Config: twoNodeConfig()}},
		{e: joinAt("a", ms(100))}, {e: joinAt("b", ms(200))},
		progressStep("a", 1, 10, time.Second),
		progressStep("a", 1, 1<<63-1, 2*time.Second),
		progressStep("a", 1, 3, 3*time.Second),
		progressStep("b", 0, 50, 4*time.Second),
		progressStep("zz", 1, 60, 5*time.Second),
		progressStep("a", 1, 12, -time.Hour),
		nodeStep("a", NodeEvent{Kind: CheckpointSaved, Round: 1, Step: 1, Blocking: 1 << 62, At: at(6 * time.Second)}),
		nodeStep("a", NodeEvent{Kind: Resumed, Round: 1, Step: -5, At: at(7 * time.Second)}),
	})
	v := s.Goodput.View(at(10 * time.Second))
	if v.Ratio < 0 || v.Ratio > 1 || v.Wall != 10*time.Second {
		t.Errorf("ratio %v wall %v, want within 0..1 over 10s", v.Ratio, v.Wall)
	}
}

// TestGoodputOverlays: a restart round open below its minimum once the old
// world's nodes stopped is waiting for nodes; a node check is node check
// time, whatever the phase under it.
func TestGoodputOverlays(t *testing.T) {
	s := newLiveState()
	var journal [][]byte
	drive(t, s, &journal, []gpStep{
		{e: &Event{Type: EventConfigure, Time: at(0), Config: twoNodeConfig()}},
		{e: joinAt("a", 0)}, {e: joinAt("b", 0)},
		progressStep("a", 1, 1, time.Second),
		progressStep("a", 1, 2, 2*time.Second),
		{e: &Event{Type: EventNodeLost, Time: at(3 * time.Second), Node: "b", Reason: "silent"}}, // round 2 opens
		{e: joinAt("a", 4*time.Second)},                                                          // every old node stopped; one of two joined
		{e: joinAt("b", 14*time.Second)},
	})
	v := s.Goodput.View(at(14 * time.Second))
	if w, st := v.Badput[goodput.WaitingForNodes], v.Latest[0].Stop; w != 10*time.Second || st != time.Second || v.Badput[goodput.Rendezvous] != 0 {
		t.Errorf("waiting %v, stop %v, rendezvous %v; want 10s, 1s and none", w, st, v.Badput[goodput.Rendezvous])
	}

	cfg := twoNodeConfig()
	cfg.NodeCheck = &jobconfig.NodeCheck{}
	s = newLiveState()
	drive(t, s, &journal, []gpStep{
		{e: &Event{Type: EventConfigure, Time: at(0), Config: cfg}},
		{e: joinAt("a", time.Second)}, {e: joinAt("b", time.Second)}, // the check starts
		{e: &Event{Type: EventNodeLost, Time: at(6 * time.Second), Node: "b", Reason: "silent"}}, // and is cancelled
	})
	v = s.Goodput.View(at(10 * time.Second))
	// Startup until the world formed, the check until the loss, then the
	// stop of the restart the loss began.
	if c := v.Badput[goodput.NodeCheck]; c != 5*time.Second || v.Badput[goodput.Startup] != time.Second || v.Badput[goodput.Stopping] != 4*time.Second {
		t.Errorf("node check %v, startup %v, stopping %v; want 5s, 1s, 4s", c, v.Badput[goodput.Startup], v.Badput[goodput.Stopping])
	}
}

// TestGoodputResumeOfItsOwn: workers that loaded no Rover checkpoint (step
// -1) may have loaded one of their own: the round's first report says the
// step, not a resume from step 0.
func TestGoodputResumeOfItsOwn(t *testing.T) {
	s := newLiveState()
	var journal [][]byte
	drive(t, s, &journal, []gpStep{
		{e: &Event{Type: EventConfigure, Time: at(0), Config: twoNodeConfig()}},
		{e: joinAt("a", 0)}, {e: joinAt("b", 0)},
		progressStep("a", 1, 1, time.Second),
		progressStep("a", 1, 25, 3*time.Second),
		{e: failure("a", 1, 4*time.Second, 4*time.Second)},
		{e: joinAt("a", 5*time.Second)}, {e: joinAt("b", 5*time.Second)},
		nodeStep("a", NodeEvent{Kind: Resumed, Round: 2, Step: -1, At: at(6 * time.Second)}),
		nodeStep("b", NodeEvent{Kind: Resumed, Round: 2, Step: -1, At: at(6 * time.Second)}),
		progressStep("a", 2, 21, 7*time.Second), // it restored step 20 by itself
	})
	if v := s.Goodput.View(at(8 * time.Second)); v.Lost != 5 || v.Latest[0].ResumedStep != 20 {
		t.Errorf("lost %d steps, resumed from %d; want 5 lost from step 20", v.Lost, v.Latest[0].ResumedStep)
	}
}
