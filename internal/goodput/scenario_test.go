package goodput

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// at is t0 plus sec seconds; sec is seconds as a duration.
func at(sec float64) time.Time { return t0.Add(sec2(sec)) }
func sec2(sec float64) time.Duration {
	return time.Duration(sec * float64(time.Second))
}

func newMachine(t testing.TB) *Machine {
	t.Helper()
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// event is one step of a scripted timeline.
type event func(m *Machine)

func launched(s float64) event { return func(m *Machine) { m.Launched(at(s)) } }
func formed(r int64, s float64, nodes ...string) event {
	return func(m *Machine) { m.RoundFormed(r, nodes, at(s)) }
}
func step(r int64, node string, st int64, s float64) event {
	return func(m *Machine) { m.Progress(Progress{Round: r, Node: node, Step: st, At: at(s)}) }
}
func failed(r int64, node, cause string, died, s float64) event {
	return func(m *Machine) {
		f := Failure{Round: r, Node: node, Cause: cause, At: at(s)}
		if died > 0 {
			f.DiedAt = at(died)
		}
		m.WorkerFailed(f)
	}
}
func stoppedRound(r int64, why StopReason, s float64) event {
	return func(m *Machine) { m.RoundStopped(r, why, at(s)) }
}
func workersStopped(r int64, node string, s float64) event {
	return func(m *Machine) { m.WorkersStopped(r, node, at(s)) }
}
func started(r int64, node string, s float64) event {
	return func(m *Machine) { m.WorkersStarted(r, node, at(s)) }
}
func restoreBegun(r int64, node string, s float64) event {
	return func(m *Machine) { m.RestoreStarted(r, node, at(s)) }
}
func resumed(r int64, node string, st int64, from Source, s float64) event {
	return func(m *Machine) { m.Resumed(r, node, st, from, at(s)) }
}
func saved(r int64, node string, st int64, blocking float64, durable bool, s float64) event {
	return func(m *Machine) {
		m.CheckpointSaved(Save{Round: r, Node: node, Step: st, Blocking: sec2(blocking), Durable: durable, At: at(s)})
	}
}
func endedAt(ok bool, s float64) event { return func(m *Machine) { m.Ended(ok, at(s)) } }

func play(m *Machine, evs []event) {
	for _, e := range evs {
		e(m)
	}
}

// restartTimeline is a 2-node job with one worker failure and a restart
// that resumes from memory 3 steps after the last reported step.
func restartTimeline() []event {
	return []event{
		launched(0),
		formed(1, 1, "a", "b"),
		step(1, "a", 1, 10),  // startup 10 s
		step(1, "a", 11, 20), // 1 s a step
		step(1, "b", 21, 30),
		failed(1, "a", "oom", 35.5, 36), // 5.5 s of tail, 0.5 s detection
		workersStopped(1, "a", 37),
		workersStopped(1, "b", 38), // stop 2 s
		formed(2, 40, "a", "b"),    // rendezvous 2 s
		started(2, "a", 41),
		started(2, "b", 42),      // spawn 2 s
		restoreBegun(2, "a", 44), // init 2 s
		resumed(2, "a", 24, FromMemory, 45),
		resumed(2, "b", 24, FromMemory, 45.5), // restore 1.5 s; 3 of the tail's 5.5 s kept
		step(2, "a", 25, 47),                  // first step 1.5 s
		step(2, "b", 35, 57),
		stoppedRound(2, StopSuccess, 60), // the workers' teardown since their last step: stopping 3 s
		endedAt(true, 61),                // stopping 1 s
	}
}

func TestRestartPhases(t *testing.T) {
	m := newMachine(t)
	play(m, restartTimeline())
	v := m.View(at(100))
	want := [NumCauses]time.Duration{
		Startup: sec2(10), FailureDetection: sec2(0.5), Stopping: sec2(6), Rendezvous: sec2(2),
		WorkerStart: sec2(5.5), Restoring: sec2(1.5), LostProgress: sec2(2.5),
	}
	if diff := cmp.Diff(want, v.Badput); diff != "" {
		t.Errorf("badput (-want +got):\n%s", diff)
	}
	if v.Goodput != sec2(33) || v.Wall != sec2(61) {
		t.Errorf("goodput %v of wall %v, want 33s of 61s", v.Goodput, v.Wall)
	}
	if want := 33.0 / 61; v.Ratio != want {
		t.Errorf("ratio %v, want %v", v.Ratio, want)
	}
	wantR := []Restart{{
		Round: 1, NewRound: 2, Reason: "oom",
		Detect: sec2(0.5), Stop: sec2(2), Rendezvous: sec2(2), Spawn: sec2(2), Init: sec2(2),
		Restore: sec2(1.5), FirstStep: sec2(1.5),
		Resumed: true, ResumedStep: 24, From: FromMemory, Lost: sec2(2.5), Done: true,
	}}
	if diff := cmp.Diff(wantR, v.Latest); diff != "" {
		t.Errorf("restarts (-want +got):\n%s", diff)
	}
	if got := v.Latest[0].Downtime(); got != sec2(11.5) {
		t.Errorf("downtime %v, want 11.5s", got)
	}
	if v.Restarts != 1 || v.Failures["oom"] != 1 || v.Step != 35 || v.Phase != "ended" {
		t.Errorf("view %+v", v)
	}
}

// rollbackTimeline: 1 s a step; a memory restore loses 10 steps, then a
// storage restore goes back 21 more, over steps of both rounds.
func rollbackTimeline(from2 int64, src2 Source) []event {
	return []event{
		launched(0),
		formed(1, 0, "a"),
		step(1, "a", 1, 10),
		step(1, "a", 11, 20),
		step(1, "a", 21, 30),
		step(1, "a", 31, 40),
		failed(1, "a", "signal", 0, 40),
		formed(2, 42, "a"),
		resumed(2, "a", 21, FromMemory, 43),
		resumed(2, "a", 21, FromMemory, 43), // a duplicate changes nothing
		step(2, "a", 22, 44),
		step(2, "a", 32, 54),
		failed(2, "a", "signal", 0, 54),
		formed(3, 56, "a"),
		resumed(3, "a", from2, src2, 57),
		step(3, "a", from2+1, 58),
		endedAt(true, 60),
	}
}

func TestRollbackCountsLostStepsOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		from      int64
		src       Source
		lost      time.Duration
		lostSteps int64
	}{
		// Round 2 lost steps 21..31 of round 1; round 3 resuming at 32
		// loses nothing more.
		{"memory", 32, FromMemory, sec2(10), 10},
		// Resuming at 11 also loses 11..21 of round 1 and 21..32 of round
		// 2, each once.
		{"storage", 11, FromStorage, sec2(30), 31},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t)
			play(m, rollbackTimeline(tc.from, tc.src))
			v := m.View(at(60))
			if v.Badput[LostProgress] != tc.lost || v.Lost != tc.lostSteps {
				t.Errorf("lost %v (%d steps), want %v (%d)", v.Badput[LostProgress], v.Lost, tc.lost, tc.lostSteps)
			}
			if v.Wall != sec2(60) {
				t.Errorf("wall %v", v.Wall)
			}
			checkInvariants(t, m, at(60))
			if r := v.Latest[len(v.Latest)-1]; r.From != tc.src || r.ResumedStep != tc.from {
				t.Errorf("last restart %+v", r)
			}
		})
	}
}

func TestOverlappingCausesCountOnce(t *testing.T) {
	t.Run("hang during node check", func(t *testing.T) {
		m := newMachine(t)
		play(m, []event{launched(0), formed(1, 0, "a"), step(1, "a", 1, 10), step(1, "a", 6, 15)})
		m.NodeCheckStarted(at(20))
		m.HangDetected(at(25)) // the 5 s of training before the check is the hang's
		m.NodeCheckEnded(at(30))
		m.HangEnded(at(35))
		v := m.View(at(35))
		if v.Badput[NodeCheck] != sec2(10) || v.Badput[Hang] != sec2(10) || v.Goodput != sec2(5) || v.Wall != sec2(35) {
			t.Errorf("node check %v, hang %v, goodput %v, wall %v; want 10s, 10s, 5s, 35s",
				v.Badput[NodeCheck], v.Badput[Hang], v.Goodput, v.Wall)
		}
	})
	t.Run("failure while stopping", func(t *testing.T) {
		m := newMachine(t)
		evs := restartTimeline()
		evs = append(evs[:6:6], append([]event{
			failed(1, "b", "collective", 36.5, 37), // a consequence: same restart
			stoppedRound(1, StopFailure, 37),
		}, evs[6:]...)...)
		play(m, evs)
		ref := newMachine(t)
		play(ref, restartTimeline())
		if diff := cmp.Diff(ref.View(at(61)), m.View(at(61))); diff != "" {
			t.Errorf("a second failure while stopping changed the view (-want +got):\n%s", diff)
		}
	})
	t.Run("waiting for nodes during rendezvous", func(t *testing.T) {
		m := newMachine(t)
		evs := restartTimeline()
		play(m, evs[:8]) // stopped at 38
		m.WaitingForNodes(at(38.5))
		m.NodeCheckStarted(at(39))
		m.NodesJoined(at(39.5))
		m.NodeCheckEnded(at(39.8))
		play(m, evs[8:])
		v := m.View(at(61))
		if v.Badput[Rendezvous] != sec2(0.7) || v.Badput[WaitingForNodes] != sec2(0.5) || v.Badput[NodeCheck] != sec2(0.8) {
			t.Errorf("rendezvous %v, waiting %v, node check %v", v.Badput[Rendezvous], v.Badput[WaitingForNodes], v.Badput[NodeCheck])
		}
		if v.Latest[0].Rendezvous != sec2(2) || v.Wall != sec2(61) {
			t.Errorf("rendezvous phase %v, wall %v", v.Latest[0].Rendezvous, v.Wall)
		}
	})
}

func TestCheckpointBlocking(t *testing.T) {
	m := newMachine(t)
	play(m, []event{
		launched(0), formed(1, 0, "a", "b"), step(1, "a", 1, 10), step(1, "a", 11, 20),
		saved(1, "a", 11, 0.5, false, 20.5),
		saved(1, "b", 11, 0.3, false, 20.6), // the same save: the largest counts
		saved(1, "a", 11, 0.5, false, 20.6), // a duplicate
		step(1, "b", 21, 30),
		saved(1, "a", 21, 0.2, true, 30),
	})
	v := m.View(at(30))
	if v.Badput[Checkpoint] != sec2(0.7) || v.Goodput != sec2(19.3) || v.Saves != 2 {
		t.Errorf("checkpoint %v, goodput %v, saves %d; want 0.7s, 19.3s, 2", v.Badput[Checkpoint], v.Goodput, v.Saves)
	}
	checkInvariants(t, m, at(30))
}

func TestSamplesBounded(t *testing.T) {
	m, err := New(Config{MaxSamples: 16})
	if err != nil {
		t.Fatal(err)
	}
	play(m, []event{launched(0), formed(1, 0, "a")})
	for i := int64(1); i <= 10000; i++ {
		m.Progress(Progress{Round: 1, Node: "a", Step: i, At: at(float64(i))})
		if i%1000 == 0 {
			m.CheckpointSaved(Save{Round: 1, Node: "a", Step: i - 500, Durable: true, At: at(float64(i))})
		}
		if len(m.samples) > 16 {
			t.Fatalf("%d samples at step %d", len(m.samples), i)
		}
	}
	play(m, []event{failed(1, "a", "x", 0, 10000), formed(2, 10001, "a"), resumed(2, "a", 9500, FromStorage, 10002)})
	// 1 s a step; the coarser samples after the cap still interpolate
	// linearly, so the 500 steps lost are 500 s.
	if got := m.View(at(10002)).Badput[LostProgress]; got < sec2(499) || got > sec2(501) {
		t.Errorf("lost %v, want about 500s", got)
	}
	checkInvariants(t, m, at(10002))
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{KeepRestarts: -1, MaxSamples: 2}).Validate(); err == nil {
		t.Fatal("bad config accepted")
	} else if got := err.Error(); !strings.Contains(got, "KeepRestarts") || !strings.Contains(got, "MaxSamples") {
		t.Errorf("error %q does not name both fields", got)
	}
	if _, err := New(Config{MaxSamples: MaxSamplesLimit + 1}); err == nil {
		t.Error("New accepted a bad config")
	}
}

// TestRestartWithoutRestoreReport: with no Resumed (a script that restores
// by itself), the first report of the new round implies the resume: just
// before its step.
func TestRestartWithoutRestoreReport(t *testing.T) {
	m := newMachine(t)
	play(m, []event{
		launched(0), formed(1, 0, "a"),
		step(1, "a", 1, 10), step(1, "a", 11, 20), step(1, "a", 21, 30),
		failed(1, "a", "signal", 0, 32), // 2 s into steps after 21
		formed(2, 33, "a"),
		started(2, "a", 34),
		step(2, "a", 13, 40), // resumed at 12: steps 12..21 and the tail lost
	})
	v := m.View(at(40))
	want := [NumCauses]time.Duration{Startup: sec2(10), Stopping: sec2(1), WorkerStart: sec2(7), LostProgress: sec2(11)}
	if diff := cmp.Diff(want, v.Badput); diff != "" {
		t.Errorf("badput (-want +got):\n%s", diff)
	}
	if r := v.Latest[0]; r.ResumedStep != 12 || r.From != FromNothing || r.LostSteps != 9 || !r.Done {
		t.Errorf("restart %+v", r)
	}
	checkInvariants(t, m, at(40))
}

// TestFirstReportCoversSeveralSteps: the steps a round's first report
// covers beyond its first are goodput, at the latest step time.
func TestFirstReportCoversSeveralSteps(t *testing.T) {
	evs := restartTimeline()
	evs[14] = step(2, "a", 26, 47) // was step 25
	m := newMachine(t)
	play(m, evs)
	v := m.View(at(61))
	if r := v.Latest[0]; r.FirstStep != sec2(0.5) {
		t.Errorf("first step %v, want 0.5s", r.FirstStep)
	}
	if v.Goodput != sec2(34) || v.Badput[WorkerStart] != sec2(4.5) {
		t.Errorf("goodput %v, worker start %v; want 34s, 4.5s", v.Goodput, v.Badput[WorkerStart])
	}
	checkInvariants(t, m, at(61))
}

// TestHangCountsFromLastStep: a hang is declared a timeout after the last
// step; the whole time since that step is the hang's.
func TestHangCountsFromLastStep(t *testing.T) {
	m := newMachine(t)
	play(m, []event{launched(0), formed(1, 0, "a"), step(1, "a", 1, 10), step(1, "a", 11, 20)})
	m.HangDetected(at(320))
	if v := m.View(at(325)); v.Badput[Hang] != sec2(305) || v.Goodput != sec2(10) {
		t.Errorf("during the hang: hang %v, goodput %v", v.Badput[Hang], v.Goodput)
	}
	m.HangEnded(at(330))
	play(m, []event{step(1, "a", 12, 331)})
	v := m.View(at(331))
	if v.Badput[Hang] != sec2(310) || v.Goodput != sec2(11) {
		t.Errorf("hang %v, goodput %v; want 310s, 11s", v.Badput[Hang], v.Goodput)
	}
}

// TestMembershipStop: a round stopped for a membership change is a
// restart like a failure's, without detection.
func TestMembershipStop(t *testing.T) {
	m := newMachine(t)
	play(m, []event{
		launched(0), formed(1, 0, "a", "b"), step(1, "a", 1, 10), step(1, "a", 11, 20),
		stoppedRound(1, StopMembership, 21),
		workersStopped(1, "a", 22), workersStopped(1, "b", 22),
		formed(2, 23, "a", "b", "c"),
		resumed(2, "a", 11, FromMemory, 25),
	})
	v := m.View(at(25))
	if r := v.Latest[0]; r.Reason != "membership" || r.Detect != 0 || r.Stop != sec2(1) || r.Rendezvous != sec2(1) || r.Spawn != sec2(2) {
		t.Errorf("restart %+v", r)
	}
	if v.Badput[LostProgress] != sec2(1) || v.Phase != "restore" || v.Failures["membership"] != 0 {
		t.Errorf("lost %v, phase %s, failures %v", v.Badput[LostProgress], v.Phase, v.Failures)
	}
}

// TestTeardownAfterSuccessIsStopping: a job that succeeded stops from its
// last reported step: the workers' teardown (a checkpoint's wait, the
// process group's end, the exit) is not step time.
func TestTeardownAfterSuccessIsStopping(t *testing.T) {
	for _, withStop := range []bool{true, false} {
		m := newMachine(t)
		evs := []event{launched(0), formed(1, 0, "a"), step(1, "a", 1, 2), step(1, "a", 11, 12)}
		if withStop {
			evs = append(evs, stoppedRound(1, StopSuccess, 13))
		}
		play(m, append(evs, endedAt(true, 13.5)))
		v := m.View(at(20))
		if v.Goodput != sec2(10) || v.Badput[Stopping] != sec2(1.5) || v.Badput[Startup] != sec2(2) {
			t.Errorf("stopped first %v: goodput %v, stopping %v, startup %v; want 10s, 1.5s, 2s",
				withStop, v.Goodput, v.Badput[Stopping], v.Badput[Startup])
		}
		checkInvariants(t, m, at(20))
	}
}

// TestSaveReportsItsStep: a save in training of a step above the newest
// report is that step's report at the save's time (less its blocking);
// a durable save, timed at its persistence, is not. The job's last
// report (step 10 at 11 s) is then not the end of its kept steps: its
// save of step 12 at 13 s is.
func TestSaveReportsItsStep(t *testing.T) {
	for _, durable := range []bool{false, true} {
		m := newMachine(t)
		play(m, []event{
			launched(0), formed(1, 0, "a"), step(1, "a", 1, 1), step(1, "a", 10, 10),
			saved(1, "a", 12, 0.5, durable, 12),
			stoppedRound(1, StopSuccess, 13), endedAt(true, 13),
		})
		v := m.View(at(20))
		want, stopping, ckpt := sec2(11-0.5), sec2(1), sec2(0.5)
		if durable {
			want, stopping = sec2(9), sec2(2.5) // the blocking comes out of the time since the last report
		}
		if v.Goodput != want || v.Badput[Stopping] != stopping || v.Badput[Checkpoint] != ckpt || v.Step != map[bool]int64{false: 12, true: 10}[durable] {
			t.Errorf("durable %v: goodput %v, stopping %v, checkpoint %v, step %d; want %v, %v, %v",
				durable, v.Goodput, v.Badput[Stopping], v.Badput[Checkpoint], v.Step, want, stopping, ckpt)
		}
		checkInvariants(t, m, at(20))
	}
}

// TestSaveBlockingLargestOverNodesApart: each heartbeat carries one node's
// saves of the last second, so the nodes' reports of a save come apart;
// the job's blocking for each save is still the largest, once.
func TestSaveBlockingLargestOverNodesApart(t *testing.T) {
	m := newMachine(t)
	play(m, []event{
		launched(0), formed(1, 0, "a", "b"), step(1, "a", 1, 1), step(1, "a", 10, 10),
		saved(1, "a", 12, 0.001, false, 12), saved(1, "a", 14, 0.001, false, 14),
		saved(1, "b", 12, 0.002, false, 12), saved(1, "b", 14, 0.0015, false, 14),
		saved(1, "a", 12, 0.003, false, 14.5), // a late, larger report
	})
	v := m.View(at(15))
	if want := sec2(0.003 + 0.0015); v.Badput[Checkpoint] != want || v.Saves != 2 {
		t.Errorf("checkpoint %v over %d saves, want %v over 2", v.Badput[Checkpoint], v.Saves, want)
	}
	checkInvariants(t, m, at(15))
}
