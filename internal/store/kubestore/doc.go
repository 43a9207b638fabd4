// Package kubestore keeps the job master's journal and snapshots in the
// Kubernetes API, as ConfigMaps in the job's namespace, so that a master pod
// relaunched on another node, with no disk of the old one, resumes the job.
// It owns the objects' layout, their consistency and the fencing of a stale
// master; it does not own the meaning of the records (package master) nor
// the objects' lifetime beyond the owner reference it sets (the ElasticJob,
// so deleting the job deletes the state).
//
// A store named N is a head ConfigMap N and, for the snapshot, chunk
// ConfigMaps N-snap-<gen>-<i> of at most 900 KiB each (an object is limited
// to 1 MiB). The head holds the owner token, the fencing epoch, the current
// snapshot's generation, size and CRC-32C, and the records appended since
// the snapshot, one binaryData entry per Append. Every write of the head is a
// compare-and-swap on its resourceVersion:
//
//   - Open takes the store over: it writes a fresh owner token and the next
//     epoch into the head. A master still writing with the old token then
//     gets a conflict, and its Append fails with an error wrapping ErrFenced.
//   - Snapshot writes every chunk first, under a generation named after its
//     epoch (so two masters never write the same chunk), then moves the head
//     to them, dropping the records, then deletes the old chunks: a crash
//     between steps leaves, at worst, chunks no head names, which the next
//     Open deletes.
//   - Append adds one entry to the head. The head holds a bounded number of
//     bytes (Options.JournalBytes); an Append that does not fit fails with
//     store.ErrFull before writing anything, and the master then snapshots
//     and appends again.
//
// Usage:
//
//	s, err := kubestore.Open(ctx, kubestore.Options{
//		Client: clientset, Namespace: "team-a", Name: "llama-rover-master-state",
//		Owner:  &metav1.OwnerReference{APIVersion: "elastic.rover.dev/v1alpha1", Kind: "ElasticJob", Name: "llama", UID: uid},
//	})
//	if err != nil {
//		return err
//	}
//	defer s.Close()
//	c, err := s.Load(ctx) // c.Snapshot, then c.Records to replay
//
// The master's service account needs get, list, create, update and
// delete on configmaps in its namespace.
package kubestore
