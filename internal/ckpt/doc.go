// Package ckpt is the storage side of Rover's flash checkpoint: the
// shared-memory arena a training process saves into, the safetensors files
// and manifests a checkpoint is made of, and the commit protocol that makes
// a checkpoint in durable storage appear whole or not at all.
//
// # Arena
//
// A node agent creates one [Arena] per local rank in /dev/shm
// ([CreateArena]). Saving is the only part of checkpointing that blocks
// training: the rank copies its state into a slot ([Arena.BeginWrite]) and
// publishes it ([Arena.Commit]), at memory speed (the pages are reserved
// and faulted in up front, and the CRC is computed later, off the training
// path). There are two slots: a save always writes the one that does not
// hold the newest snapshot, so a crash during the copy leaves the previous
// snapshot intact, and a slot still marked "writing" is never returned. The
// agent, in another process, persists [Arena.Latest] in the background and
// checks with [Arena.Checksum] that it was not overwritten meanwhile; after
// a worker crash, the restarted worker restores from the arena. Header
// words are read and written atomically and each slot's generation works as
// a seqlock, so readers in other processes never see a half-updated header.
//
// # Files and storage
//
// A rank's snapshot is a safetensors file ([Encode], [Decode]; [NewLayout]
// lays it out so a writer can place each tensor straight into an arena
// slot), with non-tensor state in the [ExtraName] tensor. In storage
// (a gocloud.dev bucket, [OpenBucket]) a checkpoint step is
//
//	step-000000000012/rank-00000.safetensors ... rank-NNNNN.safetensors
//	step-000000000012/manifest.json          (written after every rank file)
//	latest                                   ("12\n", written last: the commit point)
//
// Each agent calls [PersistRank]; the master collects the results in a
// [Commit] and, once the step is Ready, calls [WriteManifestAndLatest] and
// [Keep]. A restore calls [LoadLatest], which only accepts a step whose
// manifest and files all validate, then [LoadRank].
//
// A save, persisted and committed (errors elided):
//
//	// Agent, once: an arena for local rank 0 of job "j1".
//	a, err := ckpt.CreateArena("", "rover-j1-rank0", 1<<30)
//
//	// Rank, each save: lay out the file, copy tensors into the slot.
//	layout, err := ckpt.NewLayout(tensors, map[string]string{ckpt.MetaStep: "12", ckpt.MetaRank: "0"})
//	slot, tok, err := a.BeginWrite(12)
//	err = layout.Place(slot, tensors) // or copy each tensor to layout.Tensors[i]
//	err = a.Commit(tok, layout.Size)
//
//	// Agent, in the background.
//	snap, ok := a.Latest()
//	_, err = a.Checksum(snap) // ErrOverwritten: a newer save came; persist that one
//	info, err := ckpt.PersistRank(ctx, bucket, snap.Step, 0, snap.Data)
//	err = a.Check(snap) // nil: what was persisted is the committed snapshot
//
//	// Master, for each rank's info.
//	err = commit.Durable(12, info.Rank, info)
//	if commit.Ready(12) {
//		m, _ := commit.Manifest(12, time.Now())
//		if err := ckpt.WriteManifestAndLatest(ctx, bucket, m); err == nil {
//			commit.Committed(12)
//			_, err = ckpt.Keep(ctx, bucket, 3)
//		}
//	}
//
//	// Any rank, on restart when the arena has nothing.
//	m, err := ckpt.LoadLatest(ctx, bucket)
//	tensors, meta, err := ckpt.LoadRank(ctx, bucket, m, rank)
package ckpt
