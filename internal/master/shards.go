package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/shard"
)

// shardEvent is the part of an event that drives the shard machine.
type shardEvent struct {
	Dataset string         `json:"dataset"`
	Spec    *shard.Dataset `json:"spec,omitempty"`
	Worker  string         `json:"worker,omitempty"`
	// Incarnation is the worker's (0: the current round); Request
	// numbers a lease request (0: not deduplicated).
	Incarnation int64           `json:"incarnation,omitempty"`
	Request     uint64          `json:"request,omitempty"`
	Max         int             `json:"max,omitempty"`
	Results     []shardResult   `json:"results,omitempty"`
	Position    *shard.Position `json:"position,omitempty"`
	Restore     bool            `json:"restore,omitempty"`
	Samples     int64           `json:"samples,omitempty"`
	Seal        bool            `json:"seal,omitempty"`
	State       []byte          `json:"state,omitempty"`
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
		if n := len(c.shards.Datasets()); n >= maxDatasets && !slices.Contains(c.shards.Datasets(), s.Spec.Name) {
			return true, fmt.Errorf("%w: the job has %d datasets, the most it may have (refusing %q)", errLimit, n, s.Spec.Name)
		}
		return true, c.shards.Register(*s.Spec, e.Time)
	case eventLease:
		res, err := c.shards.Lease(s.Dataset, shard.LeaseRequest{Worker: c.shardWorker(s), Max: s.Max, ID: s.Request}, e.Time)
		if err == nil {
			c.leaseHolders[s.Worker] = struct{}{}
		}
		c.shardOut = shardOutcome{lease: res}
		return true, err
	case eventCompleteShards:
		c.shardOut = shardOutcome{}
		w := c.shardWorker(s)
		var errs []error
		for _, r := range s.Results {
			var err error
			if r.OK {
				err = c.shards.Complete(s.Dataset, r.ID, w, e.Time)
			} else {
				err = c.shards.Fail(s.Dataset, r.ID, w, e.Time)
			}
			switch {
			case errors.Is(err, shard.ErrUnknownLease), errors.Is(err, shard.ErrNotHolder):
				c.shardOut.unknown = append(c.shardOut.unknown, r.ID)
			case errors.Is(err, shard.ErrSuperseded):
				return true, err // the same for every result
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
		outs, errs := c.applyBatchLocked(e)
		c.batchOut = batchOutcome{outs: outs, errs: errs}
		return true, faults(errs)
	}
	return false, nil
}

// shardWorker is the worker of a lease or complete event. Incarnation 0
// (a caller that does not know rounds: an older agent) stands for the
// current round, which is never fenced.
func (c *core) shardWorker(s *shardEvent) shard.Worker {
	inc := s.Incarnation
	if inc == 0 {
		inc = int64(c.status.Round)
	}
	return shard.Worker{Name: s.Worker, Incarnation: inc}
}

// fenceShardsLocked fences the shard machine at a new round: every worker
// process restarts with the round as its incarnation, so the leases of
// every earlier one return to their queues, and whatever such a process
// still sends (a late request, a zombie on a node declared lost) is refused.
func (c *core) fenceShardsLocked(now time.Time) {
	c.shards.Fence(int64(c.status.Round), now)
	clear(c.leaseHolders)
}

// requeueLocked returns the leases of the workers of node to their queues:
// their processes are gone. (The round that opens when a member node is
// lost fences them.) Workers are taken in name order, so that a replay of
// the journal requeues in the same order.
func (c *core) requeueLocked(node string, now time.Time) {
	var lost []string
	for w := range c.leaseHolders {
		if strings.HasPrefix(w, node+"/") {
			lost = append(lost, w)
		}
	}
	slices.Sort(lost)
	for _, w := range lost {
		c.shards.WorkerLost(w, now)
		delete(c.leaseHolders, w)
	}
}

// shardCall journals and applies one shard event and returns its outcome.
func (c *core) shardCall(ctx context.Context, e *event) (out shardOutcome, err error) {
	err = c.propose(ctx, e, func(error) { out = c.shardOut })
	return out, err
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
	// maxStateBytes bounds a dataset state given to RestoreDataset: what
	// GetDatasetState can answer a client, which reads client.ReadMaxBytes.
	maxStateBytes = client.ReadMaxBytes
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

func checkIncarnation(inc int64) error {
	if inc < 0 || inc > 1<<31 {
		return invalid("incarnation %d is out of range (a round, or 0 for the current one)", inc)
	}
	return nil
}

func validateLease(r *roverv1.LeaseShardsRequest) error {
	errs := []error{checkDatasetName(r.GetDataset()), checkWorker(r.GetWorker()), checkIncarnation(r.GetIncarnation())}
	if r.GetMax() < 1 || r.GetMax() > maxLeasesPerCall {
		errs = append(errs, invalid("max must be 1 to %d, got %d", maxLeasesPerCall, r.GetMax()))
	}
	return errors.Join(errs...)
}

func validateComplete(r *roverv1.CompleteShardsRequest) error {
	errs := []error{checkDatasetName(r.GetDataset()), checkWorker(r.GetWorker()), checkIncarnation(r.GetIncarnation())}
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
