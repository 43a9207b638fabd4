package master

import (
	"context"
	"errors"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/shard"
)

// shardCall journals and applies one shard event and returns its outcome.
func (c *core) shardCall(ctx context.Context, e *jobstate.Event) (out jobstate.ShardOutcome, err error) {
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
	return c.st.Datasets.Machine().Status(name)
}

func (c *core) position(name string) (shard.Position, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.Datasets.Machine().Position(name)
}

func (c *core) datasetState(name string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.Datasets.Machine().DatasetState(name)
}
