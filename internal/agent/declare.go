package agent

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

// CheckpointStorage declares the storage a worker's checkpointer names
// (Checkpointer(dir, keep)) and answers the job's. The job's storage is the
// master's to keep (internal/master/declare.go): a launcher's
// --checkpoint-dir, else the first declaration of the job's script. The
// agent answers from what it knows when the request agrees with it, and
// otherwise forwards it to the master, whose answer (or refusal, saying
// what the job has and what was asked) it passes on and remembers.
func (s *agentService) CheckpointStorage(ctx context.Context, req *connect.Request[roverv1.CheckpointStorageRequest]) (*connect.Response[roverv1.CheckpointStorageResponse], error) {
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
	job := s.a.checkpointStorage()
	if !settled(job, r.GetUrl(), keep) {
		var err error
		if job, err = s.a.declareStorage(ctx, r.GetUrl(), keep); err != nil {
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
func (a *agent) declareStorage(ctx context.Context, url string, keep *int) (jobconfig.CheckpointStorage, error) {
	req := &roverv1.DeclareCheckpointRequest{NodeId: a.nodeID, Url: url}
	if keep != nil {
		k := int32(*keep)
		req.Keep = &k
	}
	var resp *connect.Response[roverv1.DeclareCheckpointResponse]
	err := a.callMaster(ctx, func(ctx context.Context) error {
		var err error
		resp, err = a.client.DeclareCheckpoint(ctx, connect.NewRequest(req))
		return err
	})
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() != connect.CodeUnavailable {
			return jobconfig.CheckpointStorage{}, connect.NewError(ce.Code(), errors.New(ce.Message()))
		}
		return jobconfig.CheckpointStorage{}, connect.NewError(connect.CodeUnavailable,
			fmt.Errorf("declare the checkpoint storage %q to the master at %s: %w", url, a.addr, err))
	}
	job := configwire.StorageFromProto(resp.Msg.GetCheckpoint())
	a.storage.Store(&job)
	if url != "" {
		a.log.Info("the job's checkpoint storage", "url", job.URL, "keep", job.Keep)
	}
	return job, nil
}
