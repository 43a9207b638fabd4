package soak

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var t0 = time.Unix(1_000_000, 0)

// at is t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// script writes a step log: for each life, its start line at ready and one
// step a second from resumed+1 to high.
type scriptLife struct {
	rank, pid     int
	resumed, high int64
	ready         float64
}

func scriptLog(lives ...scriptLife) string {
	var b strings.Builder
	for _, l := range lives {
		fmt.Fprintf(&b, "start rank=%d pid=%d step=%d t=%d\n", l.rank, l.pid, l.resumed, at(l.ready).UnixNano())
		for s := l.resumed + 1; s <= l.high; s++ {
			fmt.Fprintf(&b, "step rank=%d pid=%d step=%d t=%d\n", l.rank, l.pid, s, at(l.ready+float64(s-l.resumed)).UnixNano())
		}
	}
	return b.String()
}

func compute(t *testing.T, log string, end float64) Goodput {
	t.Helper()
	events, skipped, err := ParseStepLog(strings.NewReader(log))
	if err != nil || skipped != 0 {
		t.Fatalf("ParseStepLog: %d skipped, %v", skipped, err)
	}
	return Compute(events, t0, at(end))
}

var approx = cmpopts.EquateApprox(0, 1e-6)

func TestComputeWithoutRestarts(t *testing.T) {
	// Two ranks ready at 2 s, 10 one-second steps each, the end at 13 s:
	// the first step is startup.
	g := compute(t, scriptLog(scriptLife{0, 10, 0, 10, 2}, scriptLife{1, 11, 0, 10, 2}), 13)
	want := Goodput{Ranks: 2, WallSeconds: 13, Ratio: 9.0 / 13, GoodSeconds: 9, Startup: 3, Tail: 1,
		FinalStep: 10, Generations: 1, MeanStepSecs: 1}
	if diff := cmp.Diff(want, g, approx); diff != "" {
		t.Errorf("goodput (-want +got):\n%s", diff)
	}
}

// A rollback: the first lives reach step 10, the second resume after step
// 6 (a checkpoint) and finish at 20. Steps 7-10 of the first lives are lost,
// counted once each, and their seconds are lost progress, not goodput; the
// second lives' first step (7 again) is the restart's.
func TestComputeRollbackCountedOnce(t *testing.T) {
	g := compute(t, scriptLog(
		scriptLife{0, 10, 0, 10, 1}, scriptLife{1, 11, 0, 10, 1},
		scriptLife{0, 20, 6, 20, 14}, scriptLife{1, 21, 6, 20, 14},
	), 28)
	want := Goodput{Ranks: 2, WallSeconds: 28, Ratio: 18.0 / 28, GoodSeconds: 5 + 13, Startup: 2, LostSeconds: 4,
		Restarts: 4, LostSteps: 4, FinalStep: 20, Generations: 2, MeanStepSecs: 1, Downtimes: []float64{4}}
	if diff := cmp.Diff(want, g, approx); diff != "" {
		t.Errorf("goodput (-want +got):\n%s", diff)
	}
	if sum := g.GoodSeconds + g.Startup + g.LostSeconds + g.Restarts + g.Tail; math.Abs(sum-g.WallSeconds) > 1e-6 {
		t.Errorf("the parts sum to %v, want the wall time %v", sum, g.WallSeconds)
	}
}

// Step 5 is computed three times (two rollbacks to step 4): two of its
// computations are lost, the last is kept. A restart that resumed exactly
// where it died loses nothing. Each life's first step is its restart's (the
// second life's only step, a lost one, too).
func TestComputeRepeatedRollbacks(t *testing.T) {
	g := compute(t, scriptLog(
		scriptLife{0, 1, 0, 5, 0},
		scriptLife{0, 2, 4, 5, 6},   // step 5 again
		scriptLife{0, 3, 4, 8, 8},   // step 5 a third time, then 6-8
		scriptLife{0, 4, 8, 10, 13}, // resumed at its last step: nothing lost
	), 15)
	if g.LostSteps != 2 || g.LostSeconds != 1 || g.GoodSeconds != 7 || g.Generations != 4 || g.FinalStep != 10 {
		t.Errorf("got %+v; want 2 steps (1 s of them not a first step) lost, 7 s kept, 4 generations, final step 10", g)
	}
	if diff := cmp.Diff([]float64{2, 2, 2}, g.Downtimes, approx); diff != "" {
		t.Errorf("downtimes (-want +got):\n%s", diff)
	}
}

// A save's blocking (the step line's save=NS) is checkpoint badput, not
// step time, whether the step is kept or lost, as the master counts the
// blocking the workers report; a log without save= reads as before.
func TestComputeSaveBlockingIsCheckpointBadput(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "start rank=0 pid=1 step=0 t=%d\n", at(0).UnixNano())
	for s := int64(1); s <= 6; s++ {
		save := ""
		if s%2 == 0 {
			save = fmt.Sprintf(" save=%d", 250*time.Millisecond)
		}
		fmt.Fprintf(&b, "step rank=0 pid=1 step=%d t=%d%s\n", s, at(float64(s)).UnixNano(), save)
	}
	// A second life resumes after step 4: steps 5 and 6 (one save) are lost.
	fmt.Fprintf(&b, "start rank=0 pid=2 step=4 t=%d\nstep rank=0 pid=2 step=5 t=%d\nstep rank=0 pid=2 step=6 t=%d save=%d\n",
		at(7).UnixNano(), at(8).UnixNano(), at(9).UnixNano(), 250*time.Millisecond)
	g := compute(t, b.String(), 9)
	want := Goodput{Ranks: 1, WallSeconds: 9, Ratio: 3.25 / 9, GoodSeconds: 3 - 0.5 + 0.75, Startup: 1, LostSeconds: 1.75,
		Checkpoint: 1, Restarts: 2, LostSteps: 2, FinalStep: 6, Generations: 2, MeanStepSecs: 3.25 / 4, Downtimes: []float64{2}}
	if diff := cmp.Diff(want, g, approx); diff != "" {
		t.Errorf("goodput (-want +got):\n%s", diff)
	}
	if sum := g.GoodSeconds + g.Startup + g.LostSeconds + g.Checkpoint + g.Restarts + g.Tail; math.Abs(sum-g.WallSeconds) > 1e-6 {
		t.Errorf("the parts sum to %v, want the wall time %v", sum, g.WallSeconds)
	}
}

// A killed worker's half-written line is skipped; steps out of order end
// nothing before them; a ratio stays in 0..1 when lines lie about time.
func TestParseHostileLines(t *testing.T) {
	log := scriptLog(scriptLife{0, 1, 0, 3, 0}) + "step rank=0 pid=1 st" + "\nstep rank=0 pid=1 step=9 t=1\n"
	events, skipped, err := ParseStepLog(strings.NewReader(log))
	if err != nil || skipped != 1 || len(events) != 5 {
		t.Fatalf("%d events, %d skipped, %v; want 5 events and the torn line skipped", len(events), skipped, err)
	}
	g := Compute(events, t0, at(4))
	if g.FinalStep != 3 || g.Ratio < 0 || g.Ratio > 1 {
		t.Errorf("got %+v; want final step 3 and a ratio in 0..1", g)
	}
	if g := Compute(events, at(10), at(4)); g.Ratio != 0 {
		t.Errorf("an end before the launch gave ratio %v, want 0", g.Ratio)
	}
}
