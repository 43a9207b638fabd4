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
// Bolt frames every value it stores with a CRC-32C, so Load finds a torn or
// damaged record and cuts the journal there; bbolt's own copy-on-write commit
// keeps a crash from leaving half a transaction.
package store
