package shard

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Mode is how a dataset's samples are handed out.
type Mode int

const (
	// Leased: workers lease shards, complete or fail them, and the master
	// requeues the shards of dead or slow workers (asynchronous training,
	// preprocessing, evaluation).
	Leased Mode = iota
	// Sync: the master only tracks the job's [Position]; every rank computes
	// its own slice with [RankBatch] (DDP, FSDP).
	Sync
)

func (m Mode) String() string {
	switch m {
	case Leased:
		return "Leased"
	case Sync:
		return "Sync"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Limits on Dataset fields and names. MaxSize, MaxBatchSize and MaxWorldSize
// keep the index arithmetic in int64: a position plus a global batch
// (MaxSize + MaxWorldSize*MaxBatchSize = 2^62 + 2^51) stays below 2^63, and
// a shuffled order's Feistel domain holds at most 2^62 values.
const (
	MaxNameLen     = 253       // longest dataset or worker name, in bytes
	MaxSize        = 1 << 62   // largest Dataset.Size, shuffled or not
	MaxBatchSize   = 1 << 31   // largest Dataset.BatchSize
	MaxWorldSize   = 1 << 20   // largest worldSize for RankBatch
	MaxEpochs      = 1<<31 - 1 // largest Dataset.Epochs (the wire carries epochs as int32)
	DefaultRetries = 3         // MaxRetries when Dataset.MaxRetries is 0
	// MaxLeaseSamples is the largest ShardSize of a shuffled Leased dataset,
	// and the most samples one [Machine.Lease] call of one hands out: a
	// shuffled shard carries its samples' indices (at most 9 bytes each on
	// the wire, within a message's 8 MiB), computed under the master's lock.
	MaxLeaseSamples = 1 << 19
)

// Dataset describes one registered dataset.
type Dataset struct {
	// Name identifies the dataset (non-empty, at most MaxNameLen bytes).
	Name string
	// Size is the number of samples in an epoch, 1..MaxSize, shuffled or
	// not. A Streaming dataset may give 0 for an unbounded stream, or a
	// bound: the stream seals itself when Size samples have been appended.
	Size int64
	// BatchSize is the per-rank batch, 1..MaxBatchSize.
	BatchSize int
	// ShardSize is the samples per leased shard (DLRover: batch size times
	// minibatches per shard), >= 1 in Leased mode (at most MaxLeaseSamples
	// when shuffled); ignored in Sync mode.
	ShardSize int64
	// Epochs is the number of passes, 0..MaxEpochs, 0 for no limit (until
	// the job stops using the dataset). A Streaming dataset is one pass: 0
	// or 1.
	Epochs int
	// Shuffle makes each epoch's order a seeded permutation ([EpochOrder]).
	Shuffle bool
	// Seed seeds the permutations.
	Seed uint64
	// Mode is Leased or Sync.
	Mode Mode
	// Streaming: the samples are offsets of an append-only stream, grown
	// with [Machine.Append] and ended with [Machine.Seal]. Leased mode only,
	// no Shuffle.
	Streaming bool
	// LeaseTimeout: a lease neither completed nor renewed within this is
	// requeued and counts as a failure of its shard (>= 0; 0 never expires).
	// Leased mode only.
	LeaseTimeout time.Duration
	// MaxRetries: a shard that failed (or whose lease expired) this many
	// times is dropped and reported in [Status].Dropped. 0 means
	// DefaultRetries; negative is invalid. Leased mode only.
	MaxRetries int
}

// Validate reports every field that is out of range at once, joined into one
// error whose parts wrap [ErrInvalidDataset] and name the field.
func (d Dataset) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, errorf(ErrInvalidDataset, format, a...)) }
	if d.Name == "" || len(d.Name) > MaxNameLen {
		bad("Name is %d bytes; it must be 1..%d", len(d.Name), MaxNameLen)
	}
	switch {
	case d.Size < 0 || d.Size > MaxSize:
		bad("Size is %d; it must be 1..%d", d.Size, int64(MaxSize))
	case d.Size == 0 && !d.Streaming:
		bad("Size is 0; only a Streaming dataset may be unbounded")
	}
	if d.BatchSize < 1 || d.BatchSize > MaxBatchSize {
		bad("BatchSize is %d; it must be 1..%d", d.BatchSize, MaxBatchSize)
	}
	if d.Mode != Leased && d.Mode != Sync {
		bad("Mode is %d; use Leased or Sync", int(d.Mode))
	}
	if d.Mode == Leased && d.ShardSize < 1 {
		bad("ShardSize is %d; a Leased dataset needs at least 1 sample a shard", d.ShardSize)
	}
	if d.ShardSize < 0 {
		bad("ShardSize is %d; it must not be negative", d.ShardSize)
	}
	if d.Mode == Leased && d.Shuffle && d.ShardSize > MaxLeaseSamples {
		bad("ShardSize is %d; a shuffled shard carries its samples' indices, at most %d: use a smaller ShardSize (or lease more shards at a time)", d.ShardSize, MaxLeaseSamples)
	}
	if d.Epochs < 0 || d.Epochs > MaxEpochs {
		bad("Epochs is %d; use 0 for no limit or a count up to %d", d.Epochs, MaxEpochs)
	}
	if d.Streaming {
		if d.Mode != Leased {
			bad("Streaming needs Mode Leased")
		}
		if d.Shuffle {
			bad("Shuffle is set but a Streaming dataset cannot be shuffled")
		}
		if d.Epochs > 1 {
			bad("Epochs is %d; a Streaming dataset is one pass (0 or 1)", d.Epochs)
		}
	}
	if d.LeaseTimeout < 0 {
		bad("LeaseTimeout is %v; use 0 for leases that never expire or a positive duration", d.LeaseTimeout)
	}
	if d.MaxRetries < 0 {
		bad("MaxRetries is %d; use 0 for the default (%d) or a positive count", d.MaxRetries, DefaultRetries)
	}
	return errors.Join(errs...)
}

// normalized returns d with defaults filled in and the fields its mode
// ignores cleared, so that equivalent registrations compare equal.
func (d Dataset) normalized() Dataset {
	if d.Mode == Sync {
		d.ShardSize, d.LeaseTimeout, d.MaxRetries = 0, 0, 0
		return d
	}
	if d.MaxRetries == 0 {
		d.MaxRetries = DefaultRetries
	}
	if d.Streaming {
		d.Epochs = 1
	}
	return d
}

// field is one Dataset field for comparisons.
type field struct {
	name  string
	value func(Dataset) any
	order bool // part of the sample order: must match for RestoreDataset
}

var fields = []field{
	{"Size", func(d Dataset) any { return d.Size }, true},
	{"BatchSize", func(d Dataset) any { return d.BatchSize }, false},
	{"ShardSize", func(d Dataset) any { return d.ShardSize }, false},
	{"Epochs", func(d Dataset) any { return d.Epochs }, false},
	{"Shuffle", func(d Dataset) any { return d.Shuffle }, true},
	{"Seed", func(d Dataset) any { return d.Seed }, true},
	{"Mode", func(d Dataset) any { return d.Mode }, true},
	{"Streaming", func(d Dataset) any { return d.Streaming }, true},
	{"LeaseTimeout", func(d Dataset) any { return d.LeaseTimeout }, false},
	{"MaxRetries", func(d Dataset) any { return d.MaxRetries }, false},
}

// diff describes the fields in which two normalized datasets differ (only
// the order-defining ones when orderOnly), or returns "".
func diff(have, want Dataset, orderOnly bool) string {
	var parts []string
	for _, f := range fields {
		if orderOnly && !f.order {
			continue
		}
		if a, b := f.value(have), f.value(want); a != b {
			parts = append(parts, fmt.Sprintf("%s %v, not %v", f.name, a, b))
		}
	}
	return strings.Join(parts, "; ")
}

func validName(what, s string) error {
	if s == "" || len(s) > MaxNameLen {
		return errorf(ErrInvalidRequest, "%s name is %d bytes; it must be 1..%d", what, len(s), MaxNameLen)
	}
	return nil
}
