package diagnosis

import (
	"fmt"
	"strings"
	"syscall"
)

// Memory policy for RelaunchWithMoreMemory, after DLRover's.
const (
	// MaxMemoryStep is the most one relaunch adds: 8 GiB.
	MaxMemoryStep int64 = 8 << 30
	// MaxMemory is the most a relaunched node is given: 64 GiB.
	MaxMemory int64 = 64 << 30
)

// Caps is what the platform can do, as the caller knows it.
type Caps struct {
	// Relaunch says the platform can replace a node with a new one of the
	// same rank (Kubernetes can; the local platform cannot).
	Relaunch bool
	// MoreMemory says the platform has the resources to relaunch a node
	// with more memory. It counts only together with Relaunch.
	MoreMemory bool
	// Memory is the failed node's memory limit in bytes; 0 if unknown.
	Memory int64
	// NoRestartsLeft says the job's restart budget (MaxRestarts, from
	// --max-restarts) is spent: a failure that would restart the workers
	// in place fails the job instead, and the Reason says so.
	NoRestartsLeft bool
	MaxRestarts    int
}

// Decision is what to do about a failed round.
type Decision struct {
	// Cause and Action are the verdict. Action is FailFast exactly when
	// FailFast is set.
	Cause  Cause
	Action Action
	// Rule is the ID of the rule in [Rules] that matched.
	Rule string
	// MarkHostBad asks the platform not to schedule on the root failure's
	// host again.
	MarkHostBad bool
	// Memory is the new memory limit in bytes for RelaunchWithMoreMemory,
	// else 0.
	Memory int64
	// FailFast says the job should fail now: the same exception at the
	// same place as in the previous failed round.
	FailFast bool
	// RestartsSpent says Action would restart the workers in place but
	// the job's restart budget is spent, so the job fails instead (after
	// the rendezvous's blame window: a node loss may still take the
	// blame and be relaunched).
	RestartsSpent bool
	// Reason is one or two sentences for the job log and the failure
	// report.
	Reason string
	// Root is the failure the decision is about; its Traceback belongs in
	// the job's failure report.
	Root Failure
	// Signature is the root's signature where the rule is Repeatable, else
	// zero.
	Signature Signature
}

// ActionName is what the job does about the failure, for reports: the
// action's name, or "fail-restarts-spent" when the workers would restart
// in place but the restart budget is spent.
func (d Decision) ActionName() string {
	if d.RestartsSpent {
		return "fail-restarts-spent"
	}
	return d.Action.String()
}

// NextMemory returns the memory for a relaunch after an out-of-memory
// failure with old bytes: twice old, but at most old+8 GiB and at most
// 64 GiB. ok is false when old is unknown (<= 0) or already 64 GiB or more.
func NextMemory(old int64) (next int64, ok bool) {
	if old <= 0 || old >= MaxMemory {
		return 0, false
	}
	return min(old+min(old, MaxMemoryStep), MaxMemory), true
}

// DecideRound decides about a failed round: it picks the root cause of fs
// with [RootCause] and decides about it with [Decide]. With no failures it
// decides about a zero Failure (unknown, restart in place).
func DecideRound(h History, fs []Failure, caps Caps) Decision {
	root, _ := RootCause(fs)
	return Decide(h, root, caps)
}

// Decide decides about f, the root failure of its round, given the
// decisions of earlier failed rounds in h and what the platform can do.
// The rule that matches f (see [Match]) gives cause and action, then:
//
//   - a Repeatable rule whose signature equals that of the last failed
//     round before f.Round fails fast;
//   - RelaunchWithMoreMemory without caps.MoreMemory, with an unknown
//     caps.Memory or with memory at the cap becomes RestartInPlace;
//   - RelaunchNode without caps.Relaunch becomes RestartInPlace (the host
//     is still marked bad where the rule says so).
//
// The Reason says which of these happened.
func Decide(h History, f Failure, caps Caps) Decision {
	r := Match(f)
	d := Decision{Cause: r.Cause, Action: r.Action, Rule: r.ID, MarkHostBad: r.MarkHostBad, Root: f}
	var sig Signature
	if r.Repeatable {
		sig = f.Signature()
		if sig.IsZero() {
			sig = Signature{}
		}
	}
	d.Signature = sig

	var why string
	if prev, ok := h.before(f.Round); ok && !sig.IsZero() && prev.Signature == sig {
		d.Action, d.FailFast = FailFast, true
		why = fmt.Sprintf("it raised the same %s at %s in round %d too, so it is deterministic: failing the job instead of using the remaining restarts",
			sig.Type, sig.Place, prev.Round)
	} else {
		switch r.Action {
		case RelaunchWithMoreMemory:
			next, grow := NextMemory(caps.Memory)
			switch {
			case !caps.MoreMemory || !caps.Relaunch:
				d.Action, why = RestartInPlace, "the platform has no resources for more memory, so the workers restart in place with the same memory"
			case !grow && caps.Memory <= 0:
				d.Action, why = RestartInPlace, "the node's memory is unknown, so the workers restart in place with the same memory"
			case !grow:
				d.Action, why = RestartInPlace, fmt.Sprintf("the node already has %s, the most a relaunch gives, so the workers restart in place", gib(caps.Memory))
			default:
				d.Memory = next
				why = fmt.Sprintf("relaunching the node with %s of memory instead of %s", gib(next), gib(caps.Memory))
			}
		case RelaunchNode:
			if caps.Relaunch {
				why = "relaunching the node"
			} else {
				d.Action, why = RestartInPlace, "the platform cannot replace nodes, so the workers restart in place"
			}
			if r.MarkHostBad {
				why += " and marking the host bad"
			}
		case Regroup:
			why = "forming the world again without peer restore, not counted against --max-restarts"
		case FailFast:
			d.FailFast = true
			why = "starting the workers again would fail the same way, so the job fails now instead of restarting them"
		default:
			why = "restarting the workers in place"
		}
		if d.Action == RestartInPlace && caps.NoRestartsLeft {
			d.RestartsSpent = true
			why = fmt.Sprintf("the restart budget (--max-restarts=%d) is spent, so the job fails instead of restarting the workers", caps.MaxRestarts)
		}
	}
	d.Reason = fmt.Sprintf("%s: %s (rule %s); %s.", describe(f), r.Cause, r.ID, why)
	return d
}

// describe says who failed and how, such as "rank 3 (node 1, host a)
// exited with status 1 raising ValueError at train.py:42".
func describe(f Failure) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d (node %d", f.Rank, f.NodeRank)
	if f.Host != "" {
		fmt.Fprintf(&b, ", host %s", f.Host)
	}
	b.WriteString(")")
	switch s := f.signal(); {
	case f.Signal > 0 || f.ExitCode < -1:
		fmt.Fprintf(&b, " was killed by signal %d (%s)", int(s), signalName(s))
	default:
		fmt.Fprintf(&b, " exited with status %d", f.ExitCode)
	}
	if f.PlatformReason != "" {
		fmt.Fprintf(&b, ", platform reason %s", f.PlatformReason)
	}
	if f.ExceptionType != "" {
		fmt.Fprintf(&b, " raising %s", f.ExceptionType)
		if f.Place != "" {
			fmt.Fprintf(&b, " at %s", f.Place)
		}
	}
	return b.String()
}

// signalName returns "SIGKILL" for the signals the rules name, else
// "signal N".
func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGBUS:
		return "SIGBUS"
	case syscall.SIGABRT:
		return "SIGABRT"
	}
	return fmt.Sprintf("signal %d", int(s))
}

// gib formats bytes as GiB, such as "16 GiB" or "1.5 GiB".
func gib(n int64) string {
	if n%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", n>>30)
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}
