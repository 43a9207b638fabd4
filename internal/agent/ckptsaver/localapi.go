package ckptsaver

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/jobconfig/configwire"
)

// LocalAPI is the checkpoint half of the agent's local API: the calls the
// workers' checkpointers make (CheckpointBegin, Commit, Snapshots, Wait,
// Restore, Reserve, Storage). The agent's service embeds it.
type LocalAPI struct{ sv *Saver }

func (s *LocalAPI) localRank(r int32) (int, error) {
	if r < 0 || int(r) >= s.sv.cfg.NprocPerNode {
		return 0, connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("local_rank %d is not a local rank of this node (0 to %d)", r, s.sv.cfg.NprocPerNode-1))
	}
	return int(r), nil
}

func (s *LocalAPI) CheckpointBegin(ctx context.Context, req *connect.Request[roverv1.CheckpointBeginRequest]) (*connect.Response[roverv1.CheckpointBeginResponse], error) {
	r := req.Msg
	local, err := s.localRank(r.GetLocalRank())
	if err != nil {
		return nil, err
	}
	if r.GetSize() <= 0 || r.GetStep() < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("step %d and size %d must not be negative, and size not zero", r.GetStep(), r.GetSize()))
	}
	a, tok, _, err := s.sv.arenas.begin(local, r.GetStep(), r.GetSize())
	if err != nil {
		return nil, arenaError(err)
	}
	s.sv.saveBegun(local)
	return connect.NewResponse(&roverv1.CheckpointBeginResponse{Path: a.Path(), Offset: tok.Offset(), Capacity: tok.Size()}), nil
}

func (s *LocalAPI) CheckpointCommit(ctx context.Context, req *connect.Request[roverv1.CheckpointCommitRequest]) (*connect.Response[roverv1.CheckpointCommitResponse], error) {
	r := req.Msg
	local, err := s.localRank(r.GetLocalRank())
	if err != nil {
		return nil, err
	}
	storage := s.sv.Storage()
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
	if err := s.sv.arenas.commit(local, r.GetStep(), r.GetLength()); err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	s.sv.saveCommitted(local, r.GetLength())
	s.sv.backupSaved(local, r.GetStep())
	if !ranked || storage.URL == "" {
		return connect.NewResponse(&roverv1.CheckpointCommitResponse{}), nil
	}
	// The world that saved the step: the round of the workers running now.
	round := s.sv.cfg.Round()
	job := persistJob{local: local, step: r.GetStep(), rank: int(r.GetRank()), mode: r.GetMode(), round: round}
	s.sv.persister.remember(job)
	if r.GetPersist() {
		// Pin now, before the worker's next saves can reuse the slot; when a
		// persistence of the rank is still running, the job waits unpinned
		// and is pinned (if still in memory) when its turn comes.
		_, job.pinned = s.sv.arenas.pin(local, job.step)
		s.sv.persister.enqueue(job)
	}
	return connect.NewResponse(&roverv1.CheckpointCommitResponse{}), nil
}

func (s *LocalAPI) CheckpointSnapshots(ctx context.Context, req *connect.Request[roverv1.CheckpointSnapshotsRequest]) (*connect.Response[roverv1.CheckpointSnapshotsResponse], error) {
	local, err := s.localRank(req.Msg.GetLocalRank())
	if err != nil {
		return nil, err
	}
	resp := &roverv1.CheckpointSnapshotsResponse{Snapshots: s.sv.arenas.snapshots(local)}
	resp.AgreedStep = s.sv.cfg.AgreedStep()
	return connect.NewResponse(resp), nil
}

func (s *LocalAPI) CheckpointWait(ctx context.Context, req *connect.Request[roverv1.CheckpointWaitRequest]) (*connect.Response[roverv1.CheckpointWaitResponse], error) {
	local, err := s.localRank(req.Msg.GetLocalRank())
	if err != nil {
		return nil, err
	}
	w := s.sv.persister.wait(local)
	return connect.NewResponse(&roverv1.CheckpointWaitResponse{DurableStep: w.durable, Error: w.err,
		CommittedStep: w.committed, Requested: w.requested, LastFailure: w.failure}), nil
}

func (s *LocalAPI) CheckpointRestore(ctx context.Context, req *connect.Request[roverv1.CheckpointRestoreRequest]) (*connect.Response[roverv1.CheckpointRestoreResponse], error) {
	r := req.Msg
	local, err := s.localRank(r.GetLocalRank())
	if err != nil {
		return nil, err
	}
	if r.GetRank() < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("restore needs a rank >= 0"))
	}
	url := s.sv.Storage().URL
	if url == "" {
		return connect.NewResponse(&roverv1.CheckpointRestoreResponse{}), nil // nothing was ever persisted
	}
	snap, err := s.sv.persister.restore(ctx, local, int(r.GetRank()))
	if errors.Is(err, ckpt.ErrNoCheckpoint) {
		return connect.NewResponse(&roverv1.CheckpointRestoreResponse{}), nil
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("restore from %s: %w", url, err))
	}
	return connect.NewResponse(&roverv1.CheckpointRestoreResponse{Found: true, Snapshot: snap}), nil
}

func (s *LocalAPI) CheckpointReserve(ctx context.Context, req *connect.Request[roverv1.CheckpointReserveRequest]) (*connect.Response[roverv1.CheckpointReserveResponse], error) {
	local, err := s.localRank(req.Msg.GetLocalRank())
	if err != nil {
		return nil, err
	}
	if req.Msg.GetSize() <= 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("size %d must be positive", req.Msg.GetSize()))
	}
	a, err := s.sv.arenas.reserve(local, req.Msg.GetSize())
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

// CheckpointStorage declares the storage a worker's checkpointer names
// (Checkpointer(dir, keep)) and answers the job's. The job's storage is the
// master's to keep (internal/master/jobstate/declare.go): a launcher's
// --checkpoint-dir, else the first declaration of the job's script. The
// agent answers from what it knows when the request agrees with it, and
// otherwise forwards it to the master, whose answer (or refusal, saying
// what the job has and what was asked) it passes on and remembers.
func (s *LocalAPI) CheckpointStorage(ctx context.Context, req *connect.Request[roverv1.CheckpointStorageRequest]) (*connect.Response[roverv1.CheckpointStorageResponse], error) {
	r := req.Msg
	var keep *int
	if r.Keep != nil {
		k := int(r.GetKeep())
		if k < 0 {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("keep %d: must be 0 (all) or more", k))
		}
		keep = &k
	}
	if url := r.GetUrl(); url != "" {
		if err := ckpt.CheckLocation(url, ckpt.FromAgent); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
	}
	job := s.sv.Storage()
	if !settled(job, r.GetUrl(), keep) {
		var err error
		if job, err = s.sv.declareStorage(ctx, r.GetUrl(), keep); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(&roverv1.CheckpointStorageResponse{Url: job.URL, Keep: int32(job.Keep)}), nil
}

// settled reports whether a declaration of url and keep changes nothing
// the agent knows of the job's storage, so that it needs no master.
func settled(job jobconfig.CheckpointStorage, url string, keep *int) bool {
	switch {
	case url != "" && (job.URL == "" || !ckpt.SameLocation(job.URL, url)):
		return false
	case keep != nil && job.URL != "" && (job.KeepDefault || job.Keep != *keep):
		return false
	}
	return true
}

// declareStorage forwards a declaration to the master and records the
// job's storage it answers.
func (s *Saver) declareStorage(ctx context.Context, url string, keep *int) (jobconfig.CheckpointStorage, error) {
	req := &roverv1.DeclareCheckpointRequest{NodeId: s.cfg.NodeID, Url: url}
	if keep != nil {
		k := int32(*keep)
		req.Keep = &k
	}
	var resp *connect.Response[roverv1.DeclareCheckpointResponse]
	err := s.cfg.Retry(ctx, func(ctx context.Context) error {
		var err error
		resp, err = s.cfg.Master.DeclareCheckpoint(ctx, connect.NewRequest(req))
		return err
	})
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() != connect.CodeUnavailable {
			return jobconfig.CheckpointStorage{}, connect.NewError(ce.Code(), errors.New(ce.Message()))
		}
		return jobconfig.CheckpointStorage{}, connect.NewError(connect.CodeUnavailable,
			fmt.Errorf("declare the checkpoint storage %q to the master at %s: %w", url, s.cfg.MasterAddr, err))
	}
	job := configwire.StorageFromProto(resp.Msg.GetCheckpoint())
	s.storage.Store(&job)
	if url != "" {
		s.cfg.Log.Info("the job's checkpoint storage", "url", job.URL, "keep", job.Keep)
	}
	return job, nil
}
