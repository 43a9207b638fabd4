package jobstate

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/nodecheck"
	"github.com/roverml/rover/internal/rendezvous"
)

// NodeCheck is the job's pre-flight node check (internal/nodecheck,
// docs/design/node-check.md). When a round closes on a world with a node
// that has not passed a check, the check starts: the members' views carry
// their groups instead of their assignment, so no worker starts. The
// agents' reports and the stage deadlines are its events; the start, the
// stages and the verdicts follow from them and from the rendezvous's
// status, so a replay rebuilds the same check. Once it is over, the job
// takes the excluded nodes out (CheckChange.Excluded).
type NodeCheck struct {
	m *nodecheck.Machine
}

// NewNodeCheck returns the node check of a job configured with cfg, nil
// when it runs none.
func NewNodeCheck(cfg *jobconfig.NodeCheck, minNodes int) *NodeCheck {
	if cfg == nil {
		return nil
	}
	c := cfg.Config
	c.MinNodes = minNodes
	return &NodeCheck{m: nodecheck.New(c)}
}

// RestoreNodeCheck returns the node check MarshalState described.
func RestoreNodeCheck(state []byte) (*NodeCheck, error) {
	m, err := nodecheck.Restore(state)
	if err != nil {
		return nil, err
	}
	return &NodeCheck{m: m}, nil
}

// World starts the check of a world that just formed (s is the
// rendezvous's status; world returns its members), or cancels the check of
// a world that ended.
func (n *NodeCheck) World(s rendezvous.Status, world func() []rendezvous.Member, now time.Time) {
	if r, ok := n.m.Running(); ok && (s.Job != rendezvous.Running || s.Round != r || s.Open) {
		n.m.Cancel()
	}
	if s.Job != rendezvous.Running || s.Open || s.WorldRound != s.Round {
		return
	}
	members := world()
	slices.SortFunc(members, func(a, b rendezvous.Member) int { return cmp.Compare(a.NodeRank, b.NodeRank) })
	ids := make([]string, len(members))
	for i, m := range members {
		ids[i] = m.NodeID
	}
	n.m.Start(s.Round, ids, now)
}

// CheckReport refuses a report of node for a group it has no part in
// (ErrStaleRound), before it is journaled.
func (n *NodeCheck) CheckReport(node string, round, stage, group int) error {
	world, st, groups := n.m.Tasks(node)
	if world != round || st != stage || !slices.ContainsFunc(groups, func(g nodecheck.Group) bool { return g.ID == group }) {
		return fmt.Errorf("%w: node %q has no group %d in stage %d of round %d's node check", ErrStaleRound, node, group, stage, round)
	}
	return nil
}

// CheckChange is what a node check event changed.
type CheckChange struct {
	// Changed: a stage began or the check ended, which the views show.
	Changed bool
	// Ended is the check that just ended, not cancelled, whose excluded
	// verdicts leave the job; nil if none did.
	Ended *nodecheck.Check
}

// Report applies node's result for a group.
func (n *NodeCheck) Report(round, stage, group int, node string, r nodecheck.Result, now time.Time) (CheckChange, error) {
	before := n.m.Last()
	if err := n.m.Report(round, stage, group, node, r, now); err != nil {
		return CheckChange{}, fmt.Errorf("%w: %w", ErrStaleRound, err)
	}
	return n.change(before), nil
}

// Tick ends a stage whose deadline has passed.
func (n *NodeCheck) Tick(now time.Time) CheckChange {
	before := n.m.Last()
	n.m.Tick(now)
	return n.change(before)
}

func (n *NodeCheck) change(before *nodecheck.Check) CheckChange {
	after := n.m.Last()
	var ch CheckChange
	if before.Stage != after.Stage || before.Done != after.Done {
		ch.Changed = true
	}
	if after.Done && !before.Done && !after.Cancelled {
		ch.Ended = after
	}
	return ch
}

// Machine is the check's machine, for its read-only views (Stage,
// Verdict, Tasks, Last, Excluded, NextDeadline) and its MarshalState;
// events go through the methods above.
func (n *NodeCheck) Machine() *nodecheck.Machine { return n.m }
