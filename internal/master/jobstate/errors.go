package jobstate

import "errors"

// ErrLimit is returned when an event would take the job past one of the
// limits on its state.
var ErrLimit = errors.New("over the master's limit")

// ErrInvalid marks an event that is not well formed.
var ErrInvalid = errors.New("invalid request")

// ErrStaleRound marks a report that names a round, stage or group that is
// not the job's current one.
var ErrStaleRound = errors.New("not a report of the current world")
