package jobstate

import "errors"

// ErrLimit is returned when an event would take the job past one of the
// limits on its state.
var ErrLimit = errors.New("over the master's limit")

// ErrInvalid marks an event that is not well formed.
var ErrInvalid = errors.New("invalid request")
