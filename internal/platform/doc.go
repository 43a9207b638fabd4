// Package platform is the small interface through which the job master owns
// its nodes: it asks a platform to create a node (an agent process, a pod) from
// a [NodeSpec], to delete one by id, and it watches what happens to them as a
// stream of [Event]s. The master's logic (internal/nodemanager) is written
// against this interface only and does not know which platform runs it.
//
// The package owns the contract, not any implementation: the local platform
// (agents as processes on this machine) and the Kubernetes platform (pods the
// master creates) live in their own packages and pin themselves with
//
//	var _ platform.Platform = (*Local)(nil)
//
// Package platformtest holds an in-memory fake for other packages' tests.
//
// # Contract
//
// Node ids are chosen by the caller and never reused: a relaunch is a new node
// with a new id and the same rank. Create with an id the platform already
// knows fails with [ErrExists]; Delete of an id the platform does not know (or
// already deleted) returns nil, so both are safe to retry after a master
// restart.
//
// Events are delivered at least once and, for one node id, in the order they
// happened (Pending before Running before Exited before Deleted); events of
// different nodes may interleave in any order. A node may skip states (a pod
// that fails to start goes from Pending to Exited; one removed by an operator
// goes straight to Deleted). Deleted is the last event of an id. Every time
// Watch starts, the platform first reports the current state of every node it
// still holds (a list, then a watch, as a Kubernetes informer does), so a
// restarted master resynchronises; consumers must therefore treat events as
// idempotent, keyed by node id.
//
//	err := p.Watch(ctx, func(ev platform.Event) {
//		cmds := manager.Observe(ev, clock.Now())
//		// carry out cmds with p.Create and p.Delete
//	})
package platform
