package goodput

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func lastStep(r int64, node string, st int64, s float64) event {
	return func(m *Machine) { m.LastStep(Progress{Round: r, Node: node, Step: st, At: at(s)}) }
}

// killTimeline: 1 s a step; the workers reported step 21 at 30 s, then
// completed steps 22 and 23 (at 31 and 32 s) that no report carried, and a
// worker was SIGKILLed at 32.5 s. The restart resumes from the memory
// checkpoint of step 20: the workers' logs show steps 21 to 23 computed
// again. final is what the agents vouch for once their workers exited.
func killTimeline(final ...event) []event {
	evs := []event{
		launched(0),
		formed(1, 0, "a", "b"),
		step(1, "a", 1, 10),
		step(1, "a", 11, 20),
		step(1, "b", 21, 30),
		failed(1, "a", "signal", 32.5, 33),
	}
	evs = append(evs, final...)
	return append(evs,
		workersStopped(1, "a", 34),
		workersStopped(1, "b", 34),
		formed(2, 35, "a", "b"),
		resumed(2, "a", 20, FromMemory, 36),
		resumed(2, "b", 20, FromMemory, 36),
		step(2, "a", 21, 37),
		endedAt(false, 38),
	)
}

// TestLastStepCountsUnreportedStepsLost: the steps a killed round completed
// after its last progress report are lost progress when the agents vouch
// for them (LastStep), and only then; the time lost is the same either
// way (the tail's), so the ratio does not move.
func TestLastStepCountsUnreportedStepsLost(t *testing.T) {
	for _, tc := range []struct {
		name  string
		final []event
		lost  int64
	}{
		{"no last step", nil, 1},
		{"last step", []event{lastStep(1, "b", 23, 32)}, 3},
		{"from both nodes, duplicated", []event{lastStep(1, "a", 22, 32), lastStep(1, "b", 23, 32), lastStep(1, "b", 23, 32)}, 3},
		{"late: after the next round formed", nil, 3},
		{"late: after the resume", nil, 1},
		{"lower than the frontier", []event{lastStep(1, "b", 19, 32)}, 1},
		{"of an old round", []event{lastStep(0, "b", 23, 32)}, 1},
		{"of a node not in the round", []event{lastStep(1, "c", 23, 32)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs := killTimeline(tc.final...)
			switch tc.name {
			case "late: after the next round formed":
				evs = append(evs[:9], append([]event{lastStep(1, "b", 23, 32)}, evs[9:]...)...)
			case "late: after the resume":
				evs = append(evs[:10], append([]event{lastStep(1, "b", 23, 32)}, evs[10:]...)...)
			}
			m := newMachine(t)
			play(m, evs)
			v := m.View(at(38))
			if v.Lost != tc.lost || v.Latest[0].LostSteps != tc.lost {
				t.Errorf("%d steps lost (the restart: %d), want %d", v.Lost, v.Latest[0].LostSteps, tc.lost)
			}
			// Lost progress: step 20's completion (29 s) to the death
			// (32.5 s), either way, and the second after round 2's first
			// step (the job failed at 38 s).
			if v.Badput[LostProgress] != sec2(4.5) || v.Goodput != sec2(19) {
				t.Errorf("lost progress %v, goodput %v; want 4.5s and 19s", v.Badput[LostProgress], v.Goodput)
			}
			checkInvariants(t, m, at(38))
		})
	}
}

// TestLastStepInTrainingIsProgress: an agent's last step that comes before
// the master learned of the failure is a progress report.
func TestLastStepInTrainingIsProgress(t *testing.T) {
	m := newMachine(t)
	play(m, []event{launched(0), formed(1, 0, "a"), step(1, "a", 1, 10), step(1, "a", 11, 20), lastStep(1, "a", 13, 22)})
	if v := m.View(at(22)); v.Step != 13 || v.Goodput != sec2(12) {
		t.Errorf("step %d, goodput %v; want 13 and 12s", v.Step, v.Goodput)
	}
}

// TestLastStepHostile: a last step far beyond what the tail's time can hold
// (2^63-1) prices at most the tail, keeps the ratio within 0..1 and
// survives a save and restore.
func TestLastStepHostile(t *testing.T) {
	m := newMachine(t)
	evs := killTimeline(lastStep(1, "b", math.MaxInt64, 32))
	for i, e := range evs {
		e(m)
		checkInvariants(t, m, at(40))
		m = roundTrip(t, m)
		if v := m.View(at(40)); v.Ratio < 0 || v.Ratio > 1 {
			t.Fatalf("after event %d: ratio %v", i, v.Ratio)
		}
	}
}

// TestLastStepMovesTheMilestone: the master journals a moved milestone at
// its next tick, so a vouched last step survives a master restart soon
// after it; a restart anywhere in the timeline changes nothing.
func TestLastStepMovesTheMilestone(t *testing.T) {
	m := newMachine(t)
	evs := killTimeline()
	play(m, evs[:6])
	before := m.Milestone()
	m.LastStep(Progress{Round: 1, Node: "b", Step: 23, At: at(32)})
	if m.Milestone() == before {
		t.Errorf("the milestone %+v did not move", before)
	}
	full := killTimeline(lastStep(1, "b", 23, 32))
	ref := newMachine(t)
	play(ref, full)
	want := ref.View(at(40))
	for k := 0; k <= len(full); k++ {
		m := newMachine(t)
		play(m, full[:k])
		m = roundTrip(t, m)
		play(m, full[k:])
		if diff := cmp.Diff(want, m.View(at(40))); diff != "" {
			t.Fatalf("restored after event %d (-want +got):\n%s", k, diff)
		}
	}
}
