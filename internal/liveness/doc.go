// Package liveness is the job master's node table: which agents exist, when each
// was last heard from, how many push streams it holds open, and which have
// been lost. It is a pure state machine in the etcd-raft style: no goroutines,
// no I/O and no clock of its own; every event carries the caller's now, and
// [Table.NextDeadline] tells the driver when to call [Table.Tick] next.
//
// A node is lost when it has not been seen for Config.HeartbeatTimeout, or when
// its last push stream closed more than Config.DisconnectGrace ago and none has
// reopened. [Table.Tick] reports each loss once; a later [Table.Seen] or
// [Table.Connected] makes the node live again.
//
// Deadlines live in a [deadline.Queue], so Seen, Connected and Disconnected
// cost O(log n) and a Tick that expires nothing costs O(1), even for tens of
// thousands of nodes.
//
//	t := liveness.NewTable(liveness.Config{HeartbeatTimeout: 10 * time.Second, DisconnectGrace: 3 * time.Second})
//	t.Seen("host-a", now)
//	t.Connected("host-a", now)
//	// ... on every heartbeat: t.Seen(id, now); when the driver's timer fires:
//	for _, l := range t.Tick(now) {
//		log.Printf("node %s lost: %s", l.ID, l.Reason)
//	}
//	if d, ok := t.NextDeadline(); ok {
//		timer.Reset(d.Sub(now))
//	}
package liveness
