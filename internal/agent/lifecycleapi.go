package agent

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// The local API's calls that feed the node's lifecycle events (lifecycle.go).

// ReportRestore records that a worker's checkpointer began or finished
// loading a checkpoint.
func (s *agentService) ReportRestore(ctx context.Context, req *connect.Request[roverv1.ReportRestoreRequest]) (*connect.Response[roverv1.ReportRestoreResponse], error) {
	r := req.Msg
	cur := s.l.current.Load()
	if cur == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("no worker group is running on this node"))
	}
	if err := checkRestore(r, cur.LocalWorldSize); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if r.GetFinished() {
		s.a.life.restoreFinished(int64(cur.Round), cur.LocalWorldSize, r.GetLocalRank(), r.GetStep(), r.GetSource())
	} else {
		s.a.life.restoreStarted(int64(cur.Round), cur.LocalWorldSize)
	}
	return connect.NewResponse(&roverv1.ReportRestoreResponse{}), nil
}

func checkRestore(r *roverv1.ReportRestoreRequest, localWorldSize int) error {
	var errs []error
	if lr := r.GetLocalRank(); lr < 0 || int(lr) >= localWorldSize {
		errs = append(errs, fmt.Errorf("local_rank %d is not one of this node's (0 to %d)", lr, localWorldSize-1))
	}
	if !r.GetFinished() {
		return errors.Join(errs...)
	}
	switch src := r.GetSource(); src {
	case roverv1.CheckpointSource_CHECKPOINT_SOURCE_NONE:
		if r.GetStep() != -1 {
			errs = append(errs, fmt.Errorf("source NONE (nothing loaded) needs step -1, not %d", r.GetStep()))
		}
	case roverv1.CheckpointSource_CHECKPOINT_SOURCE_MEMORY, roverv1.CheckpointSource_CHECKPOINT_SOURCE_STORAGE:
		if r.GetStep() < 0 {
			errs = append(errs, fmt.Errorf("step %d loaded from %s must not be negative", r.GetStep(), src))
		}
	default:
		errs = append(errs, fmt.Errorf("a finished restore needs its source: NONE (nothing loaded, step -1), MEMORY or STORAGE, not %s", src))
	}
	return errors.Join(errs...)
}

// CheckpointCommit commits the worker's snapshot (ckptsaver) and records
// the save for the node's CHECKPOINT_SAVED event.
func (s *agentService) CheckpointCommit(ctx context.Context, req *connect.Request[roverv1.CheckpointCommitRequest]) (*connect.Response[roverv1.CheckpointCommitResponse], error) {
	r := req.Msg
	if r.GetBlockingNanos() < 0 || r.GetNodeSavers() < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
			"blocking_nanos %d and node_savers %d must not be negative (0: not measured, every local rank)", r.GetBlockingNanos(), r.GetNodeSavers()))
	}
	resp, err := s.LocalAPI.CheckpointCommit(ctx, req)
	if err != nil {
		return nil, err
	}
	if cur := s.l.current.Load(); cur != nil {
		located := r.GetWorldSize() > 0 && s.a.ckpt.Storage().URL != ""
		savers := int(r.GetNodeSavers())
		if savers == 0 && r.GetMode() == "replicated" {
			savers = 1 // local rank 0 keeps the node's copy
		}
		s.a.life.saved(int64(cur.Round), cur.LocalWorldSize, r.GetLocalRank(), r.GetStep(), r.GetBlockingNanos(), savers, located)
	}
	return resp, nil
}
