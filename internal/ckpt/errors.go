package ckpt

import (
	"errors"
	"fmt"
)

// Errors callers branch on. Every returned error wraps one of these (check
// with errors.Is) or an os/syscall error; the wrapping message says what
// exactly was wrong and, where there is one, what to do about it.
var (
	// ErrShmTooSmall: the arena's file system (normally /dev/shm) has less
	// free space than the arena needs. The message says how much was needed
	// and how much is free. Mount a larger /dev/shm.
	ErrShmTooSmall = errors.New("shared memory too small for the checkpoint arena")
	// ErrBadArena: a file opened as an arena is not one (wrong magic, version
	// or size) or its header is inconsistent. Remove it and create it again.
	ErrBadArena = errors.New("not a valid checkpoint arena")
	// ErrSlotTooSmall: a snapshot is larger than the arena's slot. Call
	// [Arena.Resize] with at least the snapshot's size, then save again.
	ErrSlotTooSmall = errors.New("snapshot larger than the arena slot")
	// ErrStaleToken: [Arena.Commit] got a token whose write was superseded by
	// a later [Arena.BeginWrite] or a [Arena.Resize]. Start the save again.
	ErrStaleToken = errors.New("stale arena write token")
	// ErrOverwritten: a snapshot read from the arena was overwritten by a
	// later save while it was being read; what was read must be discarded.
	// Read [Arena.Latest] again.
	ErrOverwritten = errors.New("arena snapshot overwritten while being read")
	// ErrClosed: the arena was closed.
	ErrClosed = errors.New("arena closed")
	// ErrCorrupt: bytes that should hold a checkpoint (a safetensors file, a
	// manifest, an arena slot) fail validation or their checksum. They must
	// not be loaded; fall back to another copy.
	ErrCorrupt = errors.New("corrupt checkpoint data")
	// ErrInvalidInput: a caller passed an argument out of range (an unknown
	// dtype, a shape that does not match the data, a negative step...).
	// Retrying the same call cannot succeed.
	ErrInvalidInput = errors.New("invalid checkpoint input")
	// ErrStorage: reading or writing the checkpoint storage failed. The
	// message names the URL, the object and the cause. Transient causes
	// (network, throttling) may go away on retry.
	ErrStorage = errors.New("checkpoint storage failure")
	// ErrNoCheckpoint: the storage holds no committed checkpoint that
	// validates. Training starts from scratch (or from the arena).
	ErrNoCheckpoint = errors.New("no valid checkpoint")
	// ErrNotReady: a step's manifest was requested before every rank that it
	// needs was durable ([Commit.Ready] is false).
	ErrNotReady = errors.New("checkpoint step not ready")
)

// invalidf returns an error wrapping ErrInvalidInput.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidInput, fmt.Sprintf(format, args...))
}

// corruptf returns an error wrapping ErrCorrupt.
func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// storageError is a failed storage operation: which URL and object, and why.
type storageError struct {
	op, url, key string
	err          error
}

func (e *storageError) Error() string {
	if e.key == "" {
		return fmt.Sprintf("checkpoint storage %s: %s: %v", e.url, e.op, e.err)
	}
	return fmt.Sprintf("checkpoint storage %s: %s %q: %v", e.url, e.op, e.key, e.err)
}

// Unwrap returns both ErrStorage and the cause, so that errors.Is matches
// ErrStorage as well as, say, context.Canceled.
func (e *storageError) Unwrap() []error { return []error{ErrStorage, e.err} }
