package master

import (
	"fmt"
	"slices"

	roverv1 "github.com/roverml/rover/api/rover/v1"
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
	modeSharded    = "sharded"
	modeReplicated = "replicated"
)

// maxSnapshotsPerRank bounds a join's snapshot list (arenas hold two).
const maxSnapshotsPerRank = 8

// memorySnapshot is a snapshot a node holds, as journaled with its join.
type memorySnapshot struct {
	LocalRank int    `json:"local_rank"`
	Step      int64  `json:"step"`
	Rank      int    `json:"rank"`
	WorldSize int    `json:"world_size"`
	Mode      string `json:"mode"`
}

// restorable reports whether global rank r of a world of size w can restore
// s, held at its own local rank: a replicated snapshot serves any rank, a
// sharded one only the rank that saved it in a world of the same size.
func (s memorySnapshot) restorable(r, w int) bool {
	return s.Mode == modeReplicated || (s.Rank == r && s.WorldSize == w)
}

func validateSnapshots(r *roverv1.JoinRequest) ([]memorySnapshot, error) {
	snaps := r.GetSnapshots()
	lws := int(r.GetLocalWorldSize())
	if len(snaps) > maxSnapshotsPerRank*max(lws, 1) {
		return nil, invalid("%d memory snapshots for %d local ranks: at most %d per rank", len(snaps), lws, maxSnapshotsPerRank)
	}
	out := make([]memorySnapshot, 0, len(snaps))
	for i, s := range snaps {
		m := memorySnapshot{LocalRank: int(s.GetLocalRank()), Step: s.GetStep(), Rank: int(s.GetRank()),
			WorldSize: int(s.GetWorldSize()), Mode: s.GetMode()}
		switch {
		case m.LocalRank < 0 || m.LocalRank >= lws:
			return nil, invalid("snapshot %d: local_rank %d is not a local rank (0 to %d)", i, m.LocalRank, lws-1)
		case m.Step < 0:
			return nil, invalid("snapshot %d: step %d is negative", i, m.Step)
		case m.WorldSize < 1 || m.Rank < 0 || m.Rank >= m.WorldSize:
			return nil, invalid("snapshot %d: rank %d is not a rank of a world of size %d", i, m.Rank, m.WorldSize)
		case m.Mode != modeSharded && m.Mode != modeReplicated:
			return nil, invalid("snapshot %d: mode %q: want %q or %q", i, m.Mode, modeSharded, modeReplicated)
		}
		out = append(out, m)
	}
	return out, nil
}

// agreedMemoryStep returns the newest step that every global rank of world
// (of worldSize ranks) can restore from the snapshots its node holds: a
// replicated snapshot at local rank 0 (the node's copy: in replicated mode
// the SDKs save only there, and every local rank reads it), or one at its
// own local rank that it can restore. ok is false when there is no such
// step.
func agreedMemoryStep(world []rendezvous.Member, worldSize int, held map[string][]memorySnapshot) (step int64, ok bool) {
	var common []int64 // sorted; nil before the first rank
	first := true
	for _, m := range world {
		snaps := held[m.NodeID]
		var node []int64 // the node's copy: replicated steps at local rank 0
		for _, s := range snaps {
			if s.Mode == modeReplicated && s.LocalRank == 0 {
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

// agreeMemoryLocked fixes the memory step of a round that just closed.
func (c *core) agreeMemoryLocked() {
	if c.rdzv == nil || c.status.Open || c.status.WorldRound == 0 || c.memory.round == c.status.WorldRound {
		return
	}
	world := c.rdzv.Snapshot().World
	step, ok := agreedMemoryStep(world, c.status.WorldSize, c.held)
	c.memory = memoryAgreement{round: c.status.WorldRound, step: step, ok: ok}
}

// memoryAgreement is the memory step of one closed round.
type memoryAgreement struct {
	round int
	step  int64
	ok    bool
}

func (a memoryAgreement) String() string {
	if !a.ok {
		return fmt.Sprintf("round %d: no common step in memory", a.round)
	}
	return fmt.Sprintf("round %d: step %d", a.round, a.step)
}
