// Package jobstate is a job's state, as the master keeps it: pure state
// machines that the master's group commit (internal/master, commit.go)
// drives under its one lock, in journal order. It has no store, no
// channels, no goroutines, no clock (time comes with each event) and no
// wire types; the master keeps the edge (services, auth, limits on
// requests, the error table), the journal and the wake-ups, and converts
// to and from the protocol.
//
// Each concern is a sub-state of its own, in its own file, with the events
// it accepts, its read-only views and its part of the snapshot:
//
//   - Membership (membership.go): membership and rounds: the job's
//     configuration (with the checkpoint storage a checkpointer declares,
//     declare.go), the rendezvous machine, the liveness table and the
//     nodes' addresses.
//   - Keys (keys.go): the job's key-value store, within its limits.
//   - Memory (memory.go): the flash-checkpoint snapshots each node holds in
//     memory, and the step every rank of a closed round's world can restore.
//   - Failures (failures.go): the failure records, annotated with their
//     round's diagnosis, the blame a lost node takes, and the diagnosis
//     history.
//   - Datasets (datasets.go): the shard machine, the workers holding
//     leases, and the applying of a batch of leases and completions.
//   - NodeCheck (nodecheck.go): the pre-flight node check of each world
//     that forms, its reports and deadlines, and the check that ended.
//   - Fleet (fleet.go): the node manager's journaled state, the nodes it
//     runs, and the notices queued for it (a lost agent, a diagnosis's
//     relaunch).
//   - Goodput (goodput.go): the job's goodput accounting (internal/goodput),
//     fed by Apply from the rounds and failures and, between events, by the
//     heartbeats, whose inputs are journaled as its whole state
//     (EventGoodput).
//   - Progress (progress.go): the job's runtime progress, its stragglers
//     and its hang timer, fed by the agents' heartbeats. It is not
//     journaled: no event of Apply touches it, the snapshot leaves it out,
//     and a restarted master starts it afresh.
//
// State composes the sub-states (state.go). Its Apply (apply.go) takes an
// Event (event.go, the journal's record), checks it as CheckEvent did
// before it was journaled, dispatches it to the sub-states, carries the
// effects of one on the others (a node check that excludes a node loses it
// from the rendezvous, its memory and its leases; a new round fences the
// leases of the last) and returns the Effects: the views changed, a key
// changed, notices queued for the fleet, a dataset event's outcome. The
// master's core holds the State under its lock and acts on the Effects.
// MarshalSnapshot and RestoreSnapshot (snapshot.go) encode the whole State,
// in the format of the master's state dirs.
//
// A new piece of job state goes here as a sub-state: a type with a method
// per event (Check before journaling, then the transition), views that
// copy, a field of State, a case of Apply, and a field of the snapshot.
//
//	keys := jobstate.NewKeys()
//	if err := keys.Check("k", len(v)); err != nil { ... } // errors.Is(err, jobstate.ErrLimit)
//	keys.Set("k", v) // once the event is durable
//	v, ok := keys.Get("k")
package jobstate
