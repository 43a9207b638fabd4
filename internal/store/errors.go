package store

import "errors"

// ErrFull is returned, wrapped, by the Append of a store whose journal holds
// a bounded number of bytes between snapshots (kubestore keeps it in one API
// object) when the records do not fit. Nothing was written: the caller
// snapshots its state, which drops the records before it, and appends again.
var ErrFull = errors.New("the journal is full until the next snapshot")
