package rendezvous

import "slices"

// Member is one node's place in a world.
type Member struct {
	NodeID         string `json:"node_id"`
	NodeRank       int    `json:"node_rank"`  // stable rank of the node for the life of the job
	GroupRank      int    `json:"group_rank"` // 0..len(world)-1, in node-rank order
	LocalWorldSize int    `json:"local_world_size"`
	RankOffset     int    `json:"rank_offset"` // global rank of the node's local rank 0
	Addr           string `json:"addr"`
}

// Snapshot is a deep copy of the machine's observable state, safe to keep
// and to share.
type Snapshot struct {
	Job    JobState
	Reason string // why the job failed; empty otherwise
	Round  int    // the current round
	Open   bool   // the current round is still collecting joins
	// World is the world of the last closed round, WorldRound. While the
	// current round is closed, WorldRound == Round and World is the world
	// training now. While it is open, World is the previous world (empty
	// before round 1 closes) and is kept only for reference.
	World      []Member
	WorldRound int
	WorldSize  int // sum of LocalWorldSize over World
	// Restarts is the number of failure restarts used
	// (TORCHELASTIC_RESTART_COUNT); membership changes do not count.
	Restarts    int
	MaxRestarts int
	// Joined lists, by node rank, the nodes joined to the current open round,
	// or, while it is closed, the nodes waiting for a next one.
	Joined []string
	Config Config
}

// Member returns nodeID's place in s.World. It is O(len(World)); a driver
// that looks up many nodes should use [Machine.Assignment].
func (s Snapshot) Member(nodeID string) (Member, bool) {
	for _, mb := range s.World {
		if mb.NodeID == nodeID {
			return mb, true
		}
	}
	return Member{}, false
}

// Snapshot returns a deep copy of the observable state. O(n log n) in the
// number of joined nodes plus O(len(world)).
func (m *Machine) Snapshot() Snapshot {
	s := Snapshot{
		Job:         m.job,
		Round:       m.round,
		Open:        m.open,
		World:       slices.Clone(m.world),
		WorldRound:  m.worldRound,
		WorldSize:   m.worldSize,
		Restarts:    m.restarts,
		MaxRestarts: m.cfg.MaxRestarts,
		Joined:      m.joinedIDs(),
		Config:      m.cfg,
	}
	if m.fail != nil {
		s.Reason = m.fail.reason
	}
	return s
}

// joinedIDs returns the joined set's IDs sorted by node rank.
func (m *Machine) joinedIDs() []string {
	ns := make([]*nodeRec, 0, len(m.joined))
	for _, n := range m.joined {
		ns = append(ns, n)
	}
	slices.SortFunc(ns, func(a, b *nodeRec) int { return a.rank - b.rank })
	ids := make([]string, len(ns))
	for i, n := range ns {
		ids[i] = n.id
	}
	return ids
}

// Assignment returns nodeID's place in the world of the current round and
// that round's number. It is false while the round is open (the node should
// wait) or when the node is not a member (it is waiting for a later round).
// Check the job state separately: a finished job keeps its last world. O(1).
func (m *Machine) Assignment(nodeID string) (Member, int, bool) {
	if m.open {
		return Member{}, 0, false
	}
	i, ok := m.index[nodeID]
	if !ok {
		return Member{}, 0, false
	}
	return m.world[i], m.round, true
}

// WorldMember returns nodeID's place in the world of the last closed round,
// that round and the world's size, whether or not a newer round is open
// now: what a report about that world's work (a checkpoint) is checked
// against. It is false when the node is not in that world. O(1).
func (m *Machine) WorldMember(nodeID string) (member Member, round, worldSize int, ok bool) {
	i, in := m.index[nodeID]
	if m.worldRound == 0 || !in {
		return Member{}, 0, 0, false
	}
	return m.world[i], m.worldRound, m.worldSize, true
}
