// Package diagnosis decides, for a failed worker group, what went wrong and
// what to do about it: a [Cause] (user error, out of memory, hardware, ...)
// and an [Action] (restart the workers in place, relaunch the node, relaunch
// it with more memory, fail the job).
//
// Every decision comes from one table, [Rules]: an ordered slice of rules,
// each a match function with a cause, an action and the sentence that
// documents it. The first rule that matches a failure decides. The table is
// rendered into docs/fault-tolerance.md by [Markdown], and a test keeps the
// two equal.
//
// The package owns the classification, the choice of a round's root cause
// ([RootCause]), the fail-fast rule for deterministic user errors (the same
// exception at the same place in two consecutive failed rounds, see
// [History]) and the memory policy for out-of-memory relaunches
// ([NextMemory]). It does not own restart or relaunch budgets, nor carrying
// out an action: the master counts restarts against --max-restarts and the
// platform relaunches nodes. It does no I/O and reads no clock.
//
// Typical use by the master, once per failed round:
//
//	fs := make([]diagnosis.Failure, 0, len(req.Failures))
//	for _, w := range req.Failures {
//		fs = append(fs, diagnosis.FromReport(report(w))) // report: the master's conversion
//	}
//	d := diagnosis.DecideRound(history, fs, diagnosis.Caps{Relaunch: true})
//	history = history.Record(round, d)
//	journal(history) // History implements json.Marshaler
//	if d.FailFast {
//		failJob(d.Reason)
//	}
package diagnosis
