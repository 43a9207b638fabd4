package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
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
func newArenas(key string, self arenaOwner, nproc int) (*arenas, error) {
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
	var out []*roverv1.MemorySnapshot
	for local, a := range ranks {
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
			if m, ok := snapshotMeta(local, snap); ok {
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

func (s *agentService) localRank(r int32) (int, error) {
	if r < 0 || int(r) >= s.a.cfg.NprocPerNode {
		return 0, connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("local_rank %d is not a local rank of this node (0 to %d)", r, s.a.cfg.NprocPerNode-1))
	}
	return int(r), nil
}

func (s *agentService) CheckpointBegin(ctx context.Context, req *connect.Request[roverv1.CheckpointBeginRequest]) (*connect.Response[roverv1.CheckpointBeginResponse], error) {
	r := req.Msg
	local, err := s.localRank(r.GetLocalRank())
	if err != nil {
		return nil, err
	}
	if r.GetSize() <= 0 || r.GetStep() < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("step %d and size %d must not be negative, and size not zero", r.GetStep(), r.GetSize()))
	}
	a, tok, _, err := s.a.arenas.begin(local, r.GetStep(), r.GetSize())
	if err != nil {
		return nil, arenaError(err)
	}
	return connect.NewResponse(&roverv1.CheckpointBeginResponse{Path: a.Path(), Offset: tok.Offset(), Capacity: tok.Size()}), nil
}

func (s *agentService) CheckpointCommit(ctx context.Context, req *connect.Request[roverv1.CheckpointCommitRequest]) (*connect.Response[roverv1.CheckpointCommitResponse], error) {
	r := req.Msg
	local, err := s.localRank(r.GetLocalRank())
	if err != nil {
		return nil, err
	}
	storage := s.a.checkpointStorage()
	if r.GetPersist() && storage.URL == "" {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errNoStorage)
	}
	ranked := r.GetWorldSize() > 0
	if r.GetPersist() || ranked {
		if r.GetWorldSize() < 1 || r.GetRank() < 0 || r.GetRank() >= r.GetWorldSize() {
			return nil, connect.NewError(connect.CodeInvalidArgument,
				fmt.Errorf("persist needs a rank %d below world size %d", r.GetRank(), r.GetWorldSize()))
		}
		if m := ckpt.Mode(r.GetMode()); m != ckpt.Sharded && m != ckpt.Replicated {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("mode %q: want %q or %q", m, ckpt.Sharded, ckpt.Replicated))
		}
	}
	if err := s.a.arenas.commit(local, r.GetStep(), r.GetLength()); err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	if !ranked || storage.URL == "" {
		return connect.NewResponse(&roverv1.CheckpointCommitResponse{}), nil
	}
	// The world that saved the step: the round of the workers running now.
	_, round := s.a.joined.get()
	job := persistJob{local: local, step: r.GetStep(), rank: int(r.GetRank()), mode: r.GetMode(), round: round}
	s.a.persister.remember(job)
	if r.GetPersist() {
		// Pin now, before the worker's next saves can reuse the slot; when a
		// persistence of the rank is still running, the job waits unpinned
		// and is pinned (if still in memory) when its turn comes.
		_, job.pinned = s.a.arenas.pin(local, job.step)
		s.a.persister.enqueue(job)
	}
	return connect.NewResponse(&roverv1.CheckpointCommitResponse{}), nil
}

func (s *agentService) CheckpointSnapshots(ctx context.Context, req *connect.Request[roverv1.CheckpointSnapshotsRequest]) (*connect.Response[roverv1.CheckpointSnapshotsResponse], error) {
	local, err := s.localRank(req.Msg.GetLocalRank())
	if err != nil {
		return nil, err
	}
	resp := &roverv1.CheckpointSnapshotsResponse{Snapshots: s.a.arenas.snapshots(local)}
	if v, _ := s.a.views.get(); v != nil && v.GetAssignment() != nil && v.GetAssignment().MemoryStep != nil {
		step := v.GetAssignment().GetMemoryStep()
		resp.AgreedStep = &step
	}
	return connect.NewResponse(resp), nil
}

func (s *agentService) CheckpointWait(ctx context.Context, req *connect.Request[roverv1.CheckpointWaitRequest]) (*connect.Response[roverv1.CheckpointWaitResponse], error) {
	local, err := s.localRank(req.Msg.GetLocalRank())
	if err != nil {
		return nil, err
	}
	w := s.a.persister.wait(local)
	return connect.NewResponse(&roverv1.CheckpointWaitResponse{DurableStep: w.durable, Error: w.err,
		CommittedStep: w.committed, Requested: w.requested, LastFailure: w.failure}), nil
}

func (s *agentService) CheckpointRestore(ctx context.Context, req *connect.Request[roverv1.CheckpointRestoreRequest]) (*connect.Response[roverv1.CheckpointRestoreResponse], error) {
	r := req.Msg
	local, err := s.localRank(r.GetLocalRank())
	if err != nil {
		return nil, err
	}
	if r.GetRank() < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("restore needs a rank >= 0"))
	}
	url := s.a.checkpointStorage().URL
	if url == "" {
		return connect.NewResponse(&roverv1.CheckpointRestoreResponse{}), nil // nothing was ever persisted
	}
	snap, err := s.a.persister.restore(ctx, local, int(r.GetRank()))
	if errors.Is(err, ckpt.ErrNoCheckpoint) {
		return connect.NewResponse(&roverv1.CheckpointRestoreResponse{}), nil
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("restore from %s: %w", url, err))
	}
	return connect.NewResponse(&roverv1.CheckpointRestoreResponse{Found: true, Snapshot: snap}), nil
}

func (s *agentService) CheckpointReserve(ctx context.Context, req *connect.Request[roverv1.CheckpointReserveRequest]) (*connect.Response[roverv1.CheckpointReserveResponse], error) {
	local, err := s.localRank(req.Msg.GetLocalRank())
	if err != nil {
		return nil, err
	}
	if req.Msg.GetSize() <= 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("size %d must be positive", req.Msg.GetSize()))
	}
	a, err := s.a.arenas.reserve(local, req.Msg.GetSize())
	if err != nil {
		return nil, arenaError(err)
	}
	return connect.NewResponse(&roverv1.CheckpointReserveResponse{Path: a.Path()}), nil
}

// arenaError maps an arena failure to an RPC error: a /dev/shm too small for
// the arena is ResourceExhausted (its message says what to do).
func arenaError(err error) error {
	if errors.Is(err, ckpt.ErrShmTooSmall) {
		return connect.NewError(connect.CodeResourceExhausted, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}
