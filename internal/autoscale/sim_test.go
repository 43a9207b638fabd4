package autoscale

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// sim is a scripted job: its true throughput at n nodes is curve(n) samples
// per second, each report (every reportEvery steps of globalBatch samples)
// takes that time with multiplicative Gaussian noise, and the policy decides
// after every report. A change forms a new round after restartCost.
type sim struct {
	t           testing.TB
	p           *Policy
	curve       func(n int) float64
	pcg         *rand.PCG
	rng         *rand.Rand
	noise       float64
	now         time.Time
	round       int64
	size        int
	step        int64
	globalBatch int64
	reportEvery int64
	restartCost time.Duration
	// slow, when set, is a node that is a straggler (slowdown) from
	// slowFrom on, until it is replaced.
	slow     string
	slowdown float64
	slowFrom time.Time

	decisions int
	changes   []Decision
	sizes     []int // the size after each decision
}

func newSim(t testing.TB, cfg Config, size int, curve func(int) float64, noise float64, seed uint64) *sim {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pcg := rand.NewPCG(seed, 1)
	s := &sim{t: t, p: p, curve: curve, pcg: pcg, rng: rand.New(pcg), noise: noise, now: t0,
		globalBatch: 256, reportEvery: 10, restartCost: 30 * time.Second}
	s.form(size)
	return s
}

// fork returns a copy of s that drives p from the same point on.
func (s *sim) fork(p *Policy) *sim {
	c := *s
	pcg := *s.pcg
	c.p, c.pcg, c.rng = p, &pcg, rand.New(&pcg)
	c.changes, c.sizes = slices.Clone(s.changes), slices.Clone(s.sizes)
	return &c
}

func nodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%d", i)
	}
	return out
}

func (s *sim) form(size int) {
	s.round++
	s.size = size
	s.p.RoundFormed(Round{Round: s.round, Nodes: nodeNames(size), At: s.now})
}

// run plays n decisions.
func (s *sim) run(n int) {
	s.t.Helper()
	for range n {
		rate := s.curve(s.size) * (1 + s.noise*s.rng.NormFloat64())
		rate = max(rate, s.curve(s.size)/10)
		slowNow := s.slow != "" && !s.now.Before(s.slowFrom)
		if slowNow {
			rate /= s.slowdown
		}
		s.now = s.now.Add(time.Duration(float64(s.reportEvery*s.globalBatch) / rate * float64(time.Second)))
		s.step += s.reportEvery
		s.p.Progress(Progress{Round: s.round, Step: s.step, Samples: s.globalBatch, At: s.now})
		if slowNow {
			s.p.Straggler(StragglerReport{Node: s.slow, Straggler: true, Slowdown: s.slowdown, At: s.now})
		}
		d := s.p.Decide(s.now)
		s.decisions++
		s.check(d)
		if d.Changes() {
			s.changes = append(s.changes, d)
			s.now = s.now.Add(s.restartCost)
			if d.Action == Replace && d.Node == s.slow {
				s.slow = ""
			}
			s.form(d.To)
		}
		s.sizes = append(s.sizes, s.size)
	}
}

// check holds every decision's invariants.
func (s *sim) check(d Decision) {
	s.t.Helper()
	c := s.p.cfg
	switch d.Action {
	case Grow, Shrink:
		if d.To < c.MinNodes || d.To > c.MaxNodes || (d.To-d.From != c.NodeUnit && d.From-d.To != c.NodeUnit) {
			s.t.Fatalf("decision %+v: outside %d..%d or not one unit of %d", d, c.MinNodes, c.MaxNodes, c.NodeUnit)
		}
	case Hold, Replace:
		if d.To != d.From {
			s.t.Fatalf("decision %+v changes the size", d)
		}
	default:
		s.t.Fatalf("decision %+v: unknown action", d)
	}
	if d.Message == "" || d.Reason == "" {
		s.t.Fatalf("decision %+v without its reason", d)
	}
}

func (s *sim) path() []int {
	out := []int{}
	for _, d := range s.changes {
		if d.Action != Replace {
			out = append(out, d.To)
		}
	}
	return out
}
