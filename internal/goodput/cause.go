package goodput

import "fmt"

// Cause is what a stretch of badput was spent on.
type Cause int

// Causes of badput. Each instant of the job's wall time that is not goodput
// is attributed to exactly one of them.
const (
	// Startup: from the job's launch to its first completed step (the
	// first round's rendezvous, worker start, restore and first step).
	Startup Cause = iota
	// FailureDetection: from a worker's death to the master's knowing.
	FailureDetection
	// Stopping: from a failure (or a decision to stop the round) until the
	// round's workers are all stopped; after success, until the job ends.
	Stopping
	// Rendezvous: from the old round's workers stopped to the new round
	// formed, except while too few nodes were there (WaitingForNodes).
	Rendezvous
	// WaitingForNodes: an open round had too few nodes for a world.
	WaitingForNodes
	// WorkerStart: from a round formed to its workers' restore (process
	// start, imports, process group), and the first step after a restore.
	WorkerStart
	// Restoring: the workers loading their checkpoint.
	Restoring
	// LostProgress: steps that were computed and then rolled back, and the
	// part of a step that a failure interrupted.
	LostProgress
	// Checkpoint: training blocked by checkpoint saves.
	Checkpoint
	// NodeCheck: the pre-flight node check.
	NodeCheck
	// Hang: from a hung job's last progress to the end of the hang.
	Hang
	// NumCauses is the number of causes; not a cause.
	NumCauses
)

var causeNames = [NumCauses]string{
	"startup", "failure_detection", "stopping", "rendezvous", "waiting_for_nodes",
	"worker_start", "restore", "lost_progress", "checkpoint", "node_check", "hang",
}

func (c Cause) String() string {
	if c >= 0 && c < NumCauses {
		return causeNames[c]
	}
	return fmt.Sprintf("cause(%d)", int(c))
}

// Source is where a restart's workers resumed from.
type Source int

// Sources.
const (
	FromNothing Source = iota // no checkpoint: from the start, or unknown
	FromMemory                // the agent's in-memory (flash) checkpoint
	FromStorage               // a checkpoint on storage
	FromPeer                  // memory, fetched from a peer's replicated copy
	FromBackup                // memory, the node's shards fetched from its backup peer
)

var sourceNames = []string{"none", "memory", "storage", "peer", "backup"}

// valid reports whether s is one of the sources.
func (s Source) valid() bool { return s >= FromNothing && int(s) < len(sourceNames) }

// MarshalText is the source's name: none, memory, storage, peer or backup.
func (s Source) MarshalText() ([]byte, error) {
	if s < 0 || int(s) >= len(sourceNames) {
		return nil, fmt.Errorf("goodput: no source %d", int(s))
	}
	return []byte(sourceNames[s]), nil
}

// UnmarshalText reads a name MarshalText wrote.
func (s *Source) UnmarshalText(b []byte) error {
	for i, n := range sourceNames {
		if n == string(b) {
			*s = Source(i)
			return nil
		}
	}
	return fmt.Errorf("goodput: unknown source %q", b)
}

func (s Source) String() string {
	if s >= 0 && int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return fmt.Sprintf("source(%d)", int(s))
}

// StopReason is why the master stopped a round.
type StopReason int

// Stop reasons.
const (
	StopFailure    StopReason = iota // a worker failed (or hung, under restart policy)
	StopMembership                   // nodes were lost or added
	StopSuccess                      // every member succeeded
)

func (r StopReason) String() string {
	switch r {
	case StopFailure:
		return "failure"
	case StopMembership:
		return "membership"
	case StopSuccess:
		return "success"
	}
	return fmt.Sprintf("stop(%d)", int(r))
}

// phase is where the job stands. Within a restart the phases run in order
// detect, stop, rendezvous, spawn, init, restore, firstStep, training; an
// event of an earlier phase than the current one is late and changes none.
type phase int

const (
	idle phase = iota // not launched
	startup
	detect
	stop
	rendezvous
	spawn
	initing
	restoring
	firstStep
	training
	ended
	numPhases
)

var phaseNames = [numPhases]string{
	"idle", "startup", "detect", "stop", "rendezvous", "spawn", "init", "restore", "first_step", "training", "ended",
}

func (p phase) String() string {
	if p >= 0 && p < numPhases {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// cause is the badput cause of time in p with no overlay in force;
// training time is pending goodput, not badput (ok false).
func (p phase) cause() (c Cause, ok bool) {
	switch p {
	case startup:
		return Startup, true
	case detect:
		return FailureDetection, true
	case stop:
		return Stopping, true
	case rendezvous:
		return Rendezvous, true
	case spawn, initing, firstStep:
		return WorkerStart, true
	case restoring:
		return Restoring, true
	}
	return 0, false
}

// running reports whether workers of the current round are (being) started
// or training: a failure or stop in p begins a restart.
func (p phase) running() bool { return p == startup || (p >= spawn && p <= training) }
