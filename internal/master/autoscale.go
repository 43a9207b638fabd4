package master

import (
	"context"
	"fmt"
	"math"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/autoscale"
	"github.com/roverml/rover/internal/eventlog"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/nodemanager"
	"github.com/roverml/rover/internal/rendezvous"
	"github.com/roverml/rover/internal/stall"
)

// Auto-scaling (docs/design/autoscale.md): the policy is jobstate's
// AutoScale, a pure state machine; this file feeds it what the master
// sees (progress from the heartbeats, the stragglers and the platform's
// capacity on the tick), asks it to decide, journals each change before
// carrying it out through the node manager, and journals the state
// periodically.

const (
	// autoScaleEvery is how often the tick asks the policy to decide: its
	// samples come from heartbeats, at most one a second per node.
	autoScaleEvery = time.Second
	// autoScaleJournalEvery is how often the policy's state is journaled
	// when only its measurements changed: a restarted master loses at most
	// this much of them.
	autoScaleJournalEvery = 30 * time.Second
)

// autoScaleState is the core's side of auto-scaling, under its lock: what
// is not journaled.
type autoScaleState struct {
	decidedAt   time.Time // the last Decide
	journaledAt time.Time // the last journaled state
	latest      autoscale.Decision
	// samples is each node's training samples per step (the sum over its
	// workers), from its last heartbeat that carried some.
	samples map[string]float64
	unit    string
	// pace is the node whose heartbeats time the world's steps in
	// paceRound: the first to report progress in it. The nodes of a
	// synchronous world are at the same step, so one node's reports, a
	// second apart, measure its throughput; mixing every node's, each a
	// fraction of a second after another's, would make samples of a step
	// or two whose noise grows with the world.
	pace      string
	paceRound int64
}

// autoScaleProgressLocked feeds the policy a node's heartbeat progress of
// the current round.
func (c *core) autoScaleProgressLocked(node string, r jobstate.NodeReport, now time.Time) {
	a := c.st.AutoScale
	if a.Policy() == nil {
		return
	}
	step, per, known := int64(-1), 0.0, false
	for _, w := range r.Workers {
		step = max(step, w.Step)
		if w.Steps > 0 && w.Samples > 0 {
			per += float64(w.Samples) / float64(w.Steps)
			known = true
		}
	}
	if step < 0 {
		return
	}
	as := &c.autoScale
	if as.samples == nil {
		as.samples = map[string]float64{}
	}
	if known {
		as.samples[node] = per
	}
	if r.Round > as.paceRound {
		as.pace, as.paceRound = node, r.Round
	}
	if node != as.pace || r.Round != as.paceRound {
		return
	}
	samples := c.worldSamplesLocked()
	as.unit = "steps/s"
	if samples > 0 {
		as.unit = "samples/s"
	}
	a.Feed(func(p *autoscale.Policy) {
		p.Progress(autoscale.Progress{Round: r.Round, Step: step, Samples: samples, At: now})
	})
}

// worldSamplesLocked is the world's training samples per step: the sum of
// its nodes' last known; a node not known yet counts as the mean of the
// known ones. 0 when none is known: throughput is then in steps.
func (c *core) worldSamplesLocked() int64 {
	world := c.st.Members.Rendezvous().Snapshot().World
	var sum float64
	known := 0
	for _, mb := range world {
		if v, ok := c.autoScale.samples[mb.NodeID]; ok {
			sum += v
			known++
		}
	}
	if known == 0 {
		return 0
	}
	total := sum * float64(len(world)) / float64(known)
	if math.IsNaN(total) || total > autoscale.MaxSamplesPerStep {
		return 0
	}
	return int64(math.Round(total))
}

// autoScaleTick runs on the master's tick: at most once per autoScaleEvery
// it gives the policy the platform's capacity and the stragglers, asks it
// to decide, and journals and carries out a change; it journals the
// policy's state when only its measurements changed, every
// autoScaleJournalEvery.
func (m *Master) autoScaleTick(ctx context.Context, now time.Time) error {
	c := m.core
	c.mu.Lock()
	a, as := c.st.AutoScale, &c.autoScale
	p := a.Policy()
	if p == nil || !c.st.Members.Configured() || now.Sub(as.decidedAt) < autoScaleEvery {
		c.mu.Unlock()
		return nil
	}
	as.decidedAt = now
	s := c.st.Members.Status()
	if s.Job != rendezvous.Running {
		c.mu.Unlock()
		return nil
	}
	capacity := -1
	if m.fleet != nil {
		capacity = m.fleet.capacity()
	}
	a.Feed(func(p *autoscale.Policy) {
		p.Capacity(capacity)
		if !s.Open {
			for _, r := range stragglerReports(c.st.Progress.View(int64(s.Round)).Nodes, now) {
				p.Straggler(r)
			}
		}
	})
	d := p.Decide(now)
	as.latest = d
	var state []byte
	var err error
	journal := d.Changes() || a.Dirty() && now.Sub(as.journaledAt) >= autoScaleJournalEvery
	if journal {
		as.journaledAt = now
		state, err = a.Marshal()
	}
	c.mu.Unlock()
	if err != nil || !journal {
		return err
	}
	e := &jobstate.Event{Type: jobstate.EventAutoScale, Time: now, AutoScale: state}
	if d.Changes() {
		e.Decision = &d
	}
	if err := c.apply(ctx, e); err != nil {
		c.mu.Lock()
		a.MarkDirty()
		c.mu.Unlock()
		return fmt.Errorf("journal the auto-scaling policy's state: %w", err)
	}
	if d.Changes() {
		m.carryOutScale(ctx, d)
	}
	return nil
}

// carryOutScale makes a decided change: a new node count for the node
// manager, or a straggler's replacement. It does not wait for the nodes.
func (m *Master) carryOutScale(ctx context.Context, d autoscale.Decision) {
	m.log.Info("auto-scaling", "action", string(d.Action), "reason", string(d.Reason), "from", d.From, "to", d.To, "node", d.Node, "why", d.Message)
	if m.metrics != nil {
		m.metrics.AutoScaleDecided(string(d.Action), string(d.Reason))
	}
	switch d.Action {
	case autoscale.Grow, autoscale.Shrink:
		go func() {
			if err := m.Scale(ctx, nodemanager.DefaultGroup, d.To, "auto-scale: "+d.Message); err != nil {
				m.log.Warn("the auto-scaling decision could not be carried out", "action", string(d.Action), "to", d.To, "err", err)
				return
			}
			m.fleet.passOn(ScaleChange{Nodes: d.To, Why: "auto-scale " + string(d.Action) + ": " + string(d.Reason), Message: "auto-scale: " + d.Message})
		}()
	case autoscale.Replace:
		c := m.core
		c.mu.Lock()
		reason := "auto-scale: " + d.Message
		if host := c.st.Hosts[d.Node]; host != "" {
			c.st.Fleet.Notice(jobstate.FleetNotice{Node: d.Node, Reason: reason,
				Action: nodemanager.Action{Kind: nodemanager.MarkHostBad, Host: host, Reason: reason}})
		}
		c.st.Fleet.Notice(jobstate.FleetNotice{Node: d.Node, Reason: reason,
			Action: nodemanager.Action{Kind: nodemanager.RelaunchNode, NodeID: d.Node, Reason: reason, Cause: nodemanager.CauseDiagnosis}})
		c.wakeLocked(jobstate.Effects{Notices: true})
		c.mu.Unlock()
	}
}

// stragglerReports are the policy's straggler verdicts from the progress
// view's nodes: each node's slowdown is what the job would gain per step
// without it. A node timed in its collectives slows the world by the
// compute time it takes beyond the others' median; one without, by its
// wall time over the others' median.
func stragglerReports(nodes []stall.NodeTime, now time.Time) []autoscale.StragglerReport {
	out := make([]autoscale.StragglerReport, 0, len(nodes))
	for i, n := range nodes {
		r := autoscale.StragglerReport{Node: n.Node, Straggler: n.Straggler, Slowdown: 1, At: now}
		if n.Straggler {
			var walls, computes []float64
			for j, o := range nodes {
				if j != i {
					walls, computes = append(walls, o.Wall), append(computes, o.Compute)
				}
			}
			switch ow, oc := stall.Median(walls), stall.Median(computes); {
			case n.Compute > 0 && n.Compute > oc && n.Wall > n.Compute-oc:
				r.Slowdown = n.Wall / (n.Wall - (n.Compute - oc))
			case ow > 0:
				r.Slowdown = n.Wall / ow
			}
		}
		out = append(out, r)
	}
	return out
}

// autoScaleProtoLocked is GetJob's auto_scale: nil when auto-scaling is
// off.
func (c *core) autoScaleProtoLocked() *roverv1.AutoScaleStatus {
	p := c.st.AutoScale.Policy()
	if p == nil {
		return c.psScaleProtoLocked()
	}
	as := &c.autoScale
	out := &roverv1.AutoScaleStatus{Changes: p.Changes(), Unit: as.unit, Capacity: -1}
	if out.Unit == "" {
		out.Unit = "steps/s"
	}
	if c.st.Members.Configured() {
		out.TargetNodes = int32(c.st.Members.Status().GroupWorldSize)
	}
	if last, ok := p.LastChange(); ok {
		out.LastChange = decisionProto(last)
		out.TargetNodes = int32(last.To)
	}
	if as.latest.Action != "" {
		out.Latest = decisionProto(as.latest)
	}
	out.Capacity = int32(max(p.KnownCapacity(), -1))
	for _, s := range p.Throughput() {
		out.Sizes = append(out.Sizes, &roverv1.SizeThroughput{Nodes: int32(s.Size), Throughput: s.Throughput,
			StdErr: s.StdErr, Samples: int32(s.Samples), Trusted: s.Trusted})
	}
	return out
}

func decisionProto(d autoscale.Decision) *roverv1.AutoScaleDecision {
	out := &roverv1.AutoScaleDecision{Action: string(d.Action), Reason: string(d.Reason), Message: d.Message,
		FromNodes: int32(d.From), ToNodes: int32(d.To), NodeId: d.Node, Gain: d.Gain}
	if !d.At.IsZero() {
		out.TimeUnixNanos = d.At.UnixNano()
	}
	return out
}

// autoScaleEvent is the event log's record of a journaled change.
func autoScaleEvent(d *autoscale.Decision) eventlog.Event {
	return eventlog.Event{Kind: eventlog.ScaleDecision, Severity: eventlog.Normal, Node: d.Node, Nodes: d.To,
		Reason: "auto-scale " + string(d.Action) + ": " + string(d.Reason), Message: "auto-scale: " + d.Message}
}
