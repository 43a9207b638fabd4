package master

import (
	"context"
	"errors"
	"fmt"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/autoscale"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/nodemanager"
)

// PS scaling (docs/design/parameter-server.md, "PS scaling"): the rule is
// autoscale.PSPolicy, a pure state machine; this file samples the CPU of
// a parameter-server job's roles every second from the platform (they
// run no agent to report it), feeds the rule, journals each change
// (jobstate.EventAutoScale with the decision, which the event log, the
// metrics and `rover status` show) before it carries it out: a migration
// through the node manager (nodemanager.MigrateNode), an added PS by
// scaling the ps group.

// CPUReader reads how much CPU time a node's processes have used, for
// nodes that run no agent: the local platform reads /proc.
type CPUReader interface {
	NodeCPUSeconds(nodeID string) (float64, bool)
}

// psScaleEvery is how often the roles' CPU is sampled and the rule asked.
const psScaleEvery = time.Second

// psScaleState is the core's side of PS scaling, under its lock. The
// rule's windows are not journaled: a restarted master measures anew.
type psScaleState struct {
	policy    *autoscale.PSPolicy
	decidedAt time.Time
	latest    autoscale.Decision
	prev      map[string]cpuMark // each node's CPU time at its last sample
}

// cpuMark is a node's CPU time at a time.
type cpuMark struct {
	seconds float64
	at      time.Time
}

func newPSScaleState(cfg autoscale.PSConfig) (*psScaleState, error) {
	p, err := autoscale.NewPS(cfg)
	if err != nil {
		return nil, fmt.Errorf("PS scaling: %w", err)
	}
	return &psScaleState{policy: p, prev: map[string]cpuMark{}}, nil
}

// psScaleTick samples the running roles' CPU, asks the rule, and journals
// and carries out a change. It does nothing without PS scaling, a CPU
// reader or the node manager's view.
func (m *Master) psScaleTick(ctx context.Context, now time.Time) error {
	c := m.core
	c.mu.Lock()
	ps := c.psScale
	if ps == nil || m.fleet == nil || m.cfg.Nodes.CPU == nil || c.fleetView == nil || now.Sub(ps.decidedAt) < psScaleEvery {
		c.mu.Unlock()
		return nil
	}
	ps.decidedAt = now
	nodes := c.fleetView.Nodes
	c.mu.Unlock()
	if m.fleet.ended() {
		return nil
	}

	var samples []autoscale.CPUSample
	live := map[string]bool{}
	for _, n := range nodes {
		if n.State != nodemanager.Running || n.Group == "evaluator" {
			continue
		}
		secs, ok := m.cfg.Nodes.CPU.NodeCPUSeconds(n.NodeID)
		if !ok {
			continue
		}
		live[n.NodeID] = true
		samples = append(samples, autoscale.CPUSample{Node: n.NodeID, Group: n.Group, Rank: n.Rank,
			UsedMilliCPU: int64(secs * 1000), RequestMilliCPU: n.MilliCPU, At: now}) // a running total, turned into a rate below
	}

	c.mu.Lock()
	for i := range samples {
		s := &samples[i]
		total := float64(s.UsedMilliCPU) / 1000
		prev, seen := ps.prev[s.Node]
		ps.prev[s.Node] = cpuMark{seconds: total, at: now}
		dt := now.Sub(prev.at).Seconds()
		if !seen || dt <= 0 || total < prev.seconds {
			s.Node = "" // a first mark: no rate yet
			continue
		}
		s.UsedMilliCPU = int64((total - prev.seconds) / dt * 1000)
		ps.policy.Sample(*s)
	}
	for id := range ps.prev {
		if !live[id] {
			delete(ps.prev, id)
			ps.policy.NodeGone(id)
		}
	}
	d := ps.policy.Decide(now)
	ps.latest = d
	c.mu.Unlock()
	if !d.Changes() {
		return nil
	}
	// Journaled before it is carried out: the event log, `rover events`
	// and a restarted master's journal hold it.
	if err := c.apply(ctx, &jobstate.Event{Type: jobstate.EventAutoScale, Time: now, Decision: &d}); err != nil {
		return fmt.Errorf("journal the PS scaling decision: %w", err)
	}
	m.carryOutPSScale(ctx, d)
	return nil
}

// carryOutPSScale makes a decided change: a PS migrated through the node
// manager, or one added by scaling the ps group. It does not wait for the
// nodes.
func (m *Master) carryOutPSScale(ctx context.Context, d autoscale.Decision) {
	m.log.Info("PS scaling", "action", string(d.Action), "reason", string(d.Reason), "node", d.Node, "rank", d.Rank,
		"milli_cpu", d.MilliCPU, "from", d.From, "to", d.To, "why", d.Message)
	if m.metrics != nil {
		m.metrics.AutoScaleDecided(string(d.Action), string(d.Reason))
	}
	msg := "auto-scale: " + d.Message
	switch d.Action {
	case autoscale.Migrate:
		c := m.core
		c.mu.Lock()
		c.st.Fleet.Notice(jobstate.FleetNotice{Node: d.Node, Reason: msg,
			Action: nodemanager.Action{Kind: nodemanager.MigrateNode, NodeID: d.Node, MilliCPU: d.MilliCPU, Reason: msg}})
		c.wakeLocked(jobstate.Effects{Notices: true})
		c.mu.Unlock()
		m.fleet.passOn(ScaleChange{Group: autoscale.PSGroup, Nodes: d.To, Why: "auto-scale migrate: " + string(d.Reason), Message: msg,
			Migrated: d.Node, Rank: d.Rank, MilliCPU: d.MilliCPU})
	case autoscale.Grow:
		go func() {
			if err := m.Scale(ctx, autoscale.PSGroup, d.To, msg); err != nil {
				m.log.Warn("the PS scaling decision could not be carried out", "to", d.To, "err", err)
				return
			}
			m.fleet.passOn(ScaleChange{Group: autoscale.PSGroup, Nodes: d.To, Why: "auto-scale grow: " + string(d.Reason), Message: msg})
		}()
	}
}

// MigratePS migrates the PS of rank to a node asking for milliCPU of CPU,
// as the PS scaling rule does: a user's request (a Kubernetes ScalePlan's
// migratePods). It fails when the job has no such running PS, or the
// request is not above the PS's.
func (m *Master) MigratePS(ctx context.Context, rank int, milliCPU int64, why string) error {
	if m.fleet == nil {
		return ErrNoNodes
	}
	c := m.core
	c.mu.Lock()
	var node *nodemanager.NodeStatus
	if c.fleetView != nil {
		for i, n := range c.fleetView.Nodes {
			if n.Group == autoscale.PSGroup && n.Rank == rank && n.State == nodemanager.Running {
				node = &c.fleetView.Nodes[i]
			}
		}
	}
	c.mu.Unlock()
	switch {
	case node == nil:
		return fmt.Errorf("%w: no running PS of rank %d", nodemanager.ErrBadScale, rank)
	case milliCPU <= node.MilliCPU:
		return fmt.Errorf("%w: PS %d asks for %dm of CPU already; give more to migrate it", nodemanager.ErrBadScale, rank, node.MilliCPU)
	}
	d := autoscale.Decision{Action: autoscale.Migrate, Group: autoscale.PSGroup, Node: node.NodeID, Rank: rank, MilliCPU: milliCPU,
		Reason: "requested", Message: why, At: m.cfg.Clock.Now()}
	if err := c.apply(ctx, &jobstate.Event{Type: jobstate.EventAutoScale, Time: d.At, Decision: &d}); err != nil {
		return fmt.Errorf("journal the PS migration: %w", err)
	}
	c.mu.Lock()
	c.st.Fleet.Notice(jobstate.FleetNotice{Node: d.Node, Reason: why,
		Action: nodemanager.Action{Kind: nodemanager.MigrateNode, NodeID: d.Node, MilliCPU: milliCPU, Reason: why}})
	c.wakeLocked(jobstate.Effects{Notices: true})
	c.mu.Unlock()
	return nil
}

// psScaleProtoLocked is GetJob's auto_scale for a job with PS scaling:
// the PS count as the target, the rule's last change and latest decision.
func (c *core) psScaleProtoLocked() *roverv1.AutoScaleStatus {
	ps := c.psScale
	if ps == nil {
		return nil
	}
	out := &roverv1.AutoScaleStatus{Changes: ps.policy.Changes(), Unit: PSScaleUnit, Capacity: -1}
	if c.fleetView != nil {
		for _, n := range c.fleetView.Nodes {
			if n.Group == autoscale.PSGroup {
				out.TargetNodes++ // one row per rank
			}
		}
	}
	if last, ok := ps.policy.LastChange(); ok {
		out.LastChange = decisionProto(last)
	}
	if ps.latest.Action != "" {
		out.Latest = decisionProto(ps.latest)
	}
	return out
}

// PSScaleUnit is AutoScaleStatus.unit of a job whose PS are scaled: its
// target is the PS count.
const PSScaleUnit = "ps"

// checkPSScale refuses PS scaling without a platform, and bad settings.
func checkPSScale(cfg Config) error {
	if cfg.PSScale == nil {
		return nil
	}
	if cfg.Nodes == nil {
		return errors.New("PS scaling needs a master that creates the job's nodes")
	}
	return cfg.PSScale.Validate()
}
