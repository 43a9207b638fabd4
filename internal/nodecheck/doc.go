// Package nodecheck is the pre-flight node check's state machine: it pairs
// the nodes of a world, collects each pair's measurements, pairs the nodes
// that failed (or were slow) again with nodes that passed, and gives every
// node a verdict: passed, straggler or faulty, and whether it is excluded
// from the job.
//
// It owns the pairing rounds (called stages, so as not to be confused with
// rendezvous rounds), the verdict rules and the straggler threshold. It
// does no I/O and reads no clock: times come in with the events, and the
// measurements are what the agents reported. The master's core drives it
// and journals its inputs (internal/master); the agents run the checks
// (internal/agent); docs/design/node-check.md explains the scheme.
//
// Usage:
//
//	m := nodecheck.New(nodecheck.Config{MinNodes: 3})
//	if m.Start(round, []string{"a", "b", "c", "d"}, now) {
//		// each node runs its m.Tasks(node) and reports:
//		_ = m.Report(round, 1, group, "a", nodecheck.Result{OK: true, Elapsed: d}, now)
//	}
//	m.Tick(now) // at m.NextDeadline(): unreported nodes fail the stage
//	for _, v := range m.Status().Verdicts { ... }
package nodecheck
