package nodemanager

import "errors"

// Errors callers branch on (check with errors.Is). [Manager.Err] returns the
// job's failure, whose message says which node failed, how often it was
// relaunched and why.
var (
	// ErrInvalidSpec: a Spec field is out of range ([Spec.Validate]).
	ErrInvalidSpec = errors.New("invalid node manager spec")
	// ErrTooFewNodes: a node's relaunch budget ran out and the group has
	// fewer usable nodes than its minimum.
	ErrTooFewNodes = errors.New("too few nodes")
	// ErrCriticalNode: a critical node's relaunch budget ran out.
	ErrCriticalNode = errors.New("critical node failed")
	// ErrPendingTimeout: nodes stayed pending past the pending timeout and
	// the pending strategy says the job cannot go on without them.
	ErrPendingTimeout = errors.New("nodes pending too long")
	// ErrBadScale: [Manager.Scale] was asked for an unknown group or a
	// count outside the group's MinNodes..MaxNodes.
	ErrBadScale = errors.New("cannot scale")
	// ErrJobOver: the job has failed or ended; its nodes no longer change.
	ErrJobOver = errors.New("the job is over")
	// ErrBadState: data given to [Restore] is not a valid saved state.
	ErrBadState = errors.New("invalid saved node manager state")
)

// failure is why the job failed: Error is the reason, Unwrap the sentinel.
type failure struct {
	kind   error
	reason string
}

func (f *failure) Error() string { return f.reason }
func (f *failure) Unwrap() error { return f.kind }

var failureKinds = map[string]error{
	"too_few_nodes":   ErrTooFewNodes,
	"critical_node":   ErrCriticalNode,
	"pending_timeout": ErrPendingTimeout,
}
