package master

import (
	"context"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
)

func (s *service) shardEvent(t eventType, sh *shardEvent) *event {
	return &event{Type: t, Time: s.clock.Now(), Shard: sh}
}

func (s *service) RegisterDataset(ctx context.Context, req *connect.Request[roverv1.RegisterDatasetRequest]) (*connect.Response[roverv1.RegisterDatasetResponse], error) {
	ds, err := datasetFromProto(req.Msg.GetDataset())
	if err != nil {
		return nil, rpcError(err)
	}
	if _, err := s.core.shardCall(ctx, s.shardEvent(eventRegisterDataset, &shardEvent{Dataset: ds.Name, Spec: &ds})); err != nil {
		return nil, rpcError(err)
	}
	st, err := s.core.datasetStatus(ds.Name)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.RegisterDatasetResponse{Dataset: datasetToProto(st.Dataset)}), nil
}

func (s *service) LeaseShards(ctx context.Context, req *connect.Request[roverv1.LeaseShardsRequest]) (*connect.Response[roverv1.LeaseShardsResponse], error) {
	r := req.Msg
	if err := validateLease(r); err != nil {
		return nil, rpcError(err)
	}
	out, err := s.core.shardCall(ctx, s.shardEvent(eventLease, &shardEvent{Dataset: r.GetDataset(), Worker: r.GetWorker(), Max: int(r.GetMax())}))
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.LeaseShardsResponse{Shards: shardsToProto(out.lease.Shards), Wait: out.lease.Wait, End: out.lease.End}), nil
}

func (s *service) CompleteShards(ctx context.Context, req *connect.Request[roverv1.CompleteShardsRequest]) (*connect.Response[roverv1.CompleteShardsResponse], error) {
	r := req.Msg
	if err := validateComplete(r); err != nil {
		return nil, rpcError(err)
	}
	results := make([]shardResult, len(r.GetResults()))
	for i, x := range r.GetResults() {
		results[i] = shardResult{ID: x.GetLeaseId(), OK: x.GetOk()}
	}
	out, err := s.core.shardCall(ctx, s.shardEvent(eventCompleteShards, &shardEvent{Dataset: r.GetDataset(), Worker: r.GetWorker(), Results: results}))
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.CompleteShardsResponse{Unknown: out.unknown}), nil
}

func (s *service) GetPosition(ctx context.Context, req *connect.Request[roverv1.GetPositionRequest]) (*connect.Response[roverv1.GetPositionResponse], error) {
	if err := checkDatasetName(req.Msg.GetDataset()); err != nil {
		return nil, rpcError(err)
	}
	p, err := s.core.position(req.Msg.GetDataset())
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.GetPositionResponse{Position: &roverv1.DataPosition{Epoch: int32(p.Epoch), Consumed: p.Consumed}}), nil
}

func (s *service) AdvancePosition(ctx context.Context, req *connect.Request[roverv1.AdvancePositionRequest]) (*connect.Response[roverv1.AdvancePositionResponse], error) {
	r := req.Msg
	if err := checkDatasetName(r.GetDataset()); err != nil {
		return nil, rpcError(err)
	}
	p, err := validatePosition(r.GetPosition())
	if err != nil {
		return nil, rpcError(err)
	}
	if _, err := s.core.shardCall(ctx, s.shardEvent(eventAdvance, &shardEvent{Dataset: r.GetDataset(), Position: p, Restore: r.GetRestore()})); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.AdvancePositionResponse{}), nil
}

func (s *service) AppendStream(ctx context.Context, req *connect.Request[roverv1.AppendStreamRequest]) (*connect.Response[roverv1.AppendStreamResponse], error) {
	r := req.Msg
	if err := checkDatasetName(r.GetDataset()); err != nil {
		return nil, rpcError(err)
	}
	if r.GetSamples() < 0 {
		return nil, rpcError(invalid("samples %d is negative", r.GetSamples()))
	}
	out, err := s.core.shardCall(ctx, s.shardEvent(eventAppend, &shardEvent{Dataset: r.GetDataset(), Samples: r.GetSamples(), Seal: r.GetSeal()}))
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.AppendStreamResponse{End: out.end}), nil
}

func (s *service) GetDatasetState(ctx context.Context, req *connect.Request[roverv1.DatasetStateRequest]) (*connect.Response[roverv1.DatasetStateResponse], error) {
	if err := checkDatasetName(req.Msg.GetDataset()); err != nil {
		return nil, rpcError(err)
	}
	st, err := s.core.datasetState(req.Msg.GetDataset())
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.DatasetStateResponse{State: st}), nil
}

func (s *service) RestoreDataset(ctx context.Context, req *connect.Request[roverv1.RestoreDatasetRequest]) (*connect.Response[roverv1.RestoreDatasetResponse], error) {
	r := req.Msg
	if err := checkDatasetName(r.GetDataset()); err != nil {
		return nil, rpcError(err)
	}
	if len(r.GetState()) == 0 || len(r.GetState()) > maxStateBytes {
		return nil, rpcError(invalid("state must be 1 to %d bytes, got %d", maxStateBytes, len(r.GetState())))
	}
	if _, err := s.core.shardCall(ctx, s.shardEvent(eventRestoreDataset, &shardEvent{Dataset: r.GetDataset(), State: r.GetState()})); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.RestoreDatasetResponse{}), nil
}
