package jobstate

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/roverml/rover/internal/autoscale"
	"github.com/roverml/rover/internal/rendezvous"
)

// AutoScale is the job's scaling policy (package autoscale,
// docs/design/autoscale.md) when the job has one. Like Goodput it is
// journaled as its whole state (EventAutoScale): with each change the
// policy decides, and periodically, since what feeds it most (the
// heartbeats' progress) is not journaled report by report. The rounds it
// learns from the journal's events, in Apply.
type AutoScale struct {
	// knobs are the policy's settings as the driver gave them (Enable);
	// MinNodes, MaxNodes and NodeUnit come from the job's configuration.
	knobs  *autoscale.Config
	policy *autoscale.Policy
	dirty  bool
	err    error // why the policy could not be made, reported once
}

// NewAutoScale returns the state of a job without auto-scaling.
func NewAutoScale() *AutoScale { return &AutoScale{} }

// Enable turns auto-scaling on with knobs (its MinNodes, MaxNodes and
// NodeUnit are replaced by the job's rendezvous configuration). The driver
// calls it before the journal replays; a job already configured gets its
// policy at once.
func (a *AutoScale) Enable(knobs autoscale.Config, rdzv *rendezvous.Config) error {
	a.knobs = &knobs
	if rdzv != nil && a.policy == nil {
		return a.configure(*rdzv)
	}
	return nil
}

// Enabled reports whether the driver turned auto-scaling on.
func (a *AutoScale) Enabled() bool { return a.knobs != nil }

// Policy is the job's policy; nil when auto-scaling is off or the job is
// not configured yet.
func (a *AutoScale) Policy() *autoscale.Policy { return a.policy }

// configure makes the policy for the job's rendezvous configuration.
func (a *AutoScale) configure(rdzv rendezvous.Config) error {
	if a.knobs == nil || a.policy != nil {
		return nil
	}
	cfg := *a.knobs
	cfg.MinNodes, cfg.MaxNodes, cfg.NodeUnit = rdzv.MinNodes, rdzv.MaxNodes, rdzv.NodeUnit
	p, err := autoscale.New(cfg)
	if err != nil {
		a.err = fmt.Errorf("auto-scaling is off: %w", err)
		return a.err
	}
	a.policy, a.dirty = p, true
	return nil
}

// Err is why auto-scaling was asked for but could not start (its knobs
// do not fit the job's --nnodes); nil otherwise.
func (a *AutoScale) Err() error { return a.err }

// roundFormed tells the policy a round formed with its world.
func (a *AutoScale) roundFormed(s rendezvous.Snapshot, at time.Time) {
	if a.policy == nil {
		return
	}
	nodes := make([]string, len(s.World))
	for i, mb := range s.World {
		nodes[i] = mb.NodeID
	}
	a.policy.RoundFormed(autoscale.Round{Round: int64(s.WorldRound), Nodes: nodes, At: at})
	a.dirty = true
}

// Feed runs fn on the policy, when there is one, and marks the state to
// be journaled: the driver's progress reports, straggler verdicts and
// capacity.
func (a *AutoScale) Feed(fn func(*autoscale.Policy)) {
	if a.policy == nil {
		return
	}
	fn(a.policy)
	a.dirty = true
}

// Dirty reports whether the state changed since it was last marshalled.
func (a *AutoScale) Dirty() bool { return a.policy != nil && a.dirty }

// MarkDirty says the last marshalled state was not journaled.
func (a *AutoScale) MarkDirty() { a.dirty = true }

// Marshal is the state for EventAutoScale; nil without a policy. It
// clears Dirty.
func (a *AutoScale) Marshal() (json.RawMessage, error) {
	if a.policy == nil {
		return nil, nil
	}
	b, err := a.policy.MarshalState()
	if err != nil {
		return nil, err
	}
	a.dirty = false
	return b, nil
}

// restore applies a replayed EventAutoScale: the policy becomes the one it
// carries. A job whose driver no longer asks for auto-scaling ignores it,
// and so does a live state (live): its policy is the one the state was
// marshalled from, and may have learnt more since (a round formed between
// the marshalling and this event's commit), which the older copy would
// undo.
func (a *AutoScale) restore(state json.RawMessage, live bool) error {
	if a.knobs == nil || state == nil || live {
		return nil
	}
	p, err := autoscale.Restore(state)
	if err != nil {
		return fmt.Errorf("%w: the auto-scaling state: %v", ErrInvalid, err)
	}
	a.policy, a.err = p, nil
	return nil
}
