package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/retry"
	"github.com/roverml/rover/internal/shardbatch"
)

// The shard methods of the local API forward to the master; the agent names
// the calling worker "<node_id>/<local_rank>", so that the master can return
// a worker's leases when its process or its node goes away, and passes on
// the worker's incarnation (ROVER_WORKER_INCARNATION, the round its process
// was started in), so that the master refuses a process of an earlier round.
// Leases and completions, the calls every worker makes all the time, go
// through the agent's batcher: concurrent ones reach the master together in
// one BatchShards call. The others go one by one.
//
// While the master is unreachable (restarting, or the network is down) a
// call waits and is sent again, unchanged (a lease keeps its request_id, so
// the master answers a retry of a lease it granted with the same shards), up
// to the agent's heartbeat timeout: past it the master has declared this
// node lost anyway. AppendStream and RestoreDataset are not retried: sent
// twice, they would append twice or revoke the leases taken in between.

func (s *agentService) worker(local string) (string, error) {
	n, err := strconv.Atoi(local)
	if err != nil || n < 0 || n >= s.a.cfg.NprocPerNode {
		return "", connect.NewError(connect.CodeInvalidArgument,
			errorf("worker %q is not a local rank of this node (0 to %d): pass LOCAL_RANK", local, s.a.cfg.NprocPerNode-1))
	}
	return s.a.nodeID + "/" + local, nil
}

// incarnation returns the incarnation to send for a worker's call: its own,
// or, from a client that sends none, the round of the running worker group.
func (s *agentService) incarnation(inc int64) (int64, error) {
	p := s.l.current.Load()
	switch {
	case inc < 0:
		return 0, connect.NewError(connect.CodeInvalidArgument, errorf("incarnation %d is negative: pass ROVER_WORKER_INCARNATION as the agent set it", inc))
	case p == nil:
		return inc, nil // no group started yet: the master takes 0 for its current round
	case inc == 0:
		return int64(p.Round), nil
	case inc > int64(p.Round):
		return 0, connect.NewError(connect.CodeInvalidArgument,
			errorf("incarnation %d is newer than this node's worker group (round %d): pass ROVER_WORKER_INCARNATION as the agent set it", inc, p.Round))
	}
	return inc, nil
}

// forward makes a call to the master, retrying it while the master is
// unreachable, up to the heartbeat timeout (without one: until ctx ends).
func (s *agentService) forward(ctx context.Context, method string, call func(context.Context) error) error {
	limit := s.a.cfg.MasterTimeout
	var last error
	err := retry.Do(ctx, s.a.masterPolicy(), retryable, func(ctx context.Context) error {
		last = call(ctx)
		return last
	})
	if errors.Is(err, retry.ErrLimit) {
		addr := s.a.cfg.RdzvEndpoint
		if addr == "" {
			addr = "(embedded)"
		}
		return connect.NewError(connect.CodeDeadlineExceeded,
			fmt.Errorf("%s: the master at %s has been unreachable for the agent's heartbeat timeout (%v): %w", method, addr, limit, last))
	}
	return err
}

// retryable reports whether a call to the master is worth sending again:
// the master is unreachable or restarting, and the agent is not stopping.
func retryable(err error) bool {
	return client.Retryable(err) && !errors.Is(err, shardbatch.ErrStopped)
}

// toMaster forwards a call with retries.
func toMaster[Req, Res any](ctx context.Context, s *agentService, method string, req *Req, call func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error)) (*connect.Response[Res], error) {
	var resp *connect.Response[Res]
	err := s.forward(ctx, method, func(ctx context.Context) error {
		var err error
		resp, err = call(ctx, connect.NewRequest(req))
		return err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp.Msg), nil
}

// once forwards a call that must not be sent twice.
func once[Req, Res any](ctx context.Context, req *Req, call func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error)) (*connect.Response[Res], error) {
	resp, err := call(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp.Msg), nil
}

func (s *agentService) RegisterDataset(ctx context.Context, req *connect.Request[roverv1.RegisterDatasetRequest]) (*connect.Response[roverv1.RegisterDatasetResponse], error) {
	return toMaster(ctx, s, "RegisterDataset", req.Msg, s.a.client.RegisterDataset)
}

func (s *agentService) LeaseShards(ctx context.Context, req *connect.Request[roverv1.LeaseShardsRequest]) (*connect.Response[roverv1.LeaseShardsResponse], error) {
	return batched(ctx, s, "LeaseShards", req.Msg, s.a.shards.Lease)
}

func (s *agentService) CompleteShards(ctx context.Context, req *connect.Request[roverv1.CompleteShardsRequest]) (*connect.Response[roverv1.CompleteShardsResponse], error) {
	return batched(ctx, s, "CompleteShards", req.Msg, s.a.shards.Complete)
}

// workerRequest is a worker's call that goes through the batcher: a lease
// or a completion, which name the worker and its incarnation.
type workerRequest interface {
	*roverv1.LeaseShardsRequest | *roverv1.CompleteShardsRequest
	GetWorker() string
	GetIncarnation() int64
}

// batched forwards a worker's lease or complete call through the batcher:
// it names the worker and its incarnation in the request, then sends it
// (call), retrying while the master is unreachable.
func batched[Req workerRequest, Res any](ctx context.Context, s *agentService, method string, req Req, call func(context.Context, Req) (*Res, error)) (*connect.Response[Res], error) {
	w, err := s.worker(req.GetWorker())
	if err != nil {
		return nil, err
	}
	inc, err := s.incarnation(req.GetIncarnation())
	if err != nil {
		return nil, err
	}
	nameWorker(req, w, inc)
	var resp *Res
	err = s.forward(ctx, method, func(ctx context.Context) error {
		resp, err = call(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// nameWorker sets the worker and incarnation fields of a lease or completion.
func nameWorker(req any, worker string, inc int64) {
	switch m := req.(type) {
	case *roverv1.LeaseShardsRequest:
		m.Worker, m.Incarnation = worker, inc
	case *roverv1.CompleteShardsRequest:
		m.Worker, m.Incarnation = worker, inc
	}
}

func (s *agentService) GetPosition(ctx context.Context, req *connect.Request[roverv1.GetPositionRequest]) (*connect.Response[roverv1.GetPositionResponse], error) {
	return toMaster(ctx, s, "GetPosition", req.Msg, s.a.client.GetPosition)
}

func (s *agentService) AdvancePosition(ctx context.Context, req *connect.Request[roverv1.AdvancePositionRequest]) (*connect.Response[roverv1.AdvancePositionResponse], error) {
	return toMaster(ctx, s, "AdvancePosition", req.Msg, s.a.client.AdvancePosition)
}

func (s *agentService) AppendStream(ctx context.Context, req *connect.Request[roverv1.AppendStreamRequest]) (*connect.Response[roverv1.AppendStreamResponse], error) {
	return once(ctx, req.Msg, s.a.client.AppendStream)
}

func (s *agentService) GetDatasetState(ctx context.Context, req *connect.Request[roverv1.DatasetStateRequest]) (*connect.Response[roverv1.DatasetStateResponse], error) {
	return toMaster(ctx, s, "GetDatasetState", req.Msg, s.a.client.GetDatasetState)
}

func (s *agentService) RestoreDataset(ctx context.Context, req *connect.Request[roverv1.RestoreDatasetRequest]) (*connect.Response[roverv1.RestoreDatasetResponse], error) {
	return once(ctx, req.Msg, s.a.client.RestoreDataset)
}
