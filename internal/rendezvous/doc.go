// Package rendezvous is the job master's rendezvous core: it collects the
// agents that join each round, fixes the world (which nodes train together,
// with which ranks), restarts rounds on failures and membership changes, and
// decides the job's outcome, with torchrun / DLRover semantics.
//
// It is a pure state machine in the etcd-raft style: no goroutines, no I/O,
// no clock and no randomness. Every event carries the caller's now; timers
// that expired at or before an event's now are applied before the event, and
// [Machine.NextDeadline] tells the driver when to call [Machine.Tick].
//
// The job runs a sequence of rounds 1, 2, ... Each is Open while it collects
// joins and Closed once its world is fixed. An open round closes when
// MaxNodes have joined, when at least MinNodes have joined and no join came
// for LastCall, or (restart rounds only) when at least MinNodes have joined
// and every member of the previous world that is not lost has joined again,
// or every live node the machine knows of has: a restart without a
// membership change waits for no last call. A closed round is
// replaced by the next when a member's workers fail (a failure restart,
// counted against MaxRestarts), or when membership changes: a member is lost,
// a member's agent joins again, or waiting nodes would grow the world.
//
// Node ranks are stable: a NodeID keeps its rank for the life of the job, and
// a node that replaces a lost one inherits its rank. Group ranks are
// contiguous, 0..n-1 in node-rank order.
//
//	m, err := rendezvous.New(rendezvous.Config{
//		MinNodes: 2, MaxNodes: 4, MaxRestarts: 3,
//		LastCall: 30 * time.Second, JoinTimeout: 10 * time.Minute,
//	}, now)
//	if err != nil {
//		return err
//	}
//	// For each agent that asks to join:
//	nodeRank, err := m.Join(rendezvous.JoinRequest{
//		NodeID: "host-a", RequestedRank: -1, LocalWorldSize: 8, Addr: "10.0.0.1",
//	}, now)
//	// Whenever m.NextDeadline passes: m.Tick(now). After every change
//	// (m.Version moved), tell each agent where it stands:
//	if mb, round, ok := m.Assignment("host-a"); ok {
//		// start global ranks mb.RankOffset..mb.RankOffset+mb.LocalWorldSize-1
//		// of m.Snapshot().WorldSize; when they fail:
//		err = m.WorkerFailed("host-a", round, now) // a restart, or the job fails
//	}
package rendezvous
