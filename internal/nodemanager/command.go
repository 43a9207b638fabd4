package nodemanager

import (
	"fmt"

	"github.com/roverml/rover/internal/platform"
)

// CommandKind is what the master must do.
type CommandKind int

// Command kinds.
const (
	CreateNode CommandKind = iota + 1 // platform.Create(ctx, Spec)
	DeleteNode                        // platform.Delete(ctx, NodeID)
	FailJob                           // stop the job: it failed for Reason ([Manager.Err] has the same)
	SucceedJob                        // end the job as succeeded: the groups that decide it (GroupSpec.DecidesJob) succeeded
)

func (k CommandKind) String() string {
	switch k {
	case CreateNode:
		return "Create"
	case DeleteNode:
		return "Delete"
	case FailJob:
		return "Fail"
	case SucceedJob:
		return "Succeed"
	}
	return fmt.Sprintf("CommandKind(%d)", int(k))
}

// Command is one thing the master must carry out, in the order given. Every
// command says why, for the job's log.
type Command struct {
	Kind   CommandKind
	Spec   platform.NodeSpec // CreateNode
	NodeID string            // DeleteNode, and CreateNode (Spec.ID)
	// Removed marks a DeleteNode of a node scaled away: a planned
	// departure, not a failure to blame.
	Removed bool
	// GivenUp marks a DeleteNode of a node given up after pending past
	// Spec.PendingTimeout (Removed is set too): the group runs without
	// it, on Nodes nodes.
	GivenUp bool
	Nodes   int
	// Cause is why a CreateNode relaunches its rank; "" for the other
	// commands, and for the creates of a start or a scale up.
	Cause  RelaunchCause
	Reason string
	// RightSized lists the requests of a CreateNode that right-sizing
	// changed from the group's (an out-of-memory raise is not one: it is
	// the relaunch's cause oom); nil for none.
	RightSized []Change
}

func (c Command) String() string {
	return fmt.Sprintf("%s %s: %s", c.Kind, c.NodeID, c.Reason)
}

// ActionKind is a diagnosis decision about one node or host.
type ActionKind int

// Action kinds.
const (
	// RelaunchNode replaces the node (same rank, next relaunch), counting
	// against its budget; for example after a failed node check.
	RelaunchNode ActionKind = iota + 1
	// RelaunchWithMoreMemory replaces the node as RelaunchNode does, and it
	// and every later relaunch of its rank ask for MemoryBytes.
	RelaunchWithMoreMemory
	// MarkHostBad records Host as bad: every later NodeSpec lists it in
	// AvoidHosts. Nodes on it are not replaced by this action alone.
	MarkHostBad
	// MigrateNode replaces a running node by one that asks for MilliCPU
	// of CPU (more than it asks for now), at the same rank: a scaling
	// move, which spends none of the rank's relaunch budget. It and every
	// later node of the rank ask for that CPU.
	MigrateNode
)

// Action is a diagnosis decision fed to [Manager.Act].
type Action struct {
	Kind        ActionKind
	NodeID      string // RelaunchNode, RelaunchWithMoreMemory, MigrateNode
	MemoryBytes int64  // RelaunchWithMoreMemory: the new memory, more than before
	MilliCPU    int64  // MigrateNode: the new CPU request, more than before
	Host        string // MarkHostBad
	Reason      string // the diagnosis, such as "OOMKilled twice" or "node check failed"
	// Cause is the relaunch's cause for the metrics; unset: CauseOOM for
	// RelaunchWithMoreMemory, CauseDiagnosis for RelaunchNode.
	Cause RelaunchCause
}
