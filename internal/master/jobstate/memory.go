package jobstate

import (
	"fmt"
	"slices"

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
}

func (a MemoryAgreement) String() string {
	if !a.OK {
		return fmt.Sprintf("round %d: no common step in memory", a.Round)
	}
	return fmt.Sprintf("round %d: step %d", a.Round, a.Step)
}

// Memory is what the job knows of its nodes' flash-checkpoint snapshots:
// each node's, as of its last join, and the step agreed for the last
// closed round.
type Memory struct {
	held   map[string][]MemorySnapshot
	agreed MemoryAgreement
}

// NewMemory returns the memory state of a job no node has joined.
func NewMemory() *Memory { return &Memory{held: map[string][]MemorySnapshot{}} }

// RestoreMemory returns the memory state that Held and Agreement
// described; it keeps held.
func RestoreMemory(held map[string][]MemorySnapshot, agreed MemoryAgreement) *Memory {
	m := NewMemory()
	if held != nil {
		m.held = held
	}
	m.agreed = agreed
	return m
}

// Joined applies a node's join: it holds snaps now.
func (m *Memory) Joined(node string, snaps []MemorySnapshot) { m.held[node] = snaps }

// Lost applies a node's loss: its memory is gone.
func (m *Memory) Lost(node string) { delete(m.held, node) }

// Agree fixes the memory step of world, of worldSize ranks, which closed
// worldRound, unless that round's step is fixed already.
func (m *Memory) Agree(world []rendezvous.Member, worldRound, worldSize int) {
	if m.agreed.Round == worldRound {
		return
	}
	step, ok := agreedStep(world, worldSize, m.held)
	m.agreed = MemoryAgreement{Round: worldRound, Step: step, OK: ok}
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
