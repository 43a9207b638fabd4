package nodemanager

import (
	"fmt"
	"time"

	"github.com/roverml/rover/internal/diagnosis"
	"github.com/roverml/rover/internal/platform"
)

// Scale sets how many nodes group (its name; "" means DefaultGroup) should
// have, within its MinNodes..MaxNodes, and returns what that takes:
//
//   - scaling up creates the ranks from the current count up to n-1; a
//     rank scaled away before comes back as a new node (its id's relaunch
//     number goes up, its relaunch budget does not);
//   - scaling down removes the highest ranks: their live nodes are
//     deleted with [Command.Removed] set (a planned departure, not a
//     failure) and the ranks are Removed; ranks that already ended stay as
//     they are.
//
// Ranks below n that failed for good stay failed. Ranks given up pending
// (see [Manager.Capacity]) are not counted: scaling up brings them back
// first, the lowest first; scaling down keeps them given up. Asking for
// the count the group has ([Manager.Desired]) is a no-op. Errors wrap [ErrBadScale] or [ErrJobOver] and say
// what to do.
func (m *Manager) Scale(group string, n int, why string, now time.Time) ([]Command, error) {
	gi := -1
	for i, g := range m.spec.Groups {
		if g.name() == group || group == "" && g.name() == DefaultGroup {
			gi = i
		}
	}
	if gi < 0 {
		return nil, fmt.Errorf("%w: the job has no node group %q", ErrBadScale, group)
	}
	g := m.spec.Groups[gi]
	if n < max(g.MinNodes, 1) || n > g.MaxNodes {
		return nil, fmt.Errorf("%w %s to %d nodes: the job runs %d to %d (its --nnodes); ask for a count in that range",
			ErrBadScale, g.name(), n, max(g.MinNodes, 1), g.MaxNodes)
	}
	if m.fail != nil || m.ended {
		return nil, fmt.Errorf("%w: %s is not scaled to %d nodes", ErrJobOver, g.name(), n)
	}
	cmds := m.expire(now)
	if m.fail != nil {
		return cmds, nil
	}
	old := m.wanted(gi)
	if n == old {
		return cmds, nil
	}
	if !m.started {
		m.desired[gi] = n
		return cmds, nil
	}
	bound := m.desired[gi]
	var revive []int // Removed ranks that come back
	if n > old {
		// Ranks given up pending come back first (the lowest), then
		// ranks above the wanted ones.
		need := n - old
		for r := 0; r < min(bound, len(m.slots[gi])) && need > 0; r++ {
			if m.slots[gi][r].state == Removed {
				revive = append(revive, r)
				need--
			}
		}
		for r := bound; r < min(bound+need, len(m.slots[gi])); r++ {
			if m.slots[gi][r].state == Removed {
				revive = append(revive, r)
			}
		}
		m.desired[gi] = bound + need
	} else {
		// Keep the lowest n wanted ranks; ranks given up below them stay
		// given up.
		b := 0
		for count := 0; count < n; b++ {
			if !m.hole(gi, b) {
				count++
			}
		}
		m.desired[gi] = b
	}
	for r := m.desired[gi]; r < len(m.slots[gi]); r++ {
		s := m.slots[gi][r]
		if !s.state.live() {
			continue
		}
		reason := fmt.Sprintf("scaled %s from %d to %d nodes (%s): removing node %s (rank %d)", g.name(), old, n, why, s.id, r)
		if s.held {
			cmds = append(cmds, Command{Kind: DeleteNode, NodeID: s.id, Removed: true, Reason: reason})
		}
		delete(m.byID, s.id)
		m.retired[s.id] = true
		s.state, s.since, s.timedOut, s.held, s.reason = Removed, now, false, false, reason
	}
	reason := func(other GroupSpec, r int) string {
		if other.name() != g.name() {
			return fmt.Sprintf("start %s rank %d", other.name(), r)
		}
		return fmt.Sprintf("scaled %s from %d to %d nodes (%s): adding rank %d", g.name(), old, n, why, r)
	}
	for _, r := range revive {
		s := m.slots[gi][r]
		s.relaunch++
		s.rescaled++
		cmds = append(cmds, m.create(s, now, reason(g, r)))
	}
	// Ranks never created come as the platform takes the earlier ones
	// (startWindow); the first of them now.
	return append(cmds, m.fill(now, reason)...), nil
}

// hole reports whether rank r of group gi was given up pending: Removed
// below the group's desired ranks.
func (m *Manager) hole(gi, r int) bool {
	return m.started && r < m.desired[gi] && r < len(m.slots[gi]) && m.slots[gi][r].state == Removed
}

// wanted is how many nodes group gi should have: its desired ranks less
// those given up pending.
func (m *Manager) wanted(gi int) int {
	n := m.desired[gi]
	if !m.started {
		return n
	}
	for r := range min(n, len(m.slots[gi])) {
		if m.hole(gi, r) {
			n--
		}
	}
	return n
}

// Desired returns how many nodes group should have now (its Nodes, or the
// last Scale, less the nodes given up pending past Spec.PendingTimeout),
// or -1 for an unknown group.
func (m *Manager) Desired(group string) int {
	for i, g := range m.spec.Groups {
		if g.name() == group || group == "" && g.name() == DefaultGroup {
			return m.wanted(i)
		}
	}
	return -1
}

// Live counts the nodes of every group that are pending or running, or
// wanted and yet to be created: the nodes expected at the job's
// rendezvous.
func (m *Manager) Live() int {
	n := 0
	for gi, g := range m.slots {
		n += m.uncreated(gi)
		for _, s := range g {
			if s.state.live() {
				n++
			}
		}
	}
	return n
}

// Memory is each node's memory in bytes as the group starts it:
// Resources.MemoryBytes, else MemoryLimit; 0 when unknown.
func (g GroupSpec) Memory() int64 {
	if g.Resources.MemoryBytes > 0 {
		return g.Resources.MemoryBytes
	}
	return g.MemoryLimit
}

// relaunches is how often the rank was relaunched: its relaunch number
// less the times scaling brought it back.
func (s *slot) relaunches() int { return s.relaunch - s.rescaled }

// oomMemory is the memory for the relaunch of a node the platform killed
// for memory (Kubernetes' OOMKilled): more by DLRover's policy
// (diagnosis.NextMemory), or 0 to keep it when the node's memory is
// unknown or at the cap.
func (m *Manager) oomMemory(s *slot) int64 {
	next, ok := diagnosis.NextMemory(m.memory(s))
	if !ok {
		return 0
	}
	return next
}

// cpuRequest is the CPU s's nodes ask for: a migration's, else the
// group's request (0: none known).
func (m *Manager) cpuRequest(s *slot) int64 {
	g := m.spec.Groups[s.group]
	switch {
	case s.milliCPU > 0:
		return s.milliCPU
	case g.Resources.MilliCPU > 0:
		return g.Resources.MilliCPU
	}
	return g.MilliCPU
}

// migrate carries out MigrateNode: s's running node is deleted, and once
// it is gone (finishMigration) a node asking for a.MilliCPU takes its
// rank, as a rescale (no relaunch budget spent, no relaunch counted). A
// node that is not running, or one already being migrated, or a request
// not above the current one, changes nothing.
func (m *Manager) migrate(s *slot, a Action, now time.Time) []Command {
	g := m.spec.Groups[s.group]
	if s.state != Running || s.migrating || m.ended || a.MilliCPU <= m.cpuRequest(s) {
		return nil
	}
	s.milliCPU, s.migrating = a.MilliCPU, true
	s.reason = fmt.Sprintf("%s rank %d is migrated to a node of %dm CPU once %s is gone: %s", g.name(), s.rank, a.MilliCPU, s.id, a.Reason)
	if !s.held {
		return m.finishMigration(s, platform.Event{NodeID: s.id, Kind: platform.Deleted}, now)
	}
	return []Command{{Kind: DeleteNode, NodeID: s.id,
		Reason: fmt.Sprintf("node %s (%s rank %d) is migrated: %s", s.id, g.name(), s.rank, a.Reason)}}
}

// finishMigration creates the successor of s's migrated node, which ev
// says is gone.
func (m *Manager) finishMigration(s *slot, ev platform.Event, now time.Time) []Command {
	g := m.spec.Groups[s.group]
	old := s.id
	if ev.Kind == platform.Deleted {
		s.held = false
	}
	delete(m.byID, old)
	m.retired[old] = true
	s.migrating = false
	s.relaunch++
	s.rescaled++
	s.lastExit = fmt.Sprintf("%s, migrated", ev.Describe())
	reason := fmt.Sprintf("%s rank %d migrated to a node of %dm CPU as %s (%s %s)", g.name(), s.rank, s.milliCPU,
		nodeID(m.spec.Job, g.name(), s.rank, s.relaunch), old, ev.Describe())
	var cmds []Command
	if s.held { // it exited: the platform may still hold it
		cmds = append(cmds, Command{Kind: DeleteNode, NodeID: old, Reason: fmt.Sprintf("node %s %s: removing it, migrated", old, ev.Describe())})
	}
	return append(cmds, m.create(s, now, reason))
}
