package jobstate

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/roverml/rover/internal/rendezvous"
)

// Flash-checkpoint agreement: every agent joins a round with the snapshots
// its node holds in shared memory (taken while its workers are stopped):
// its own, and the backups it keeps of another node's shards. When the
// round closes the master picks the newest step that every rank of the new
// world can restore from memory: its own node's, or, for a node that holds
// nothing (a replacement), a peer's replicated copy or the backup its
// backup peer keeps of its shards (agree.go). The agents hand it to their
// workers, so that all ranks resume from the same step without a process
// group, or fall back to storage together when there is none. It also
// assigns each node of the world its backup peer (backupRing).

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
	// Backup: a copy the node keeps of another node's sharded snapshot
	// (of Rank, in a world of WorldSize), as that node's backup peer;
	// never restored by the node's own workers.
	Backup bool `json:"backup,omitempty"`
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
	// Backups are the world's nodes that hold none of their own sharded
	// snapshots of Step and fetch each local rank's from a backup peer
	// that keeps it, with the peers that keep them all (sorted).
	Backups map[string][]MemoryPeer `json:"backups,omitempty"`
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
	var from []string
	if len(a.Fetching) > 0 {
		from = append(from, strings.Join(a.Fetching, ", ")+" from peers")
	}
	if len(a.Backups) > 0 {
		from = append(from, strings.Join(slices.Sorted(maps.Keys(a.Backups)), ", ")+" from backup peers")
	}
	if len(from) > 0 {
		return fmt.Sprintf("round %d: step %d (%s)", a.Round, a.Step, strings.Join(from, "; "))
	}
	return fmt.Sprintf("round %d: step %d", a.Round, a.Step)
}

// Peers is what node fetches the agreed step from: the holders, when it
// is one of the nodes that fetch a replicated copy; its backup peers, when
// it fetches its shards (FromBackup); nil when it holds the step itself.
func (a MemoryAgreement) Peers(node string) []MemoryPeer {
	if slices.Contains(a.Fetching, node) {
		return a.Holders
	}
	return a.Backups[node]
}

// FromBackup reports whether node fetches its own shards of the agreed
// step from its backup peers.
func (a MemoryAgreement) FromBackup(node string) bool { return len(a.Backups[node]) > 0 }

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
	// ring is each node of the last closed round's world to its backup
	// peer (backupRing), and keeps the other way round.
	ring  map[string]MemoryPeer
	keeps map[string]string
}

// NewMemory returns the memory state of a job no node has joined.
func NewMemory() *Memory {
	return &Memory{held: map[string][]MemorySnapshot{}, peers: map[string]string{}, peerFailed: map[string]bool{}}
}

// RestoreMemory returns the memory state that Held, PeerAddrs, Agreement
// and Ring described; it keeps held, peers and ring.
func RestoreMemory(held map[string][]MemorySnapshot, peers map[string]string, agreed MemoryAgreement, ring map[string]MemoryPeer) *Memory {
	m := NewMemory()
	if held != nil {
		m.held = held
	}
	if peers != nil {
		m.peers = peers
	}
	m.agreed = agreed
	m.setRing(ring)
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
	m.setRing(backupRing(world, m.peers))
}

func (m *Memory) setRing(ring map[string]MemoryPeer) {
	m.ring, m.keeps = ring, make(map[string]string, len(ring))
	for from, p := range ring {
		m.keeps[p.NodeID] = from
	}
}

// BackupPeer is where node's agent pushes its sharded snapshots: its
// backup peer in the last closed round's world (ok false: none).
func (m *Memory) BackupPeer(node string) (MemoryPeer, bool) {
	p, ok := m.ring[node]
	return p, ok
}

// BackupOf is the node whose sharded snapshots node keeps ("" none): the
// node whose backup peer it is.
func (m *Memory) BackupOf(node string) string { return m.keeps[node] }

// Ring is each node's backup peer, for snapshots of the state: the map
// itself, to be encoded before the next event.
func (m *Memory) Ring() map[string]MemoryPeer { return m.ring }

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
