package master

import (
	"context"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/master/jobstate"
)

func (s *service) shardEvent(t jobstate.EventType, sh *jobstate.ShardEvent) *jobstate.Event {
	return &jobstate.Event{Type: t, Time: s.clock.Now(), Shard: sh}
}

func (s *service) RegisterDataset(ctx context.Context, req *connect.Request[roverv1.RegisterDatasetRequest]) (*connect.Response[roverv1.RegisterDatasetResponse], error) {
	ds, err := datasetFromProto(req.Msg.GetDataset())
	if err != nil {
		return nil, rpcError(err)
	}
	if _, err := s.core.shardCall(ctx, s.shardEvent(jobstate.EventRegisterDataset, &jobstate.ShardEvent{Dataset: ds.Name, Spec: &ds})); err != nil {
		return nil, rpcError(err)
	}
	st, err := s.core.datasetStatus(ds.Name)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.RegisterDatasetResponse{Dataset: datasetToProto(st.Dataset)}), nil
}

func (s *service) LeaseShards(ctx context.Context, req *connect.Request[roverv1.LeaseShardsRequest]) (*connect.Response[roverv1.LeaseShardsResponse], error) {
	sh, err := leaseEvent(req.Msg)
	if err != nil {
		return nil, rpcError(err)
	}
	out, err := s.core.shardCall(ctx, s.shardEvent(jobstate.EventLease, sh))
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(leaseResponse(out)), nil
}

func (s *service) CompleteShards(ctx context.Context, req *connect.Request[roverv1.CompleteShardsRequest]) (*connect.Response[roverv1.CompleteShardsResponse], error) {
	sh, err := completeEvent(req.Msg)
	if err != nil {
		return nil, rpcError(err)
	}
	out, err := s.core.shardCall(ctx, s.shardEvent(jobstate.EventCompleteShards, sh))
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(completeResponse(out)), nil
}

// BatchShards validates each op on its own, applies the valid ones in order
// as one journal record, and answers every op in its place.
func (s *service) BatchShards(ctx context.Context, req *connect.Request[roverv1.BatchShardsRequest]) (*connect.Response[roverv1.BatchShardsResponse], error) {
	ops := req.Msg.GetOps()
	if len(ops) == 0 || len(ops) > MaxBatchOps {
		return nil, rpcError(invalid("a batch must hold 1 to %d ops, got %d: split larger batches", MaxBatchOps, len(ops)))
	}
	results := make([]*roverv1.ShardOpResult, len(ops))
	valid := make([]jobstate.BatchOp, 0, len(ops))
	at := make([]int, 0, len(ops)) // the position in ops of each valid op
	for i, op := range ops {
		b, err := batchOpFromProto(op)
		if err != nil {
			results[i] = opError(err)
			continue
		}
		valid = append(valid, b)
		at = append(at, i)
	}
	if len(valid) > 0 {
		outs, errs, err := s.core.shardBatch(ctx, s.clock.Now(), valid)
		if err != nil {
			return nil, rpcError(err)
		}
		for j, i := range at {
			if errs[j] != nil {
				results[i] = opError(errs[j])
				continue
			}
			results[i] = opResult(valid[j].Type, outs[j])
		}
	}
	return connect.NewResponse(&roverv1.BatchShardsResponse{Results: results}), nil
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
	if _, err := s.core.shardCall(ctx, s.shardEvent(jobstate.EventAdvance, &jobstate.ShardEvent{Dataset: r.GetDataset(), Position: p, Restore: r.GetRestore()})); err != nil {
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
	out, err := s.core.shardCall(ctx, s.shardEvent(jobstate.EventAppend, &jobstate.ShardEvent{Dataset: r.GetDataset(), Samples: r.GetSamples(), Seal: r.GetSeal()}))
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.AppendStreamResponse{End: out.End}), nil
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
	if _, err := s.core.shardCall(ctx, s.shardEvent(jobstate.EventRestoreDataset, &jobstate.ShardEvent{Dataset: r.GetDataset(), State: r.GetState()})); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.RestoreDatasetResponse{}), nil
}
