package shard

import (
	"errors"
	"fmt"
)

// Errors callers branch on. Every returned error wraps one of these (check
// with errors.Is); the wrapping message says what exactly was wrong.
var (
	// ErrInvalidDataset: a Dataset field is out of range ([Dataset.Validate]).
	ErrInvalidDataset = errors.New("invalid dataset")
	// ErrConflict: a dataset of that name is already registered with
	// different settings (the message names the fields), or a saved dataset
	// state belongs to a dataset with a different order.
	ErrConflict = errors.New("conflicting dataset")
	// ErrUnknownDataset: no dataset of that name is registered.
	ErrUnknownDataset = errors.New("unknown dataset")
	// ErrWrongMode: the call does not apply to the dataset's mode (a lease
	// call on a Sync dataset, a position call on a Leased one, Append or
	// Seal on a dataset that is not Streaming).
	ErrWrongMode = errors.New("wrong dataset mode")
	// ErrInvalidRequest: an argument is out of range (empty worker name,
	// max < 1, negative Append, a position outside the dataset). Retrying the
	// same call cannot succeed.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrUnknownLease: the lease is not held: it expired, failed, was
	// requeued because its worker was lost, was wiped by RestoreDataset, or
	// never existed. Whatever the worker computed for it must be discarded:
	// the shard is (or was) handed to another worker, so keeping the result
	// would train those samples twice.
	ErrUnknownLease = errors.New("unknown lease")
	// ErrNotHolder: the lease is held by another worker.
	ErrNotHolder = errors.New("lease held by another worker")
	// ErrSuperseded: the request comes from an incarnation of its worker
	// older than the newest one the machine has seen for that name, or
	// below the job's fence ([Machine.Fence]). The process belongs to a
	// round that has ended and must stop: its leases were (or will be)
	// handed to others, so nothing it computes may be kept.
	ErrSuperseded = errors.New("worker superseded")
	// ErrStaleRequest: a lease request numbered below the last one its
	// client sent (see [LeaseRequest].ID): a retry or duplicate delivered
	// after a newer request was answered. Nobody waits for its answer; it
	// is refused so that it cannot take shards no one will train.
	ErrStaleRequest = errors.New("stale lease request")
	// ErrSealed: Append to a stream that is sealed (or would grow past a
	// bounded stream's Size).
	ErrSealed = errors.New("stream sealed")
	// ErrStalePosition: Advance would move a Sync dataset's position
	// backwards; only RestorePosition may rewind it.
	ErrStalePosition = errors.New("stale position")
	// ErrBadState: data given to [Restore] or [Machine.RestoreDataset] is not
	// a valid saved state.
	ErrBadState = errors.New("invalid saved shard state")
)

func errorf(kind error, format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{kind}, a...)...)
}
