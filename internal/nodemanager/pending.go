package nodemanager

import (
	"fmt"
	"strings"
	"time"
)

// capacity is what the platform showed it can place for one group: the
// nodes running or pending within the timeout when the group's nodes
// last timed out pending, at that time; nodes -1: unknown.
type capacity struct {
	nodes int
	at    time.Time
}

// Capacity returns how many nodes of group ("" means DefaultGroup) the
// platform showed it can place: the nodes that were running or pending
// within Spec.PendingTimeout when the group's nodes last timed out pending
// (and were given up, or are waited for). It is -1 when unknown: no node
// of the group timed out pending, or Spec.PendingRetry has passed since
// (the job may probe again for capacity that appeared), or the group is
// unknown.
func (m *Manager) Capacity(group string) int {
	for i, g := range m.spec.Groups {
		if g.name() == group || group == "" && g.name() == DefaultGroup {
			return m.capacity[i].nodes
		}
	}
	return -1
}

// Tick applies the pending timeout at now, and forgets a capacity older
// than Spec.PendingRetry. The driver calls it when [Manager.NextDeadline]
// passes; every other input applies it too.
func (m *Manager) Tick(now time.Time) []Command { return m.expire(now) }

// NextDeadline is when a pending node next times out, or a capacity is
// next forgotten, if either will.
func (m *Manager) NextDeadline() (time.Time, bool) {
	var next time.Time
	if !m.timesOut() {
		return next, false
	}
	earliest := func(d time.Time) {
		if next.IsZero() || d.Before(next) {
			next = d
		}
	}
	for _, s := range m.pendingSlots() {
		earliest(s.since.Add(m.spec.pendingTimeout()))
	}
	if retry := m.spec.pendingRetry(); retry > 0 {
		for _, c := range m.capacity {
			if c.nodes >= 0 {
				earliest(c.at.Add(retry))
			}
		}
	}
	return next, !next.IsZero()
}

func (m *Manager) timesOut() bool {
	return m.started && m.fail == nil && !m.ended && m.spec.pendingTimeout() > 0
}

// pendingSlots lists pending nodes that have not timed out yet.
func (m *Manager) pendingSlots() []*slot {
	var out []*slot
	for _, g := range m.slots {
		for _, s := range g {
			if s.state == Pending && !s.timedOut {
				out = append(out, s)
			}
		}
	}
	return out
}

// expire marks the nodes pending past the timeout at now and decides
// what they do to the job: PendingAll fails it; otherwise a group that
// keeps at least MinNodes (and one) nodes running, pending within the
// timeout, succeeded or yet to be created gives them up (deleted as a
// planned removal, no relaunch spent); one that would not fails the job
// (PendingNecessary) or keeps waiting for them (PendingSkip). A timed-out
// critical node fails the job, or is waited for under PendingSkip.
func (m *Manager) expire(now time.Time) []Command {
	if !m.timesOut() {
		return nil
	}
	m.forget(now)
	timeout := m.spec.pendingTimeout()
	var late []string
	lateGroup := make([]bool, len(m.spec.Groups))
	for _, s := range m.pendingSlots() {
		if !now.Before(s.since.Add(timeout)) {
			s.timedOut = true
			s.reason = fmt.Sprintf("node %s has been pending for more than %v (since %s)", s.id, timeout, s.since.UTC().Format(time.RFC3339))
			late = append(late, s.id)
			lateGroup[s.group] = true
		}
	}
	if len(late) > 0 && m.spec.PendingStrategy == PendingAll {
		return []Command{m.failJob(ErrPendingTimeout, fmt.Sprintf("nodes %s pending for more than %v (pending strategy: all)", strings.Join(late, ", "), timeout))}
	}
	var cmds []Command
	for gi, g := range m.spec.Groups {
		ready := m.uncreated(gi) // not created yet, so not late
		placed := 0              // running, or pending within the timeout
		var waiting []*slot
		critical := false
		for _, s := range m.slots[gi] {
			switch {
			case s.state == Pending && s.timedOut:
				waiting = append(waiting, s)
				critical = critical || g.critical(s.rank)
			case s.state != Failed && s.state != Removed:
				ready++
				if s.state.live() {
					placed++
				}
			}
		}
		if len(waiting) == 0 {
			continue
		}
		if lateGroup[gi] {
			m.capacity[gi] = capacity{nodes: placed, at: now}
		}
		ids := make([]string, len(waiting))
		for i, s := range waiting {
			ids[i] = s.id
		}
		skip := m.spec.PendingStrategy == PendingSkip
		switch {
		case critical && !skip:
			for _, s := range waiting {
				if g.critical(s.rank) {
					return append(cmds, m.failJob(ErrPendingTimeout, fmt.Sprintf("critical node %s pending for more than %v", s.id, timeout)))
				}
			}
		case ready < max(g.MinNodes, 1) && skip:
			continue // never fail for pending nodes: wait for them
		case ready < max(g.MinNodes, 1):
			return append(cmds, m.failJob(ErrPendingTimeout, fmt.Sprintf("nodes %s pending for more than %v leave %s %d nodes, fewer than its minimum %d", strings.Join(ids, ", "), timeout, g.name(), ready, g.MinNodes)))
		}
		for _, s := range waiting {
			if !g.critical(s.rank) { // PendingSkip waits for a critical node
				cmds = append(cmds, m.giveUp(s, ready, now))
			}
		}
	}
	return cmds
}

// giveUp removes the pending node of s, which the group can run without
// (ready nodes are left): a planned removal like a scale down, with no
// relaunch spent and no failure blamed. The rank stays Removed below the
// group's desired ranks, so [Manager.Desired] and [Manager.Live] no longer
// count it; a later scale up brings it back.
func (m *Manager) giveUp(s *slot, ready int, now time.Time) Command {
	g := m.spec.Groups[s.group]
	runs := fmt.Sprintf("the job runs with %d nodes", ready)
	if len(m.spec.Groups) > 1 {
		runs = fmt.Sprintf("%s runs with %d nodes", g.name(), ready)
	}
	why := fmt.Sprintf("pended %v past its %v pending timeout: given up", roundDuration(now.Sub(s.since)), m.spec.pendingTimeout())
	reason := fmt.Sprintf("node %s %s; %s", s.id, why, runs)
	c := Command{Kind: DeleteNode, NodeID: s.id, Removed: true, GivenUp: true, Nodes: ready, Reason: reason}
	delete(m.byID, s.id)
	m.retired[s.id] = true
	s.state, s.since, s.timedOut, s.held, s.reason, s.lastExit = Removed, now, false, false, reason, why
	return c
}

// forget drops the capacities older than Spec.PendingRetry at now.
func (m *Manager) forget(now time.Time) {
	retry := m.spec.pendingRetry()
	if retry <= 0 {
		return
	}
	for i, c := range m.capacity {
		if c.nodes >= 0 && !now.Before(c.at.Add(retry)) {
			m.capacity[i] = capacity{nodes: -1}
		}
	}
}

// roundDuration shows d to the second, or to the millisecond below one.
func roundDuration(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
