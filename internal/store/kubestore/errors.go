package kubestore

import "errors"

// ErrFenced is returned, wrapped, by a store that another one (a newer
// master) has taken over since Open: it must stop writing.
var ErrFenced = errors.New("another master has taken over the state")

// errDamaged marks a state that does not hold together: a chunk missing or of
// the wrong size, a checksum mismatch, a malformed head or entry.
var errDamaged = errors.New("the master's state is damaged")
