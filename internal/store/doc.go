// Package store holds the job master's persisted state: a journal of the
// master's state transitions plus, now and then, a snapshot of the whole state
// that replaces the journal before it. A master starts from the snapshot and
// replays the records after it. The package owns the storage backends (in
// memory, for tests and benchmarks; an embedded bbolt file; the Kubernetes API
// later) and not the meaning of the records, which belongs to the master.
//
//	s := store.NewMemory()
//	_ = s.Append(ctx, [][]byte{[]byte(`{"type":"join"}`)}) // durable on return
//	c, _ := s.Load(ctx)                                      // c.Snapshot, c.Records
//	_ = s.Snapshot(ctx, state)                               // drops c.Records
package store
