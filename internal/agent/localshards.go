package agent

import (
	"context"
	"strconv"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// The shard methods of the local API forward to the master; the agent names
// the calling worker "<node_id>/<local_rank>", so that the master can return
// a worker's leases when its process or its node goes away. Leases and
// completions, the calls every worker makes all the time, go through the
// agent's batcher: concurrent ones reach the master together in one
// BatchShards call. The others go one by one.

func (s *agentService) worker(local string) (string, error) {
	n, err := strconv.Atoi(local)
	if err != nil || n < 0 || n >= s.a.cfg.NprocPerNode {
		return "", connect.NewError(connect.CodeInvalidArgument,
			errorf("worker %q is not a local rank of this node (0 to %d): pass LOCAL_RANK", local, s.a.cfg.NprocPerNode-1))
	}
	return s.a.nodeID + "/" + local, nil
}

// toMaster forwards a worker's call to the master, waiting and retrying
// while the master is unreachable, up to the heartbeat timeout (then the
// worker gets the error). Only for calls that may safely reach the master
// twice: a retry after a lost answer repeats the call.
func toMaster[Req, Res any](ctx context.Context, a *agent, req *Req, call func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error)) (*connect.Response[Res], error) {
	var resp *connect.Response[Res]
	err := a.callMaster(ctx, func(ctx context.Context) error {
		var err error
		resp, err = call(ctx, connect.NewRequest(req))
		return err
	})
	if err != nil {
		if unreachable(err) {
			return nil, connect.NewError(connect.CodeUnavailable, a.masterLost(err))
		}
		return nil, err
	}
	return connect.NewResponse(resp.Msg), nil
}

func (s *agentService) RegisterDataset(ctx context.Context, req *connect.Request[roverv1.RegisterDatasetRequest]) (*connect.Response[roverv1.RegisterDatasetResponse], error) {
	return toMaster(ctx, s.a, req.Msg, s.a.client.RegisterDataset)
}

func (s *agentService) LeaseShards(ctx context.Context, req *connect.Request[roverv1.LeaseShardsRequest]) (*connect.Response[roverv1.LeaseShardsResponse], error) {
	w, err := s.worker(req.Msg.GetWorker())
	if err != nil {
		return nil, err
	}
	req.Msg.Worker = w
	resp, err := s.a.shards.Lease(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

func (s *agentService) CompleteShards(ctx context.Context, req *connect.Request[roverv1.CompleteShardsRequest]) (*connect.Response[roverv1.CompleteShardsResponse], error) {
	w, err := s.worker(req.Msg.GetWorker())
	if err != nil {
		return nil, err
	}
	req.Msg.Worker = w
	resp, err := s.a.shards.Complete(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

func (s *agentService) GetPosition(ctx context.Context, req *connect.Request[roverv1.GetPositionRequest]) (*connect.Response[roverv1.GetPositionResponse], error) {
	return toMaster(ctx, s.a, req.Msg, s.a.client.GetPosition)
}

func (s *agentService) AdvancePosition(ctx context.Context, req *connect.Request[roverv1.AdvancePositionRequest]) (*connect.Response[roverv1.AdvancePositionResponse], error) {
	return toMaster(ctx, s.a, req.Msg, s.a.client.AdvancePosition)
}

func (s *agentService) AppendStream(ctx context.Context, req *connect.Request[roverv1.AppendStreamRequest]) (*connect.Response[roverv1.AppendStreamResponse], error) {
	// Not retried: an append whose answer was lost would be counted twice.
	resp, err := s.a.client.AppendStream(ctx, connect.NewRequest(req.Msg))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp.Msg), nil
}

func (s *agentService) GetDatasetState(ctx context.Context, req *connect.Request[roverv1.DatasetStateRequest]) (*connect.Response[roverv1.DatasetStateResponse], error) {
	return toMaster(ctx, s.a, req.Msg, s.a.client.GetDatasetState)
}

func (s *agentService) RestoreDataset(ctx context.Context, req *connect.Request[roverv1.RestoreDatasetRequest]) (*connect.Response[roverv1.RestoreDatasetResponse], error) {
	return toMaster(ctx, s.a, req.Msg, s.a.client.RestoreDataset)
}
