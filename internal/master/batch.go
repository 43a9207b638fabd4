package master

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/master/jobstate"
)

// MaxBatchOps is the most ops one BatchShards call may carry: the limit its
// clients batch to (package client).
const MaxBatchOps = client.MaxBatchOps

// batchOutcome is each op's outcome and error of the last batch applied.
type batchOutcome struct {
	outs []jobstate.ShardOutcome
	errs []error
}

// shardBatch journals ops as one record and applies them in order under one
// lock. It returns each op's outcome and error; err is set, and nothing is
// applied, when the batch cannot be journaled.
func (c *core) shardBatch(ctx context.Context, now time.Time, ops []jobstate.BatchOp) (outs []jobstate.ShardOutcome, errs []error, err error) {
	e := &jobstate.Event{Type: jobstate.EventShardBatch, Time: now, Batch: ops}
	err = c.propose(ctx, e, func(error) {
		outs, errs = c.batchOut.outs, c.batchOut.errs
		c.batchOut = batchOutcome{}
	})
	if outs == nil {
		return nil, nil, err
	}
	return outs, errs, nil
}

// faults joins the errors that are not expected rejections of a request: a
// replayed batch fails only for those, as a replayed single event does.
func faults(errs []error) error {
	var out []error
	for _, err := range errs {
		if err != nil && !isRequestError(err) {
			out = append(out, err)
		}
	}
	return errors.Join(out...)
}

func batchOpFromProto(op *roverv1.ShardOp) (jobstate.BatchOp, error) {
	switch {
	case op.GetLease() != nil:
		sh, err := leaseEvent(op.GetLease())
		return jobstate.BatchOp{Type: jobstate.BatchLease, Shard: sh}, err
	case op.GetComplete() != nil:
		sh, err := completeEvent(op.GetComplete())
		return jobstate.BatchOp{Type: jobstate.BatchComplete, Shard: sh}, err
	}
	return jobstate.BatchOp{}, invalid("the op is neither a lease nor a complete")
}

func leaseEvent(r *roverv1.LeaseShardsRequest) (*jobstate.ShardEvent, error) {
	if err := validateLease(r); err != nil {
		return nil, err
	}
	return &jobstate.ShardEvent{Dataset: r.GetDataset(), Worker: r.GetWorker(), Incarnation: r.GetIncarnation(), Request: r.GetRequestId(), Max: int(r.GetMax())}, nil
}

func completeEvent(r *roverv1.CompleteShardsRequest) (*jobstate.ShardEvent, error) {
	if err := validateComplete(r); err != nil {
		return nil, err
	}
	results := make([]jobstate.ShardResult, len(r.GetResults()))
	for i, x := range r.GetResults() {
		results[i] = jobstate.ShardResult{ID: x.GetLeaseId(), OK: x.GetOk()}
	}
	return &jobstate.ShardEvent{Dataset: r.GetDataset(), Worker: r.GetWorker(), Incarnation: r.GetIncarnation(), Results: results}, nil
}

func leaseResponse(out jobstate.ShardOutcome) *roverv1.LeaseShardsResponse {
	return &roverv1.LeaseShardsResponse{Shards: shardsToProto(out.Lease.Shards), Wait: out.Lease.Wait, End: out.Lease.End}
}

func completeResponse(out jobstate.ShardOutcome) *roverv1.CompleteShardsResponse {
	return &roverv1.CompleteShardsResponse{Unknown: out.Unknown}
}

func opResult(t jobstate.BatchKind, out jobstate.ShardOutcome) *roverv1.ShardOpResult {
	if t == jobstate.BatchLease {
		return &roverv1.ShardOpResult{Result: &roverv1.ShardOpResult_Lease{Lease: leaseResponse(out)}}
	}
	return &roverv1.ShardOpResult{Result: &roverv1.ShardOpResult_Complete{Complete: completeResponse(out)}}
}

// opError maps an op's error through the same table as a call's.
func opError(err error) *roverv1.ShardOpResult {
	var ce *connect.Error
	errors.As(rpcError(err), &ce)
	return &roverv1.ShardOpResult{Result: &roverv1.ShardOpResult_Error{Error: &roverv1.ShardOpError{Code: uint32(ce.Code()), Message: ce.Message()}}}
}
