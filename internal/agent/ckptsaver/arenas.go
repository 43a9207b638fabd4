package ckptsaver

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/ckpt"
)

// arenas holds the flash-checkpoint arenas of the node's workers, one per
// local rank, in a private directory of /dev/shm (arenadir.go). They belong
// to the agent: they outlive the workers' restarts, go when the agent stops,
// and are adopted by the next agent of the job on the node when the agent
// is killed.
type arenas struct {
	dir    *arenaDir
	mu     sync.Mutex
	byRank map[int]*ckpt.Arena
	tokens map[int]ckpt.WriteToken // the open write of each rank
	pinned map[int]int             // the slot each rank is persisting from
	// refreshed is when the directory was last marked in use.
	refreshed time.Time
}

// newArenas opens the arenas of the job's node: those a killed agent of the
// same job left on this node, or none.
func newArenas(key string, self Owner, nproc int) (*arenas, error) {
	base := ckpt.DefaultArenaDir
	if _, err := os.Stat(base); err != nil {
		base = os.TempDir()
	}
	dir, err := openArenaDir(base, key, self, time.Now())
	if err != nil {
		return nil, fmt.Errorf("create the checkpoint arena directory: %w", err)
	}
	s := &arenas{dir: dir, byRank: map[int]*ckpt.Arena{}, tokens: map[int]ckpt.WriteToken{}, pinned: map[int]int{}}
	if dir.adopted {
		for _, local := range arenaRanks(dir.path) {
			name := fmt.Sprintf("rank-%d", local)
			a, err := ckpt.OpenArena(dir.path, name)
			if err != nil || local >= nproc {
				if a != nil {
					_ = a.Close()
				}
				os.Remove(filepath.Join(dir.path, name)) // damaged, or of a local rank this agent does not run
				continue
			}
			s.byRank[local] = a
		}
	}
	return s, nil
}

// adopted lists the local ranks whose arenas came from a killed agent.
func (s *arenas) adopted() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.dir.adopted {
		return nil
	}
	out := make([]int, 0, len(s.byRank))
	for r := range s.byRank {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// close unmaps and deletes every arena.
func (s *arenas) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.byRank {
		_ = a.Remove()
	}
	s.dir.remove()
}

// inventory lists the committed snapshots of every local rank with what
// their metadata says, for the master's agreement on the step to restore.
// Snapshots whose header cannot be read are left out.
func (s *arenas) inventory() []*roverv1.MemorySnapshot {
	s.mu.Lock()
	ranks := make(map[int]*ckpt.Arena, len(s.byRank))
	for r, a := range s.byRank {
		ranks[r] = a
	}
	s.mu.Unlock()
	return describeArenas(ranks, func(*roverv1.MemorySnapshot) bool { return true })
}

// describeArenas lists the committed snapshots of the arenas, keyed by
// local rank, that keep says to keep, ordered by local rank and step.
// Snapshots whose header cannot be read, or whose slot a save reuses as it
// is read, are left out.
func describeArenas(byLocal map[int]*ckpt.Arena, keep func(*roverv1.MemorySnapshot) bool) []*roverv1.MemorySnapshot {
	var out []*roverv1.MemorySnapshot
	for local, a := range byLocal {
		slots, err := a.Slots()
		if err != nil {
			continue
		}
		for _, si := range slots {
			if si.State != ckpt.SlotValid {
				continue
			}
			snap, ok := a.Valid(si.Step)
			if !ok {
				continue
			}
			m, ok := snapshotMeta(local, snap)
			if !ok || a.Check(snap) != nil {
				continue // unreadable, or the slot was reused as it was read
			}
			if keep(m) {
				out = append(out, m)
			}
		}
	}
	slices.SortFunc(out, func(x, y *roverv1.MemorySnapshot) int {
		return cmp.Or(cmp.Compare(x.GetLocalRank(), y.GetLocalRank()), cmp.Compare(x.GetStep(), y.GetStep()))
	})
	return out
}

// snapshotMeta describes a snapshot from its safetensors metadata.
func snapshotMeta(local int, snap ckpt.Snapshot) (*roverv1.MemorySnapshot, bool) {
	meta, err := ckpt.Metadata(snap.Data)
	if err != nil {
		return nil, false
	}
	step, err1 := strconv.ParseInt(meta[ckpt.MetaStep], 10, 64)
	rank, err2 := strconv.Atoi(meta[ckpt.MetaRank])
	world, err3 := strconv.Atoi(meta[ckpt.MetaWorldSize])
	if err1 != nil || err2 != nil || err3 != nil || step != snap.Step || world < 1 || rank < 0 || rank >= world {
		return nil, false
	}
	mode := meta[ckpt.MetaMode]
	if mode == "" {
		mode = string(ckpt.Sharded)
	}
	if mode != string(ckpt.Sharded) && mode != string(ckpt.Replicated) {
		return nil, false
	}
	return &roverv1.MemorySnapshot{LocalRank: int32(local), Step: step, Rank: int32(rank), WorldSize: int32(world), Mode: mode}, true
}

// begin opens a write of step for a local rank, creating or growing its arena.
func (s *arenas) begin(local int, step, size int64) (*ckpt.Arena, ckpt.WriteToken, []byte, error) {
	a, err := s.reserve(local, size)
	if err != nil {
		return nil, ckpt.WriteToken{}, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	avoid := -1
	if p, ok := s.pinned[local]; ok {
		avoid = p
	}
	slot, tok, err := a.BeginWriteAvoiding(step, avoid)
	if err != nil {
		return nil, ckpt.WriteToken{}, nil, err
	}
	s.tokens[local] = tok
	return a, tok, slot, nil
}

// pin keeps the slot holding step from being written until unpin, so that
// it can be persisted straight from shared memory. It fails when the step is
// no longer in memory (overwritten by newer saves) or another step of the
// rank is pinned.
func (s *arenas) pin(local int, step int64) (ckpt.Snapshot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.byRank[local]
	if _, busy := s.pinned[local]; busy || a == nil {
		return ckpt.Snapshot{}, false
	}
	snap, ok := a.Valid(step)
	if !ok {
		return ckpt.Snapshot{}, false
	}
	s.pinned[local] = snap.Slot
	return snap, true
}

func (s *arenas) unpin(local int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pinned, local)
}

// reserve creates or grows a rank's arena to hold size bytes a snapshot.
func (s *arenas) reserve(local int, size int64) (*ckpt.Arena, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.byRank[local]
	switch {
	case a == nil:
		var err error
		if a, err = ckpt.CreateArena(s.dir.path, fmt.Sprintf("rank-%d", local), size); err != nil {
			return nil, err
		}
		s.byRank[local] = a
	case a.SlotSize() < size:
		if err := a.Resize(size); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// bytes is the size of the arenas' slots, together.
func (s *arenas) bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, a := range s.byRank {
		n += 2 * a.SlotSize()
	}
	return n
}

// get returns a rank's arena, or nil.
func (s *arenas) get(local int) *ckpt.Arena {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byRank[local]
}

func (s *arenas) commit(local int, step, length int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, tok, ok := s.byRank[local], s.tokens[local], false
	if a != nil {
		_, ok = s.tokens[local]
	}
	if !ok {
		return fmt.Errorf("local rank %d has no checkpoint write open: call CheckpointBegin first", local)
	}
	delete(s.tokens, local)
	if err := a.Commit(tok, length); err != nil {
		return fmt.Errorf("commit step %d of local rank %d: %w", step, local, err)
	}
	if now := time.Now(); now.Sub(s.refreshed) > orphanGrace/10 {
		s.refreshed = now
		s.dir.refresh(now)
	}
	return nil
}

// snapshots lists a rank's committed snapshots, newest first.
func (s *arenas) snapshots(local int) []*roverv1.CheckpointSnapshot {
	s.mu.Lock()
	a := s.byRank[local]
	s.mu.Unlock()
	if a == nil {
		return nil
	}
	var out []*roverv1.CheckpointSnapshot
	latest, ok := a.Latest()
	if !ok {
		return nil
	}
	out = append(out, &roverv1.CheckpointSnapshot{Step: latest.Step, Path: a.Path(), Offset: latest.Offset, Length: int64(len(latest.Data))})
	slots, err := a.Slots()
	if err != nil {
		return out
	}
	for _, si := range slots {
		if si.State == ckpt.SlotValid && si.Step != latest.Step {
			if snap, ok := a.Valid(si.Step); ok {
				out = append(out, &roverv1.CheckpointSnapshot{Step: snap.Step, Path: a.Path(), Offset: snap.Offset, Length: int64(len(snap.Data))})
			}
		}
	}
	return out
}

// abort drops a rank's open write: its slot stays unpublished ("writing"),
// and the next begin reuses it.
func (s *arenas) abort(local int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tokens, local)
}
