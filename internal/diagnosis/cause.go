package diagnosis

import "fmt"

// Cause is why a worker failed. The zero value is Unknown.
type Cause int

// Causes.
const (
	// Unknown is a failure no rule explains.
	Unknown Cause = iota
	// UserError is a fault in the training program: an uncaught exception,
	// exit status 1, an abort.
	UserError
	// OutOfMemory is host memory (the kernel or the platform killed the
	// worker, exit 247, a failed host allocation) or device memory (CUDA
	// out of memory).
	OutOfMemory
	// Hardware is a broken machine: GPU exit codes 201, 202 and 14, ECC
	// errors, NVIDIA Xid codes that mean a hardware fault.
	Hardware
	// Killed is a worker stopped by SIGKILL, SIGTERM or SIGINT with no sign
	// of memory exhaustion.
	Killed
	// Preempted is a node the platform took away (preemption, eviction).
	Preempted
	// Crash is a native crash: a segmentation fault or bus error.
	Crash
	// PeerFailure is a worker whose collective broke because another worker
	// died: a consequence, not a root cause.
	PeerFailure
	// StartFailure is a worker that could not be started: its program not
	// found or not executable, or a process the machine refused to create.
	StartFailure
	// RestoreFailure is an agent that started no workers because it could
	// not restore the round's agreed checkpoint from a peer's memory:
	// Rover's failure, not the program's.
	RestoreFailure
)

var causeNames = [...]string{
	Unknown:        "unknown",
	UserError:      "user-error",
	OutOfMemory:    "out-of-memory",
	Hardware:       "hardware",
	Killed:         "killed",
	Preempted:      "preempted",
	Crash:          "crash",
	PeerFailure:    "peer-failure",
	StartFailure:   "start-failure",
	RestoreFailure: "restore-failure",
}

// String returns a lower-case, hyphenated name such as "user-error".
func (c Cause) String() string {
	if c < 0 || int(c) >= len(causeNames) {
		return fmt.Sprintf("cause(%d)", int(c))
	}
	return causeNames[c]
}

// MarshalText encodes c as its name.
func (c Cause) MarshalText() ([]byte, error) {
	if c < 0 || int(c) >= len(causeNames) {
		return nil, fmt.Errorf("marshal cause: unknown cause %d", int(c))
	}
	return []byte(c.String()), nil
}

// UnmarshalText decodes a name written by MarshalText.
func (c *Cause) UnmarshalText(b []byte) error {
	for i, n := range causeNames {
		if n == string(b) {
			*c = Cause(i)
			return nil
		}
	}
	return fmt.Errorf("unmarshal cause: unknown cause %q", b)
}

// Action is what to do about a failure.
type Action int

// Actions. The zero value is RestartInPlace, the cheapest.
const (
	// RestartInPlace restarts the node's worker group on the same node
	// (counted against --max-restarts by the master).
	RestartInPlace Action = iota
	// RelaunchNode replaces the node with a new one of the same rank; with
	// Decision.MarkHostBad the platform should not schedule on the host
	// again.
	RelaunchNode
	// RelaunchWithMoreMemory replaces the node with one that has
	// Decision.Memory bytes of memory (see [NextMemory]).
	RelaunchWithMoreMemory
	// FailFast fails the job now, without using the remaining restarts.
	FailFast
	// Regroup forms the world again without the cause of the failure (a
	// peer restore that failed), as a membership change: it is not counted
	// against --max-restarts.
	Regroup
)

var actionNames = [...]string{
	RestartInPlace:         "restart-in-place",
	RelaunchNode:           "relaunch-node",
	RelaunchWithMoreMemory: "relaunch-with-more-memory",
	FailFast:               "fail-fast",
	Regroup:                "regroup",
}

// String returns a lower-case, hyphenated name such as "restart-in-place".
func (a Action) String() string {
	if a < 0 || int(a) >= len(actionNames) {
		return fmt.Sprintf("action(%d)", int(a))
	}
	return actionNames[a]
}

// MarshalText encodes a as its name.
func (a Action) MarshalText() ([]byte, error) {
	if a < 0 || int(a) >= len(actionNames) {
		return nil, fmt.Errorf("marshal action: unknown action %d", int(a))
	}
	return []byte(a.String()), nil
}

// UnmarshalText decodes a name written by MarshalText.
func (a *Action) UnmarshalText(b []byte) error {
	for i, n := range actionNames {
		if n == string(b) {
			*a = Action(i)
			return nil
		}
	}
	return fmt.Errorf("unmarshal action: unknown action %q", b)
}
