package jobstate

import (
	"cmp"
	"slices"
	"strings"

	"github.com/roverml/rover/internal/rendezvous"
)

// agree picks the newest step every rank of world (of worldSize ranks)
// can restore from memory, and how: from its own node's memory; for a node
// without its own copy of a replicated step, from a node of the world that
// holds one and serves it to peers (peer restore); for a node without its
// own shards of a sharded step, from the world's nodes that keep backups
// of every one of them and serve them (backup peers). Of two candidates
// the newer step wins; at one step, a node that can restore from its own
// memory does (no transfer). With peers nil, only own memory counts.
func agree(world []rendezvous.Member, worldSize int, held map[string][]MemorySnapshot, peers map[string]string) MemoryAgreement {
	backups := indexBackups(world, held, peers)
	for _, step := range candidateSteps(world, held) {
		if a, ok := agreeOn(step, world, worldSize, held, peers, backups); ok {
			return a
		}
	}
	return MemoryAgreement{}
}

// agreedStep returns the newest step that every global rank of world (of
// worldSize ranks) can restore from its own node's memory: a replicated
// snapshot at local rank 0 (the node's copy: in replicated mode the SDKs
// save only there, and every local rank reads it), or one at its own local
// rank that it can restore. ok is false when there is no such step.
func agreedStep(world []rendezvous.Member, worldSize int, held map[string][]MemorySnapshot) (step int64, ok bool) {
	for _, step := range candidateSteps(world, held) {
		if !slices.ContainsFunc(world, func(m rendezvous.Member) bool { return !ownCovers(m, step, worldSize, held[m.NodeID]) }) {
			return step, true
		}
	}
	return 0, false
}

// candidateSteps are the steps the world's nodes hold, newest first.
func candidateSteps(world []rendezvous.Member, held map[string][]MemorySnapshot) []int64 {
	var steps []int64
	for _, m := range world {
		for _, s := range held[m.NodeID] {
			steps = append(steps, s.Step)
		}
	}
	slices.SortFunc(steps, func(a, b int64) int { return cmp.Compare(b, a) })
	return slices.Compact(steps)
}

// ownCovers reports whether every rank of m can restore step from its
// node's own snapshots snaps.
func ownCovers(m rendezvous.Member, step int64, worldSize int, snaps []MemorySnapshot) bool {
	if slices.ContainsFunc(snaps, func(s MemorySnapshot) bool { return nodeCopy(s, step) }) {
		return m.LocalWorldSize > 0
	}
	for local := range m.LocalWorldSize {
		rank := m.RankOffset + local
		if !slices.ContainsFunc(snaps, func(s MemorySnapshot) bool {
			return !s.Backup && s.LocalRank == local && s.Step == step && s.restorable(rank, worldSize)
		}) {
			return false
		}
	}
	return m.LocalWorldSize > 0
}

// nodeCopy reports whether s is a node's own replicated copy of step.
func nodeCopy(s MemorySnapshot, step int64) bool {
	return !s.Backup && s.Mode == ModeReplicated && s.LocalRank == 0 && s.Step == step
}

// shardKey names one rank's sharded snapshot of a step.
type shardKey struct {
	step        int64
	rank, world int
}

// indexBackups lists, for each rank's sharded snapshot of a step, the
// serving nodes of world that keep a backup of it.
func indexBackups(world []rendezvous.Member, held map[string][]MemorySnapshot, peers map[string]string) map[shardKey][]MemoryPeer {
	idx := map[shardKey][]MemoryPeer{}
	for _, m := range world {
		addr := peers[m.NodeID]
		if addr == "" {
			continue
		}
		for _, s := range held[m.NodeID] {
			if !s.Backup || s.Mode != ModeSharded {
				continue
			}
			k := shardKey{s.Step, s.Rank, s.WorldSize}
			if !slices.ContainsFunc(idx[k], func(p MemoryPeer) bool { return p.NodeID == m.NodeID }) {
				idx[k] = append(idx[k], MemoryPeer{NodeID: m.NodeID, Addr: addr})
			}
		}
	}
	return idx
}

// agreeOn says whether every rank of world can restore step, and how.
func agreeOn(step int64, world []rendezvous.Member, worldSize int, held map[string][]MemorySnapshot,
	peers map[string]string, backups map[shardKey][]MemoryPeer) (MemoryAgreement, bool) {
	var holders []MemoryPeer // nodes that serve a replicated copy of step
	for _, m := range world {
		if addr := peers[m.NodeID]; addr != "" && slices.ContainsFunc(held[m.NodeID], func(s MemorySnapshot) bool { return nodeCopy(s, step) }) {
			holders = append(holders, MemoryPeer{NodeID: m.NodeID, Addr: addr})
		}
	}
	a := MemoryAgreement{Step: step, OK: true}
	for _, m := range world {
		switch {
		case ownCovers(m, step, worldSize, held[m.NodeID]):
		case len(holders) > 0:
			// A replicated copy serves all the node's ranks.
			a.Fetching = append(a.Fetching, m.NodeID)
		default:
			keepers := backupKeepers(m, step, worldSize, backups)
			if len(keepers) == 0 {
				return MemoryAgreement{}, false
			}
			if a.Backups == nil {
				a.Backups = map[string][]MemoryPeer{}
			}
			a.Backups[m.NodeID] = keepers
		}
	}
	if len(a.Fetching) > 0 {
		slices.SortFunc(holders, func(a, b MemoryPeer) int { return strings.Compare(a.NodeID, b.NodeID) })
		slices.Sort(a.Fetching)
		a.Holders = holders
	}
	return a, true
}

// backupKeepers are the nodes other than m that keep backups of every one
// of m's ranks' sharded snapshots of step, sorted.
func backupKeepers(m rendezvous.Member, step int64, worldSize int, backups map[shardKey][]MemoryPeer) []MemoryPeer {
	var keepers []MemoryPeer
	for local := range m.LocalWorldSize {
		have := backups[shardKey{step, m.RankOffset + local, worldSize}]
		if local == 0 {
			keepers = slices.DeleteFunc(slices.Clone(have), func(p MemoryPeer) bool { return p.NodeID == m.NodeID })
		} else {
			keepers = slices.DeleteFunc(keepers, func(p MemoryPeer) bool { return !slices.Contains(have, p) })
		}
		if len(keepers) == 0 {
			return nil
		}
	}
	slices.SortFunc(keepers, func(a, b MemoryPeer) int { return strings.Compare(a.NodeID, b.NodeID) })
	return keepers
}

// maxRingShifts bounds the shifts backupRing tries: enough for nodes
// placed in blocks of up to that many per host.
const maxRingShifts = 64

// backupRing assigns each node of world that serves peers a backup peer:
// in group-rank order, the node d places after it, for the smallest shift
// d that puts every node's backup on another host (Member.Addr), else the
// shift that puts the most there (the smallest of equals). A shift keeps
// the ring balanced: every node keeps the shards of exactly one other. A
// world of fewer than two such nodes has no ring.
func backupRing(world []rendezvous.Member, peers map[string]string) map[string]MemoryPeer {
	var nodes []rendezvous.Member
	for _, m := range world {
		if peers[m.NodeID] != "" {
			nodes = append(nodes, m)
		}
	}
	n := len(nodes)
	if n < 2 {
		return nil
	}
	slices.SortFunc(nodes, func(a, b rendezvous.Member) int { return cmp.Compare(a.GroupRank, b.GroupRank) })
	best, bestCross := 1, -1
	for d := 1; d < n && d <= maxRingShifts; d++ {
		cross := 0
		for k := range nodes {
			if nodes[k].Addr != nodes[(k+d)%n].Addr {
				cross++
			}
		}
		if cross > bestCross {
			best, bestCross = d, cross
		}
		if cross == n || bestCross == 0 && d == 1 && allOneHost(nodes) {
			break
		}
	}
	ring := make(map[string]MemoryPeer, n)
	for k, m := range nodes {
		to := nodes[(k+best)%n]
		ring[m.NodeID] = MemoryPeer{NodeID: to.NodeID, Addr: peers[to.NodeID]}
	}
	return ring
}

func allOneHost(nodes []rendezvous.Member) bool {
	return !slices.ContainsFunc(nodes, func(m rendezvous.Member) bool { return m.Addr != nodes[0].Addr })
}
