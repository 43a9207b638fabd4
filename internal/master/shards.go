package master

import (
	"context"
	"errors"
	"strings"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/shard"
)

// shardEvent is the part of an event that drives the shard machine.
type shardEvent struct {
	Dataset  string          `json:"dataset"`
	Spec     *shard.Dataset  `json:"spec,omitempty"`
	Worker   string          `json:"worker,omitempty"`
	Max      int             `json:"max,omitempty"`
	Results  []shardResult   `json:"results,omitempty"`
	Position *shard.Position `json:"position,omitempty"`
	Restore  bool            `json:"restore,omitempty"`
	Samples  int64           `json:"samples,omitempty"`
	Seal     bool            `json:"seal,omitempty"`
	State    []byte          `json:"state,omitempty"`
}

type shardResult struct {
	ID uint64 `json:"id"`
	OK bool   `json:"ok"`
}

// Shard event types.
const (
	eventRegisterDataset eventType = "register_dataset"
	eventLease           eventType = "lease"
	eventCompleteShards  eventType = "complete_shards"
	eventAdvance         eventType = "advance"
	eventAppend          eventType = "append"
	eventRestoreDataset  eventType = "restore_dataset"
	eventShardTick       eventType = "shard_tick"
)

// shardOutcome carries the results of the last shard transition to the
// handler that caused it (read under the same lock).
type shardOutcome struct {
	lease   shard.LeaseResult
	unknown []uint64
	end     int64
}

// transitionShardsLocked applies a shard event; ok is false for other events.
func (c *core) transitionShardsLocked(e *event) (ok bool, err error) {
	s := e.Shard
	switch e.Type {
	case eventRegisterDataset:
		return true, c.shards.Register(*s.Spec, e.Time)
	case eventLease:
		res, err := c.shards.Lease(s.Dataset, shard.LeaseRequest{Worker: shard.Worker{Name: s.Worker}, Max: s.Max}, e.Time)
		if err == nil {
			c.leaseHolders[s.Worker] = struct{}{}
		}
		c.shardOut = shardOutcome{lease: res}
		return true, err
	case eventCompleteShards:
		c.shardOut = shardOutcome{}
		var errs []error
		for _, r := range s.Results {
			var err error
			if r.OK {
				err = c.shards.Complete(s.Dataset, r.ID, shard.Worker{Name: s.Worker}, e.Time)
			} else {
				err = c.shards.Fail(s.Dataset, r.ID, shard.Worker{Name: s.Worker}, e.Time)
			}
			switch {
			case errors.Is(err, shard.ErrUnknownLease), errors.Is(err, shard.ErrNotHolder):
				c.shardOut.unknown = append(c.shardOut.unknown, r.ID)
			case err != nil:
				errs = append(errs, err)
			}
		}
		return true, errors.Join(errs...)
	case eventAdvance:
		if s.Restore {
			return true, c.shards.RestorePosition(s.Dataset, *s.Position, e.Time)
		}
		return true, c.shards.Advance(s.Dataset, s.Position.Epoch, s.Position.Consumed, e.Time)
	case eventAppend:
		end, err := c.shards.Append(s.Dataset, s.Samples, e.Time)
		if err == nil && s.Seal {
			err = c.shards.Seal(s.Dataset, e.Time)
		}
		c.shardOut = shardOutcome{end: end}
		return true, err
	case eventRestoreDataset:
		return true, c.shards.RestoreDataset(s.Dataset, s.State, e.Time)
	case eventShardTick:
		c.shards.Tick(e.Time)
		return true, nil
	case eventShardBatch:
		_, errs := c.applyBatchLocked(e)
		return true, faults(errs)
	}
	return false, nil
}

// requeueLocked returns the leases of the workers of node (every worker when
// node is "") to their queues: their processes are gone or restarting.
func (c *core) requeueLocked(node string, now time.Time) {
	for w := range c.leaseHolders {
		if node == "" || strings.HasPrefix(w, node+"/") {
			c.shards.WorkerLost(w, now)
			delete(c.leaseHolders, w)
		}
	}
}

// shardCall journals and applies one shard event and returns its outcome.
func (c *core) shardCall(ctx context.Context, e *event) (shardOutcome, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.applyLocked(ctx, e)
	return c.shardOut, err
}

func datasetFromProto(d *roverv1.DatasetSpec) (shard.Dataset, error) {
	if d == nil {
		return shard.Dataset{}, invalid("dataset is missing")
	}
	mode := shard.Leased
	switch d.GetMode() {
	case roverv1.ShardMode_SHARD_MODE_SYNC:
		mode = shard.Sync
	case roverv1.ShardMode_SHARD_MODE_LEASED, roverv1.ShardMode_SHARD_MODE_UNSPECIFIED:
	default:
		return shard.Dataset{}, invalid("unknown shard mode %d", d.GetMode())
	}
	lt, err := millis("lease_timeout_millis", d.GetLeaseTimeoutMillis())
	if err != nil {
		return shard.Dataset{}, err
	}
	return shard.Dataset{
		Name: d.GetName(), Size: d.GetSize(), BatchSize: int(d.GetBatchSize()), ShardSize: d.GetShardSize(),
		Epochs: int(d.GetEpochs()), Shuffle: d.GetShuffle(), Seed: d.GetSeed(), Mode: mode,
		Streaming: d.GetStreaming(), LeaseTimeout: lt, MaxRetries: int(d.GetMaxRetries()),
	}, nil
}

func datasetToProto(d shard.Dataset) *roverv1.DatasetSpec {
	mode := roverv1.ShardMode_SHARD_MODE_LEASED
	if d.Mode == shard.Sync {
		mode = roverv1.ShardMode_SHARD_MODE_SYNC
	}
	return &roverv1.DatasetSpec{
		Name: d.Name, Size: d.Size, BatchSize: int32(d.BatchSize), ShardSize: d.ShardSize,
		Epochs: int32(d.Epochs), Shuffle: d.Shuffle, Seed: d.Seed, Mode: mode, Streaming: d.Streaming,
		LeaseTimeoutMillis: d.LeaseTimeout.Milliseconds(), MaxRetries: int32(d.MaxRetries),
	}
}

func shardsToProto(ls []shard.Lease) []*roverv1.Shard {
	out := make([]*roverv1.Shard, len(ls))
	for i, l := range ls {
		s := &roverv1.Shard{LeaseId: l.ID, Epoch: int32(l.Shard.Epoch), Start: l.Shard.Start, End: l.Shard.End, Indices: l.Shard.Samples}
		if !l.Deadline.IsZero() {
			s.DeadlineUnixMillis = l.Deadline.UnixMilli()
		}
		out[i] = s
	}
	return out
}

// Limits on shard requests.
const (
	maxLeasesPerCall  = 4096
	maxResultsPerCall = 65536
	maxStateBytes     = 64 << 20
)

func checkDatasetName(name string) error {
	if name == "" || len(name) > maxKeyLen {
		return invalid("dataset name must be 1 to %d bytes, got %d", maxKeyLen, len(name))
	}
	return nil
}

func checkWorker(w string) error {
	if w == "" || len(w) > maxNodeIDLen+16 {
		return invalid("worker must be 1 to %d bytes, got %d", maxNodeIDLen+16, len(w))
	}
	return nil
}

func validateLease(r *roverv1.LeaseShardsRequest) error {
	errs := []error{checkDatasetName(r.GetDataset()), checkWorker(r.GetWorker())}
	if r.GetMax() < 1 || r.GetMax() > maxLeasesPerCall {
		errs = append(errs, invalid("max must be 1 to %d, got %d", maxLeasesPerCall, r.GetMax()))
	}
	return errors.Join(errs...)
}

func validateComplete(r *roverv1.CompleteShardsRequest) error {
	errs := []error{checkDatasetName(r.GetDataset()), checkWorker(r.GetWorker())}
	if n := len(r.GetResults()); n == 0 || n > maxResultsPerCall {
		errs = append(errs, invalid("results must hold 1 to %d entries, got %d", maxResultsPerCall, n))
	}
	return errors.Join(errs...)
}

func validatePosition(p *roverv1.DataPosition) (*shard.Position, error) {
	if p == nil {
		return nil, invalid("position is missing")
	}
	if p.GetEpoch() < 0 || p.GetConsumed() < 0 {
		return nil, invalid("position %d/%d is negative", p.GetEpoch(), p.GetConsumed())
	}
	return &shard.Position{Epoch: int(p.GetEpoch()), Consumed: p.GetConsumed()}, nil
}

func (c *core) datasetStatus(name string) (shard.Status, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shards.Status(name)
}

func (c *core) position(name string) (shard.Position, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shards.Position(name)
}

func (c *core) datasetState(name string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shards.DatasetState(name)
}
