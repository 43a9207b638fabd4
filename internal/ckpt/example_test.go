package ckpt_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/roverml/rover/internal/ckpt"
)

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "arena")
	defer os.RemoveAll(dir)

	// The agent creates the arena; the rank saves step 12 into it.
	a, err := ckpt.CreateArena(dir, "rank0", 1<<20)
	if err != nil {
		panic(err)
	}
	defer a.Remove()
	tensors := []ckpt.Tensor{
		{Name: "w", DType: "F32", Shape: []int64{2, 2}, Data: make([]byte, 16)},
		ckpt.Extra([]byte("optimizer state")),
	}
	layout, _ := ckpt.NewLayout(tensors, map[string]string{ckpt.MetaStep: "12", ckpt.MetaRank: "0"})
	slot, tok, _ := a.BeginWrite(12)
	_ = layout.Place(slot, tensors)
	_ = a.Commit(tok, layout.Size)

	// The agent persists the newest snapshot.
	bucket, _ := ckpt.OpenBucket(ctx, "mem://")
	defer bucket.Close()
	snap, _ := a.Latest()
	if _, err := a.Checksum(snap); err != nil {
		panic(err)
	}
	info, err := ckpt.PersistRank(ctx, bucket, snap.Step, 0, snap.Data)
	if err != nil || a.Check(snap) != nil {
		panic(err)
	}

	// The master commits once every rank is durable.
	commit, _ := ckpt.NewCommit(1, ckpt.Sharded)
	_ = commit.Durable(snap.Step, 0, info)
	if commit.Ready(snap.Step) {
		m, _ := commit.Manifest(snap.Step, time.Now())
		if err := ckpt.WriteManifestAndLatest(ctx, bucket, m); err != nil {
			panic(err)
		}
		commit.Committed(snap.Step)
	}

	// A restart restores it.
	m, _ := ckpt.LoadLatest(ctx, bucket)
	restored, meta, _ := ckpt.LoadRank(ctx, bucket, m, 0)
	rest, extra := ckpt.SplitExtra(restored)
	fmt.Printf("step %d: %s %v, extra %q, rank %s\n", m.Step, rest[0].Name, rest[0].Shape, extra, meta[ckpt.MetaRank])
	// Output:
	// step 12: w [2 2], extra "optimizer state", rank 0
}
