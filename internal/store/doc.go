// Package store holds the job master's persisted state: an append-only journal
// of the master's state transitions, replayed when a master starts. It owns the
// storage backends (in memory now; an embedded bbolt file and the Kubernetes
// API later) and not the meaning of the records, which belongs to the master.
//
//	s := store.NewMemory()
//	_ = s.Append(ctx, []byte(`{"type":"join"}`))
//	recs, _ := s.Records(ctx)
package store
