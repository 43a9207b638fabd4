// Package store holds the job master's persisted state: a journal of the
// master's state transitions plus, now and then, a snapshot of the whole state
// that replaces the journal before it. A master starts from the snapshot and
// replays the records after it. The package owns the storage backends (in
// memory, for tests and benchmarks; an embedded bbolt file; the Kubernetes API
// in package kubestore) and not the meaning of the records, which belongs to the master.
//
//	s, err := store.Open(stateDir, store.Options{}) // fails if another master has stateDir
//	if err != nil {
//		return err
//	}
//	defer s.Close()
//	c, err := s.Load(ctx)                                    // c.Snapshot, then c.Records to replay
//	err = s.Append(ctx, [][]byte{[]byte(`{"type":"join"}`)}) // durable on return
//	err = s.Snapshot(ctx, state)                             // state reflects every record; drops them
//
// store.NewMemory() gives the same API without a file.
//
// Bolt frames every value it stores with a CRC-32C; bbolt's own copy-on-write
// commit keeps a crash from leaving half a transaction, so a bad record is
// damage, not a crash. Open refuses a file it cannot trust (empty, cut short,
// not a Rover journal, a bad header, snapshot or record) with a *DamageError
// that says what starting would drop; Options.DiscardDamaged drops it instead
// (the master's --discard-state). A missing file is a new job.
package store
