package rendezvous

import "errors"

// Errors callers branch on. Every returned error wraps one of these (check
// with errors.Is); the wrapping message says what exactly was wrong.
var (
	// ErrInvalidConfig: a Config field is out of range ([Config.Validate]).
	ErrInvalidConfig = errors.New("invalid rendezvous config")
	// ErrInvalidRequest: a JoinRequest field is out of range. The agent should
	// fix its configuration; retrying the same request cannot succeed.
	ErrInvalidRequest = errors.New("invalid join request")
	// ErrRankTaken: the requested node rank is held by another live node.
	// Request -1 (any rank) or a free rank, or wait until that node is lost.
	ErrRankTaken = errors.New("node rank taken")
	// ErrJobFinished: the job has succeeded or failed; there is nothing left
	// to join. The agent should exit.
	ErrJobFinished = errors.New("job finished")
	// ErrUnknownNode: a report came from a node that never joined. The agent
	// must Join first.
	ErrUnknownNode = errors.New("unknown node")
	// ErrNotInWorld: a report for the current, closed round came from a node
	// that is not a member of its world. The agent is confused about which
	// round it runs; it should Join again.
	ErrNotInWorld = errors.New("node not in the world")
	// ErrTooFewNodes: the job failed because a round stayed below MinNodes
	// for JoinTimeout. Returned by [Machine.Err].
	ErrTooFewNodes = errors.New("too few nodes")
	// ErrRestartsExhausted: the job failed because workers failed after the
	// restart budget was used up. Returned by [Machine.Err].
	ErrRestartsExhausted = errors.New("restart budget exhausted")
	// ErrDeterministicFailure: the job failed because its workers failed
	// the same way (the same exception at the same place) on consecutive
	// attempts: restarting again would fail again. See [Machine.FailFast].
	ErrDeterministicFailure = errors.New("the same failure repeated")
	// ErrNodesFailed: the job failed because its nodes could not be kept:
	// the master's node manager found a node that cannot be relaunched
	// (its budget is used up) leaving too few, a critical node lost, or
	// nodes pending too long. See [Machine.FailNodes].
	ErrNodesFailed = errors.New("nodes could not be kept")
	// ErrCancelled: the job was stopped by its user (Ctrl-C on rover
	// submit). See [Machine.Cancel].
	ErrCancelled = errors.New("the job was stopped")
	// ErrBadState: data given to [Restore] is not a valid saved state.
	ErrBadState = errors.New("invalid saved rendezvous state")
)

// failure is why the job failed: Error is the human reason, Unwrap the
// sentinel (ErrTooFewNodes or ErrRestartsExhausted).
type failure struct {
	kind   error
	reason string
}

func (f *failure) Error() string { return f.reason }
func (f *failure) Unwrap() error { return f.kind }
