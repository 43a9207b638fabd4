package rendezvous

// Status is the part of a Snapshot that every node's view shares, read in
// O(1). It is comparable: a driver compares two Statuses to tell whether the
// node views changed (joins to an open round leave it unchanged).
type Status struct {
	Job            JobState
	Reason         string
	Round          int
	Open           bool
	WorldRound     int
	WorldSize      int
	GroupWorldSize int
	Restarts       int
	MaxRestarts    int
}

// Status returns the machine's Status.
func (m *Machine) Status() Status {
	s := Status{
		Job:            m.job,
		Round:          m.round,
		Open:           m.open,
		WorldRound:     m.worldRound,
		WorldSize:      m.worldSize,
		GroupWorldSize: len(m.world),
		Restarts:       m.restarts,
		MaxRestarts:    m.cfg.MaxRestarts,
	}
	if m.fail != nil {
		s.Reason = m.fail.Error()
	}
	return s
}

// Joined returns nodeID's node rank and the round it takes part in: the
// current round when it is joined to it or is a member of its closed world,
// the next round when it waits for one. ok is false for a node that is
// unknown, lost, or neither joined nor a member.
func (m *Machine) Joined(nodeID string) (nodeRank, round int, ok bool) {
	n := m.nodes[nodeID]
	if n == nil || n.lost {
		return 0, 0, false
	}
	switch {
	case m.open && n.joined:
		return n.rank, m.round, true
	case !m.open && m.inWorld(n):
		return n.rank, m.round, true
	case !m.open && n.joined:
		return n.rank, m.round + 1, true
	}
	return n.rank, 0, false
}
