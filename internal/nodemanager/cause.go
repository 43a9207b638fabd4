package nodemanager

import (
	"slices"

	"github.com/roverml/rover/internal/platform"
)

// RelaunchCause is why a node was relaunched, from a small fixed set: it
// is a metric label, so it never carries free text (the reason in words is
// in the node's Reason and the job's event log).
type RelaunchCause string

// The relaunch causes. Every relaunch has exactly one.
const (
	CauseOOM       RelaunchCause = "oom"        // killed for memory (OOMKilled), or diagnosed out of memory
	CauseEvicted   RelaunchCause = "evicted"    // evicted or preempted by the platform
	CauseDeleted   RelaunchCause = "deleted"    // deleted by the platform or a user (a deleted pod)
	CauseExited    RelaunchCause = "exited"     // the agent exited with a failure (or its create was refused)
	CauseNodeLost  RelaunchCause = "node_lost"  // the agent's heartbeat or session expired
	CauseNodeCheck RelaunchCause = "node_check" // the node check excluded it
	CauseDiagnosis RelaunchCause = "diagnosis"  // a failure diagnosis called for the node's relaunch (a hardware fault, ...)
	CauseOther     RelaunchCause = "other"      // none of the above
)

// RelaunchCauses lists every cause, in a fixed order.
func RelaunchCauses() []RelaunchCause {
	return []RelaunchCause{CauseOOM, CauseEvicted, CauseDeleted, CauseExited, CauseNodeLost, CauseNodeCheck, CauseDiagnosis, CauseOther}
}

// Known reports whether c is one of [RelaunchCauses].
func (c RelaunchCause) Known() bool { return slices.Contains(RelaunchCauses(), c) }

// eventCause is the cause of relaunching a node after the platform's event
// ev about it (an exit that failed, or its deletion).
func eventCause(ev platform.Event) RelaunchCause {
	switch ev.Reason {
	case platform.ReasonOOMKilled:
		return CauseOOM
	case "Evicted", "Preempted":
		return CauseEvicted
	}
	switch ev.Kind {
	case platform.Deleted:
		return CauseDeleted
	case platform.Exited:
		return CauseExited
	}
	return CauseOther
}

// actionCause is the cause of relaunching a node for diagnosis action a:
// a.Cause when it is known, else what a.Kind implies.
func actionCause(a Action) RelaunchCause {
	switch {
	case a.Cause.Known():
		return a.Cause
	case a.Kind == RelaunchWithMoreMemory:
		return CauseOOM
	case a.Kind == RelaunchNode:
		return CauseDiagnosis
	}
	return CauseOther
}
