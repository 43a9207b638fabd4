// Package nodemanager is the job master's node manager: it decides which
// nodes the job should have on its platform and what to do when one fails. It
// is a pure state machine in the etcd-raft style: no goroutines, no I/O and
// no clock; every input carries the caller's now, and each returns the
// [Command]s the master must carry out through internal/platform, in order.
// It does not talk to the platform, detect lost agents (internal/liveness does)
// or diagnose failures (diagnosis sends [Action]s).
//
// Rules (DLRover's, see docs/design/node-manager.md):
//
//   - At Start every group gets Nodes (default MaxNodes) nodes, ranks
//     0..Nodes-1, with ids "<job>-<group>-<rank>-<relaunch>"
//     ("train-worker-3-0"), created through a window: at most 64 nodes
//     asked for and not yet reported by the platform; each one reported
//     brings the next rank's create. Ranks still to create count as
//     expected ([Manager.Live]) and usable. [Manager.Scale] adds or removes the highest
//     ranks within MinNodes..MaxNodes; a rank scaled back is not a relaunch.
//   - A node that exits non-zero, is deleted by the platform, is lost, or that
//     diagnosis asks to relaunch is replaced by a node of the same rank and
//     relaunch+1 (the old one is deleted first when the platform may still
//     hold it), while the rank's RestartCount (default 3, at most 5) and the
//     job's MaxRelaunches last.
//   - A node the platform killed for memory (OOMKilled) comes back with more
//     memory (diagnosis.NextMemory: twice, at most 8 GiB more, 64 GiB cap).
//   - With Spec.RightSize, a rank's next node asks for what its workers used
//     ([Manager.ObserveUsage], [RightSize]): more CPU when CPU-bound while
//     its steps slow down ([Slowdown]), less memory when far below the
//     request, within Spec.ResourceLimits.
//   - Exit 0 is success: the rank is Succeeded and not relaunched.
//   - A rank whose budget is used up is Failed. The job fails when it is a
//     critical rank, or when its group has fewer usable (live or succeeded)
//     nodes than MinNodes.
//   - A node pending past PendingTimeout (default 15 min) is given up when
//     its group can run without it: the group keeps at least MinNodes
//     (and one) nodes running, pending within the timeout, succeeded or
//     yet to be created. The node is deleted as a planned removal
//     ([Command.Removed] and [Command.GivenUp]: no relaunch spent, no
//     failure blamed), its rank is Removed, and [Manager.Desired] and
//     [Manager.Live] (what the rendezvous expects) no longer count it; the
//     reason says so ("node train-worker-2-0 pended 5m0s past its 5m0s
//     pending timeout: given up; the job runs with 2 nodes"). A later
//     [Manager.Scale] up brings the rank back first. When the group cannot
//     run without it, PendingStrategy decides: PendingNecessary (the
//     default) fails the job, PendingSkip keeps waiting (and gives the
//     node up once the group can run without it). PendingAll fails the
//     job as soon as any node pends past the timeout. A timed-out critical
//     node fails the job (PendingSkip waits for it).
//   - [Manager.Capacity] says how many nodes of a group the platform
//     showed it can place: -1 (unknown) until a node of the group times
//     out pending; then the nodes running or pending within the timeout at
//     that moment; -1 again PendingRetry (default 10 min) later, so that a
//     job (the auto-scaler) may probe for capacity that appeared. It is
//     journaled with the rest.
//   - Every relaunch is counted by its [RelaunchCause], one of a fixed set
//     (oom, evicted, deleted, exited, node_lost, node_check, diagnosis,
//     other) for the metrics ([Status].RelaunchCauses).
//   - Events of replaced or unknown node ids are ignored, so repeated and
//     late events are harmless.
//
// The whole state round-trips through [Manager.MarshalState] and [Restore].
//
//	m, err := nodemanager.New(spec)
//	run(m.Start(now))
//	// platform events, lost agents, diagnosis, timers:
//	run(m.Observe(ev, now)); run(m.Lost(id, "no heartbeat for 600s", now))
//	run(m.Act(action, now)); run(m.Tick(now))
//	if d, ok := m.NextDeadline(); ok { timer.Reset(d.Sub(now)) }
package nodemanager
