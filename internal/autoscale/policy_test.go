package autoscale

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func linear(n int) float64 { return 100 * float64(n) }

// TestLinearGrowsToMax: a job that scales linearly grows one unit at a time
// to MaxNodes and stays there, holding at_max.
func TestLinearGrowsToMax(t *testing.T) {
	s := newSim(t, Config{MinNodes: 1, MaxNodes: 6}, 1, linear, 0.1, 1)
	s.run(1000)
	if diff := cmp.Diff([]int{2, 3, 4, 5, 6}, s.path()); diff != "" {
		t.Fatalf("sizes decided (-want +got):\n%s", diff)
	}
	for _, d := range s.changes {
		if d.Action != Grow || d.Reason != ReasonPredictedGain {
			t.Errorf("change %+v: want a grow for its predicted gain", d)
		}
	}
	if d := s.p.Decide(s.now.Add(time.Hour)); d.Reason != ReasonAtMax {
		t.Errorf("at the maximum: %+v, want a hold at_max", d)
	}
}

// TestRobustAcrossSeeds: over 40 noise seeds (10% per report), a linear
// job always grows straight to MAX and never gives a node back; a job whose
// fourth node hurts always ends at 3 after trying 4 once; a job saturating
// at 4 ends at 4, or at worst 5, without going back and forth.
func TestRobustAcrossSeeds(t *testing.T) {
	hurt := map[int]float64{1: 100, 2: 190, 3: 270, 4: 240}
	saturating := func(n int) float64 { return 100 * float64(min(n, 4)) }
	for seed := uint64(100); seed < 140; seed++ {
		l := newSim(t, Config{MinNodes: 1, MaxNodes: 6}, 1, linear, 0.1, seed)
		l.run(1000)
		if diff := cmp.Diff([]int{2, 3, 4, 5, 6}, l.path()); diff != "" {
			t.Errorf("seed %d, linear: sizes decided (-want +got):\n%s", seed, diff)
		}
		h := newSim(t, Config{MinNodes: 1, MaxNodes: 4}, 1, func(n int) float64 { return hurt[n] }, 0.1, seed)
		h.run(1000)
		if diff := cmp.Diff([]int{2, 3, 4, 3}, h.path()); diff != "" {
			t.Errorf("seed %d, last node hurts: sizes decided (-want +got):\n%s", seed, diff)
		}
		s := newSim(t, Config{MinNodes: 1, MaxNodes: 8}, 1, saturating, 0.1, seed)
		s.run(1000)
		if p := s.path(); len(p) > 7 || (p[len(p)-1] != 4 && p[len(p)-1] != 5) {
			t.Errorf("seed %d, saturating at 4: sizes decided %v", seed, p)
		}
	}
}

// TestNodeUnit: growth goes by node_unit and never passes MaxNodes even when
// it is not a multiple of the unit.
func TestNodeUnit(t *testing.T) {
	s := newSim(t, Config{MinNodes: 2, MaxNodes: 9, NodeUnit: 2}, 2, linear, 0.1, 2)
	s.run(1000)
	if diff := cmp.Diff([]int{4, 6, 8}, s.path()); diff != "" {
		t.Fatalf("sizes decided (-want +got):\n%s", diff)
	}
}

// TestSaturatingSettles: throughput that stops growing at 4 nodes settles
// at 4 (after one measured try of 5) and stays there over 1,000 noisy
// decisions.
func TestSaturatingSettles(t *testing.T) {
	curve := func(n int) float64 { return 100 * float64(min(n, 4)) }
	s := newSim(t, Config{MinNodes: 1, MaxNodes: 8}, 1, curve, 0.1, 3)
	s.run(1000)
	if diff := cmp.Diff([]int{2, 3, 4, 5, 4}, s.path()); diff != "" {
		t.Fatalf("sizes decided (-want +got):\n%s", diff)
	}
	if last := s.changes[len(s.changes)-1]; last.Action != Shrink || last.Reason != ReasonMeasuredLoss {
		t.Errorf("last change %+v: want a shrink for the measured loss", last)
	}
	if d := s.p.Decide(s.now.Add(time.Minute)); d.Action != Hold || d.Reason != ReasonTriedAndLost {
		t.Errorf("settled: %+v, want a hold tried_and_lost", d)
	}
}

// TestLastNodeHurtsShrinks: when the last node makes the job slower, the
// policy gives it back and does not try it again.
func TestLastNodeHurtsShrinks(t *testing.T) {
	tp := map[int]float64{1: 100, 2: 190, 3: 270, 4: 240}
	s := newSim(t, Config{MinNodes: 1, MaxNodes: 4}, 1, func(n int) float64 { return tp[n] }, 0.1, 4)
	s.run(1000)
	if diff := cmp.Diff([]int{2, 3, 4, 3}, s.path()); diff != "" {
		t.Fatalf("sizes decided (-want +got):\n%s", diff)
	}
}

// TestModelStopsBeforeTheBadSize: communication grows with the world; once
// three sizes are measured the fitted model predicts that a fourth node
// would hurt, and the policy never tries it (nor anything larger).
func TestModelStopsBeforeTheBadSize(t *testing.T) {
	// t(n) = 0.002 + 0.01/n + 0.001 n: marginal gains 1→2 0.44, 2→3 0.16,
	// 3→4 -0.06, 4→5 -0.22.
	curve := func(n int) float64 { return 1 / (0.002 + 0.01/float64(n) + 0.001*float64(n)) }
	for seed := uint64(1); seed <= 5; seed++ {
		s := newSim(t, Config{MinNodes: 1, MaxNodes: 8}, 1, curve, 0.05, seed)
		s.run(1000)
		path := s.path()
		if !slices.Contains(path, 3) || slices.ContainsFunc(path, func(n int) bool { return n > 3 }) || path[len(path)-1] > 3 {
			t.Errorf("seed %d: sizes decided %v: want 3 tried, a settle at 2 or 3, nothing above 3", seed, path)
		}
	}
}

// TestNoFlappingNearThreshold: every added node gains just the threshold,
// with 15% noise on each report. Over 1,000 decisions (hours of scripted
// time) the policy never grows back to a size it gave back less than
// RetryAfter ago, so it changes the size at most twice per size plus twice
// per RetryAfter; with RetryAfter negative it never returns at all.
func TestNoFlappingNearThreshold(t *testing.T) {
	tp := map[int]float64{1: 100}
	for n := 2; n <= 8; n++ {
		tp[n] = tp[n-1] * (1 + DefaultMinGain/float64(n-1))
	}
	for _, retry := range []time.Duration{0, -1} {
		for seed := uint64(10); seed < 30; seed++ {
			cfg := Config{MinNodes: 1, MaxNodes: 8, RetryAfter: retry}
			s := newSim(t, cfg, 1, func(n int) float64 { return tp[n] }, 0.15, seed)
			s.run(1000)
			span := s.now.Sub(t0)
			if span < 2*time.Hour {
				t.Fatalf("seed %d: only %v of scripted time", seed, span)
			}
			bound := 2 * (cfg.MaxNodes - cfg.MinNodes)
			if retry == 0 {
				bound += 2 * int(span/DefaultRetryAfter+1)
			}
			if len(s.changes) > bound {
				t.Errorf("seed %d, RetryAfter %v: %d changes over %v (at most %d): %v", seed, retry, len(s.changes), span, bound, s.path())
			}
			shrunk := map[int]time.Time{}
			for _, d := range s.changes {
				switch d.Action {
				case Shrink:
					shrunk[d.From] = d.At
				case Grow:
					if at, ok := shrunk[d.To]; ok && (retry < 0 || d.At.Sub(at) < DefaultRetryAfter) {
						t.Errorf("seed %d, RetryAfter %v: grew back to %d %v after giving it back: %v", seed, retry, d.To, d.At.Sub(at), s.path())
					}
				}
			}
		}
	}
}

// TestCapacityBoundsGrowth: nodes the platform cannot place are not asked
// for; when it reports more, growth resumes.
func TestCapacityBoundsGrowth(t *testing.T) {
	s := newSim(t, Config{MinNodes: 1, MaxNodes: 6}, 1, linear, 0.1, 6)
	s.p.Capacity(3)
	s.run(500)
	if diff := cmp.Diff([]int{2, 3}, s.path()); diff != "" {
		t.Fatalf("sizes decided (-want +got):\n%s", diff)
	}
	if d := s.p.Decide(s.now); d.Reason != ReasonNoCapacity {
		t.Errorf("at capacity: %+v, want a hold no_capacity", d)
	}
	s.p.Capacity(-1)
	s.run(500)
	if got := s.path(); got[len(got)-1] != 6 {
		t.Errorf("after capacity came: sizes %v, want growth to 6", got)
	}
}

// TestStragglerReplaced: a node that stays a straggler for StragglerFor is
// replaced; one that is a straggler only briefly, or barely slower, is not.
func TestStragglerReplaced(t *testing.T) {
	cfg := Config{MinNodes: 4, MaxNodes: 4, StragglerFor: 3 * time.Minute}
	s := newSim(t, cfg, 4, linear, 0.05, 7)
	s.run(200)
	s.slow, s.slowdown, s.slowFrom = "node-2", 2, s.now
	s.run(300)
	if len(s.changes) != 1 || s.changes[0].Action != Replace || s.changes[0].Node != "node-2" || s.changes[0].Reason != ReasonStraggler {
		t.Fatalf("changes %+v: want one replacement of node-2", s.changes)
	}
	if after := s.changes[0].At.Sub(s.slowFrom); after < cfg.StragglerFor {
		t.Errorf("replaced %v after it became a straggler, before StragglerFor (%v)", after, cfg.StragglerFor)
	}

	brief := newSim(t, cfg, 4, linear, 0.05, 8)
	brief.run(100)
	brief.p.Straggler(StragglerReport{Node: "node-1", Straggler: true, Slowdown: 3, At: brief.now})
	brief.run(5)
	brief.p.Straggler(StragglerReport{Node: "node-1", Straggler: false, At: brief.now})
	brief.slow, brief.slowdown, brief.slowFrom = "node-3", 1.05, brief.now
	brief.run(400)
	if len(brief.changes) != 0 {
		t.Errorf("changes %+v: a brief straggler or a 5%% slower one must not be replaced", brief.changes)
	}
}

// TestCoolDownAndWaiting: after a change the policy holds while the change
// forms its round and for the cool-down, and re-decides when a change never
// forms its round within ChangeTimeout.
func TestCoolDownAndWaiting(t *testing.T) {
	cfg := Config{MinNodes: 1, MaxNodes: 4, WarmupSteps: -1, WarmupTime: -1}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.RoundFormed(Round{Round: 1, Nodes: []string{"a"}, At: t0})
	at := t0
	for st := int64(1); st <= 30; st++ {
		at = t0.Add(time.Duration(st) * time.Second)
		p.Progress(Progress{Round: 1, Step: st * 10, Samples: 100, At: at})
	}
	if d := p.Decide(at); d.Action != Grow || d.To != 2 {
		t.Fatalf("decision %+v: want a grow to 2", d)
	}
	if d := p.Decide(at.Add(DefaultChangeTimeout - time.Second)); d.Reason != ReasonWaitingForChange {
		t.Errorf("before the round: %+v, want waiting_for_change", d)
	}
	if d := p.Decide(at.Add(DefaultChangeTimeout)); d.Action != Grow || d.To != 2 {
		t.Errorf("after ChangeTimeout without the round: %+v, want the grow again", d)
	}
	at = at.Add(DefaultChangeTimeout)
	p.RoundFormed(Round{Round: 2, Nodes: []string{"a", "b"}, At: at.Add(time.Second)})
	if d := p.Decide(at.Add(DefaultCoolDown - time.Second)); d.Reason != ReasonCoolDown {
		t.Errorf("in the cool-down: %+v, want cool_down", d)
	}
	if d := p.Decide(at.Add(DefaultCoolDown)); d.Reason != ReasonMeasuring {
		t.Errorf("after the cool-down, unmeasured: %+v, want measuring", d)
	}
}
