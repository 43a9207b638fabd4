package autoscale

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Round is a formed rendezvous round: its number and its nodes.
type Round struct {
	Round int64
	Nodes []string
	At    time.Time
}

// StragglerReport says whether a node of the current round is a straggler
// now (internal/stall's verdict) and how much slower it is: its step time
// over the others' median (Slowdown, >= 1).
type StragglerReport struct {
	Node      string
	Straggler bool
	Slowdown  float64
	At        time.Time
}

// Policy decides the job's size. Feed it every formed round, every progress
// report, the platform's capacity and the straggler verdicts; call Decide
// when a decision is wanted (e.g. after each progress batch). Decide changes
// the policy's state only when it decides a change; a Hold leaves it as it
// was.
type Policy struct {
	cfg Config
	rec *Record

	nodes      []string // the current round's, sorted
	capacity   int      // nodes the platform can place for the job; < 0 unknown
	stragglers map[string]straggler
	rejected   map[int]time.Time // sizes shrunk from for a measured loss, and when

	hasChange bool
	last      Decision // the last change
	pending   bool     // the last change has not formed its round yet
	changes   int64
}

type straggler struct {
	Since    time.Time `json:"since"`
	Slowdown float64   `json:"slowdown"`
}

// New returns a policy for cfg, which [Config.Validate] must accept.
func New(cfg Config) (*Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	return &Policy{cfg: c, rec: newRecord(c), capacity: -1, stragglers: map[string]straggler{}, rejected: map[int]time.Time{}}, nil
}

// RoundFormed starts a new world; a round not newer than the current one is
// ignored. Straggler verdicts start over.
func (p *Policy) RoundFormed(r Round) {
	nodes := slices.Clone(r.Nodes)
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	if !p.rec.RoundFormed(r.Round, len(nodes), r.At) {
		return
	}
	p.nodes = nodes
	clear(p.stragglers)
	if p.pending && (p.last.Action == Replace || len(nodes) == p.last.To) {
		p.pending = false
	}
}

// Progress adds a step report (see [Record.Progress]).
func (p *Policy) Progress(pr Progress) { p.rec.Progress(pr) }

// Capacity sets how many nodes the platform can place for the job in all
// (nodes < 0: unknown, only MaxNodes bounds growth).
func (p *Policy) Capacity(nodes int) { p.capacity = max(nodes, -1) }

// Straggler records a straggler verdict about a node of the current round;
// verdicts about other nodes, or with a slowdown that is not a number, are
// ignored.
func (p *Policy) Straggler(s StragglerReport) {
	if _, ok := slices.BinarySearch(p.nodes, s.Node); !ok {
		return
	}
	if !s.Straggler {
		delete(p.stragglers, s.Node)
		return
	}
	if math.IsNaN(s.Slowdown) || math.IsInf(s.Slowdown, 0) {
		return
	}
	st, ok := p.stragglers[s.Node]
	if !ok {
		st.Since = s.At
	}
	st.Slowdown = max(s.Slowdown, 1)
	p.stragglers[s.Node] = st
}

// KnownCapacity is the capacity last set (-1: unknown).
func (p *Policy) KnownCapacity() int { return p.capacity }

// Throughput returns the measured sizes, smallest first.
func (p *Policy) Throughput() []Measured { return p.rec.Sizes() }

// LastChange returns the last decided change (ok false before any).
func (p *Policy) LastChange() (Decision, bool) { return p.last, p.hasChange }

// Changes is how many changes the policy has decided.
func (p *Policy) Changes() int64 { return p.changes }

// gain is the marginal gain of going from m nodes at throughput tm to n at
// tn: the throughput each added node adds over a node's share at m.
func gain(m int, tm float64, n int, tn float64) float64 {
	if tm <= 0 || n == m {
		return 0
	}
	g := (tn - tm) / float64(n-m) / (tm / float64(m))
	if math.IsNaN(g) || math.IsInf(g, 0) {
		return 0
	}
	return g
}

// Decide returns the decision at time at. A change (Grow, Shrink, Replace)
// starts the cool-down and waits for its round.
func (p *Policy) Decide(at time.Time) Decision {
	d := p.decide(at)
	if d.Changes() {
		p.hasChange, p.last, p.pending = true, d, true
		p.changes++
		if d.Action == Shrink {
			p.rejected[d.From] = at
		}
	}
	return d
}

func (p *Policy) decide(at time.Time) Decision {
	c := p.cfg
	cur := p.rec.Size()
	hold := func(r Reason, g float64, format string, args ...any) Decision {
		return Decision{Action: Hold, From: cur, To: cur, Reason: r, Gain: g, At: at, Message: fmt.Sprintf(format, args...)}
	}
	if !p.rec.hasRound {
		return hold(ReasonNoRound, 0, "hold: no round has formed yet")
	}
	if p.pending && at.Sub(p.last.At) < c.ChangeTimeout {
		return hold(ReasonWaitingForChange, 0, "hold at %d nodes: waiting for the %s to %d nodes decided at %s to form its round",
			cur, p.last.Action, p.last.To, p.last.At.UTC().Format(time.RFC3339))
	}
	if p.hasChange && at.Sub(p.last.At) < c.CoolDown {
		return hold(ReasonCoolDown, 0, "hold at %d nodes: cooling down until %s after the last change",
			cur, p.last.At.Add(c.CoolDown).UTC().Format(time.RFC3339))
	}
	if cur < c.MinNodes || cur > c.MaxNodes {
		return hold(ReasonOutOfRange, 0, "hold at %d nodes: outside the job's %d..%d nodes; the rendezvous brings it back",
			cur, c.MinNodes, c.MaxNodes)
	}
	if d, ok := p.replace(cur, at); ok {
		return d
	}
	here, ok := p.rec.At(cur)
	if !ok || !here.Trusted {
		return hold(ReasonMeasuring, 0, "hold at %d nodes: measuring its throughput (%d of %d samples after warm-up)",
			cur, here.Samples, c.MinSamples)
	}
	lastGain, haveLast := 0.0, false
	if down := cur - c.NodeUnit; down >= c.MinNodes {
		if below, ok := p.rec.At(down); ok && below.Trusted {
			g, se := gain(down, below.Throughput, cur, here.Throughput), gainErr(down, below, cur, here)
			lastGain, haveLast = g, true
			if g+se < c.MinGain-c.Hysteresis {
				return Decision{Action: Shrink, From: cur, To: down, Reason: ReasonMeasuredLoss, Gain: g, At: at,
					Message: fmt.Sprintf("shrink from %d to %d nodes: each of the last %d measurably adds %.2f±%.2f of a node's share (%.4g/s at %d, %.4g/s at %d); below %.2f",
						cur, down, c.NodeUnit, g, se, here.Throughput, cur, below.Throughput, down, c.MinGain-c.Hysteresis)}
			}
		}
	}
	up := cur + c.NodeUnit
	if up > c.MaxNodes {
		return hold(ReasonAtMax, 0, "hold at %d nodes: %d more would pass the job's maximum of %d", cur, c.NodeUnit, c.MaxNodes)
	}
	if p.capacity >= 0 && up > p.capacity {
		return hold(ReasonNoCapacity, 0, "hold at %d nodes: the platform can place only %d for the job", cur, p.capacity)
	}
	if since, ok := p.rejected[up]; ok && (c.RetryAfter < 0 || at.Sub(since) < c.RetryAfter) {
		retry := "never again"
		if c.RetryAfter >= 0 {
			retry = "not before " + since.Add(c.RetryAfter).UTC().Format(time.RFC3339)
		}
		return hold(ReasonTriedAndLost, 0, "hold at %d nodes: %d were given back at %s for a measured loss; trying them %s",
			cur, up, since.UTC().Format(time.RFC3339), retry)
	}
	next, how, measured := p.predict(up)
	g := gain(cur, here.Throughput, up, next.Throughput)
	margin := 0.0
	if measured {
		margin = gainErr(cur, here, up, next)
	} else if haveLast && lastGain < g {
		g, how = lastGain, "expected (capped at the last nodes' measured gain)"
	}
	if g-margin >= c.MinGain {
		return Decision{Action: Grow, From: cur, To: up, Reason: ReasonPredictedGain, Gain: g, At: at,
			Message: fmt.Sprintf("grow from %d to %d nodes: each added node is %s to add %.2f of a node's share (%.4g/s at %d, %.4g/s at %d); at least %.2f needed",
				cur, up, how, g, here.Throughput, cur, next.Throughput, up, c.MinGain)}
	}
	return hold(ReasonGainInBand, g, "hold at %d nodes: each of %d more would be %s to add only %.2f of a node's share (at least %.2f needed to grow)",
		cur, c.NodeUnit, how, g, c.MinGain)
}

// predict returns the throughput at n: measured when trusted, else the
// model's; how it was had; and whether it was measured.
func (p *Policy) predict(n int) (Measured, string, bool) {
	if m, ok := p.rec.At(n); ok && m.Trusted {
		return m, "measured", true
	}
	model, ok := Fit(p.rec.Trusted(), p.cfg.AssumedEfficiency)
	if !ok {
		return Measured{Size: n}, "predicted", false
	}
	pred := Measured{Size: n, Throughput: model.Predict(n)}
	if model.Sizes() == 1 {
		return pred, fmt.Sprintf("assumed (efficiency %.2f, one size measured)", p.cfg.AssumedEfficiency), false
	}
	return pred, fmt.Sprintf("predicted (model of %d measured sizes)", model.Sizes()), false
}

// gainErr is the standard error of the marginal gain between two measured
// sizes, from their medians' standard errors.
func gainErr(m int, low Measured, n int, high Measured) float64 {
	if low.Throughput <= 0 || n == m {
		return 0
	}
	e := math.Hypot(low.StdErr, high.StdErr) / math.Abs(float64(n-m)) / (low.Throughput / float64(m))
	if math.IsNaN(e) || math.IsInf(e, 0) {
		return 0
	}
	return e
}

// replace returns a Replace decision for the node that has been a straggler
// longest, at least StragglerFor, if replacing it would gain.
func (p *Policy) replace(cur int, at time.Time) (Decision, bool) {
	var node string
	var st straggler
	for n, s := range p.stragglers {
		if at.Sub(s.Since) < p.cfg.StragglerFor {
			continue
		}
		if node == "" || s.Since.Before(st.Since) || (s.Since.Equal(st.Since) && n < node) {
			node, st = n, s
		}
	}
	if node == "" {
		return Decision{}, false
	}
	g := 1 - 1/st.Slowdown
	if g < p.cfg.MinReplaceGain {
		return Decision{}, false
	}
	return Decision{Action: Replace, From: cur, To: cur, Node: node, Reason: ReasonStraggler, Gain: g, At: at,
		Message: fmt.Sprintf("replace %s: a straggler since %s, %.2fx the others' step time; the job would gain %.0f%% of its throughput",
			node, st.Since.UTC().Format(time.RFC3339), st.Slowdown, 100*g)}, true
}
