package jobstate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/roverml/rover/internal/rendezvous"
)

// Flash-checkpoint agreement: every agent joins a round with the snapshots
// its node holds in shared memory (taken while its workers are stopped), and
// when the round closes the master picks the newest step that every rank of
// the new world can restore from its own node's memory. The agents hand it
// to their workers, so that all ranks resume from the same step without a
// process group, or fall back to storage together when there is none.

// Snapshot modes, as the SDKs write them into the safetensors metadata.
const (
	ModeSharded    = "sharded"
	ModeReplicated = "replicated"
)

// MemorySnapshot is a snapshot a node holds, as journaled with its join.
type MemorySnapshot struct {
	LocalRank int    `json:"local_rank"`
	Step      int64  `json:"step"`
	Rank      int    `json:"rank"`
	WorldSize int    `json:"world_size"`
	Mode      string `json:"mode"`
}

// restorable reports whether global rank r of a world of size w can restore
// s, held at its own local rank: a replicated snapshot serves any rank, a
// sharded one only the rank that saved it in a world of the same size.
func (s MemorySnapshot) restorable(r, w int) bool {
	return s.Mode == ModeReplicated || (s.Rank == r && s.WorldSize == w)
}

// MemoryAgreement is the memory step of one closed round (OK false: none).
type MemoryAgreement struct {
	Round int
	Step  int64
	OK    bool
	// Holders are the world's nodes whose agents serve Step (a replicated
	// copy and a peer address), and Fetching the nodes that do not hold
	// it and fetch it from one of them (peer restore); both empty when
	// every node holds the step itself.
	Holders  []MemoryPeer `json:"holders,omitempty"`
	Fetching []string     `json:"fetching,omitempty"`
}

// MemoryPeer is a node that serves a replicated snapshot to other nodes.
type MemoryPeer struct {
	NodeID string `json:"node_id"`
	Addr   string `json:"addr"`
}

func (a MemoryAgreement) String() string {
	if !a.OK {
		return fmt.Sprintf("round %d: no common step in memory", a.Round)
	}
	if len(a.Fetching) > 0 {
		return fmt.Sprintf("round %d: step %d (%s from peers)", a.Round, a.Step, strings.Join(a.Fetching, ", "))
	}
	return fmt.Sprintf("round %d: step %d", a.Round, a.Step)
}

// Peers is what node fetches the agreed step from: the holders, when it
// is one of the nodes that fetch it; nil when it holds the step itself.
func (a MemoryAgreement) Peers(node string) []MemoryPeer {
	if !slices.Contains(a.Fetching, node) {
		return nil
	}
	return a.Holders
}

// Memory is what the job knows of its nodes' flash-checkpoint snapshots:
// each node's, as of its last join, and the step agreed for the last
// closed round.
type Memory struct {
	held map[string][]MemorySnapshot
	// peers is each node's peer address, as of its last join (absent:
	// its agent serves no snapshots).
	peers map[string]string
	// peerFailed are the nodes whose last join said their fetch from
	// peers failed. Not in snapshots of the state: a master restored from
	// one may offer peer restore once more, and the node fails again.
	peerFailed map[string]bool
	agreed     MemoryAgreement
}

// NewMemory returns the memory state of a job no node has joined.
func NewMemory() *Memory {
	return &Memory{held: map[string][]MemorySnapshot{}, peers: map[string]string{}, peerFailed: map[string]bool{}}
}

// RestoreMemory returns the memory state that Held, Peers and Agreement
// described; it keeps held and peers.
func RestoreMemory(held map[string][]MemorySnapshot, peers map[string]string, agreed MemoryAgreement) *Memory {
	m := NewMemory()
	if held != nil {
		m.held = held
	}
	if peers != nil {
		m.peers = peers
	}
	m.agreed = agreed
	return m
}

// Joined applies a node's join: it holds snaps now, and serves them to
// peers at peerAddr ("": it serves none); peerFailed says its last fetch
// from its peers failed, so the world it joins agrees without peer
// restore.
func (m *Memory) Joined(node string, snaps []MemorySnapshot, peerAddr string, peerFailed bool) {
	m.held[node] = snaps
	if peerFailed {
		m.peerFailed[node] = true
	} else {
		delete(m.peerFailed, node)
	}
	if peerAddr == "" {
		delete(m.peers, node)
	} else {
		m.peers[node] = peerAddr
	}
}

// PeerRestoreFailed records that node could not fetch its round's agreed
// step from its peers: the next world it is in agrees without peer
// restore, until it joins again without saying so.
func (m *Memory) PeerRestoreFailed(node string) { m.peerFailed[node] = true }

// Lost applies a node's loss: its memory is gone.
func (m *Memory) Lost(node string) {
	delete(m.held, node)
	delete(m.peerFailed, node)
	delete(m.peers, node)
}

// Agree fixes the memory step of world, of worldSize ranks, which closed
// worldRound, unless that round's step is fixed already.
func (m *Memory) Agree(world []rendezvous.Member, worldRound, worldSize int) {
	if m.agreed.Round == worldRound {
		return
	}
	peers := m.peers
	for _, mb := range world {
		if m.peerFailed[mb.NodeID] {
			peers = nil // a member could not fetch last time: no peer restore in this world
		}
	}
	m.agreed = agree(world, worldSize, m.held, peers)
	m.agreed.Round = worldRound
}

// Step is the memory step agreed for round, if any.
func (m *Memory) Step(round int) (int64, bool) {
	if !m.agreed.OK || m.agreed.Round != round {
		return 0, false
	}
	return m.agreed.Step, true
}

// Agreement is the last closed round's agreement, for snapshots.
func (m *Memory) Agreement() MemoryAgreement { return m.agreed }

// Held is each node's snapshots, for snapshots of the state: the map
// itself, to be encoded before the next event.
func (m *Memory) Held() map[string][]MemorySnapshot { return m.held }

// PeerAddrs is each node's peer address, for snapshots of the state: the
// map itself, to be encoded before the next event.
func (m *Memory) PeerAddrs() map[string]string { return m.peers }

// agree picks the newest step every rank of world can restore: from its
// own node's memory (agreedStep), or, for a node that holds no copy of a
// replicated step, from a node of the world that does and serves it to
// peers (peer restore). Of two candidates the newer step wins; at the same
// step, restoring from own memory (no transfer) does.
func agree(world []rendezvous.Member, worldSize int, held map[string][]MemorySnapshot, peers map[string]string) MemoryAgreement {
	own, ownOK := agreedStep(world, worldSize, held)
	best := MemoryAgreement{Step: own, OK: ownOK}
	// The candidates: replicated node copies that some member serves.
	servers := map[int64][]MemoryPeer{}
	for _, m := range world {
		addr := peers[m.NodeID]
		if addr == "" {
			continue
		}
		for _, s := range held[m.NodeID] {
			if s.Mode == ModeReplicated && s.LocalRank == 0 && !slices.ContainsFunc(servers[s.Step], func(p MemoryPeer) bool { return p.NodeID == m.NodeID }) {
				servers[s.Step] = append(servers[s.Step], MemoryPeer{NodeID: m.NodeID, Addr: addr})
			}
		}
	}
	for step, holders := range servers {
		if (best.OK && step <= best.Step) || len(holders) == 0 {
			continue
		}
		// A member without its own node copy of step fetches one, which
		// serves all its ranks.
		var fetching []string
		for _, m := range world {
			if !slices.ContainsFunc(held[m.NodeID], func(s MemorySnapshot) bool {
				return s.Mode == ModeReplicated && s.LocalRank == 0 && s.Step == step
			}) {
				fetching = append(fetching, m.NodeID)
			}
		}
		slices.SortFunc(holders, func(a, b MemoryPeer) int { return strings.Compare(a.NodeID, b.NodeID) })
		slices.Sort(fetching)
		best = MemoryAgreement{Step: step, OK: true, Holders: holders, Fetching: fetching}
	}
	return best
}

// agreedStep returns the newest step that every global rank of world
// (of worldSize ranks) can restore from the snapshots its node holds: a
// replicated snapshot at local rank 0 (the node's copy: in replicated mode
// the SDKs save only there, and every local rank reads it), or one at its
// own local rank that it can restore. ok is false when there is no such
// step.
func agreedStep(world []rendezvous.Member, worldSize int, held map[string][]MemorySnapshot) (step int64, ok bool) {
	var common []int64 // sorted; nil before the first rank
	first := true
	for _, m := range world {
		snaps := held[m.NodeID]
		var node []int64 // the node's copy: replicated steps at local rank 0
		for _, s := range snaps {
			if s.Mode == ModeReplicated && s.LocalRank == 0 {
				node = append(node, s.Step)
			}
		}
		for local := range m.LocalWorldSize {
			rank := m.RankOffset + local
			mine := slices.Clone(node)
			for _, s := range snaps {
				if s.LocalRank == local && s.restorable(rank, worldSize) {
					mine = append(mine, s.Step)
				}
			}
			slices.Sort(mine)
			if first {
				common, first = slices.Compact(mine), false
			} else {
				common = slices.DeleteFunc(common, func(s int64) bool {
					_, found := slices.BinarySearch(mine, s)
					return !found
				})
			}
			if len(common) == 0 {
				return 0, false
			}
		}
	}
	if len(common) == 0 {
		return 0, false
	}
	return common[len(common)-1], true
}
