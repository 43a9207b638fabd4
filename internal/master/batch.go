package master

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/shard"
)

// MaxBatchOps is the most ops one BatchShards call may carry: the limit its
// clients batch to (package client).
const MaxBatchOps = client.MaxBatchOps

// eventShardBatch applies the lease and complete events of one BatchShards
// call, in order, as one journal record.
const eventShardBatch eventType = "shard_batch"

// batchOp is one shard event of a batch; it takes the batch's time.
type batchOp struct {
	Type  eventType   `json:"type"`
	Shard *shardEvent `json:"shard"`
}

// batchOutcome is each op's outcome and error of the last batch applied.
type batchOutcome struct {
	outs []shardOutcome
	errs []error
}

// shardBatch journals ops as one record and applies them in order under one
// lock. It returns each op's outcome and error; err is set, and nothing is
// applied, when the batch cannot be journaled.
func (c *core) shardBatch(ctx context.Context, now time.Time, ops []batchOp) (outs []shardOutcome, errs []error, err error) {
	e := &event{Type: eventShardBatch, Time: now, Batch: ops}
	err = c.propose(ctx, e, func(error) {
		outs, errs = c.batchOut.outs, c.batchOut.errs
		c.batchOut = batchOutcome{}
	})
	if outs == nil {
		return nil, nil, err
	}
	return outs, errs, nil
}

// applyBatchLocked applies the ops of a batch event in order. The shuffled
// samples a batch hands out are bounded as one call's are
// (shard.MaxLeaseSamples): once its leases carry that many, its later
// lease ops are answered Wait, unapplied, and lease again. Without the
// bound, one batch of MaxBatchOps leases of the largest shuffled shards
// would make the master compute and send 2^29 sample indices.
func (c *core) applyBatchLocked(e *event) ([]shardOutcome, []error) {
	outs := make([]shardOutcome, len(e.Batch))
	errs := make([]error, len(e.Batch))
	var samples int
	for i, op := range e.Batch {
		if (op.Type != eventLease && op.Type != eventCompleteShards) || op.Shard == nil {
			errs[i] = fmt.Errorf("%w: a batch holds lease and complete events, not %q", errInvalid, op.Type)
			continue
		}
		if op.Type == eventLease && samples >= shard.MaxLeaseSamples {
			outs[i] = shardOutcome{lease: shard.LeaseResult{Wait: true}}
			continue
		}
		_, errs[i] = c.transitionShardsLocked(&event{Type: op.Type, Time: e.Time, Shard: op.Shard})
		outs[i] = c.shardOut
		for _, l := range c.shardOut.lease.Shards {
			samples += len(l.Shard.Samples)
		}
	}
	return outs, errs
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

func batchOpFromProto(op *roverv1.ShardOp) (batchOp, error) {
	switch {
	case op.GetLease() != nil:
		sh, err := leaseEvent(op.GetLease())
		return batchOp{Type: eventLease, Shard: sh}, err
	case op.GetComplete() != nil:
		sh, err := completeEvent(op.GetComplete())
		return batchOp{Type: eventCompleteShards, Shard: sh}, err
	}
	return batchOp{}, invalid("the op is neither a lease nor a complete")
}

func leaseEvent(r *roverv1.LeaseShardsRequest) (*shardEvent, error) {
	if err := validateLease(r); err != nil {
		return nil, err
	}
	return &shardEvent{Dataset: r.GetDataset(), Worker: r.GetWorker(), Incarnation: r.GetIncarnation(), Request: r.GetRequestId(), Max: int(r.GetMax())}, nil
}

func completeEvent(r *roverv1.CompleteShardsRequest) (*shardEvent, error) {
	if err := validateComplete(r); err != nil {
		return nil, err
	}
	results := make([]shardResult, len(r.GetResults()))
	for i, x := range r.GetResults() {
		results[i] = shardResult{ID: x.GetLeaseId(), OK: x.GetOk()}
	}
	return &shardEvent{Dataset: r.GetDataset(), Worker: r.GetWorker(), Incarnation: r.GetIncarnation(), Results: results}, nil
}

func leaseResponse(out shardOutcome) *roverv1.LeaseShardsResponse {
	return &roverv1.LeaseShardsResponse{Shards: shardsToProto(out.lease.Shards), Wait: out.lease.Wait, End: out.lease.End}
}

func completeResponse(out shardOutcome) *roverv1.CompleteShardsResponse {
	return &roverv1.CompleteShardsResponse{Unknown: out.unknown}
}

func opResult(t eventType, out shardOutcome) *roverv1.ShardOpResult {
	if t == eventLease {
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
