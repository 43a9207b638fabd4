package master

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/shard"
	"github.com/roverml/rover/internal/store"
)

// oldStore copies st's snapshot and records into a new store as an earlier
// Rover would have written them: records of journal schema 1, a snapshot
// whose shard state is of schema 2. Their content is the same; only the
// shuffled orders they refer to differ.
func oldStore(t *testing.T, st *store.Memory) *store.Memory {
	t.Helper()
	ctx := context.Background()
	c, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := store.NewMemory()
	if c.Snapshot != nil {
		snap := bytes.Replace(c.Snapshot, []byte(`"shards":{"schema":3,`), []byte(`"shards":{"schema":2,`), 1)
		if bytes.Equal(snap, c.Snapshot) {
			t.Fatalf("no shard schema in the snapshot %s", c.Snapshot)
		}
		old.Snapshot(ctx, snap)
	}
	for _, r := range c.Records {
		rec := bytes.Replace(r, []byte(`{"schema":2,`), []byte(`{"schema":1,`), 1)
		if bytes.Equal(rec, r) {
			t.Fatalf("no journal schema in the record %s", r)
		}
		old.Append(ctx, [][]byte{rec})
	}
	return old
}

// TestRestoreOldShuffledState: a master started on the state of an earlier
// Rover refuses it when a shuffled dataset is part-way through an epoch at
// the end of that state (snapshot or journal), saying what to do, and
// restores it otherwise, including when this Rover's own records follow.
func TestRestoreOldShuffledState(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	ds := shard.Dataset{Name: "d", Size: 12, BatchSize: 1, ShardSize: 4, Epochs: 2, Shuffle: true, Seed: 3, Mode: shard.Leased}
	lease := func(c *core) []shard.Lease {
		out, err := c.shardCall(ctx, &jobstate.Event{Type: jobstate.EventLease, Time: now, Shard: &jobstate.ShardEvent{Dataset: "d", Worker: "n/0", Max: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Lease.Shards
	}
	complete := func(c *core, ls []shard.Lease) {
		for _, l := range ls {
			if _, err := c.shardCall(ctx, &jobstate.Event{Type: jobstate.EventCompleteShards, Time: now, Shard: &jobstate.ShardEvent{Dataset: "d", Worker: "n/0",
				Results: []jobstate.ShardResult{{ID: l.ID, OK: true}}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	restore := func(st Store) error {
		_, err := newCore("job", st).restore(ctx, now)
		return err
	}
	st := store.NewMemory()
	c := configuredCore(t, st, now)
	if _, err := c.shardCall(ctx, &jobstate.Event{Type: jobstate.EventRegisterDataset, Time: now, Shard: &jobstate.ShardEvent{Dataset: "d", Spec: &ds}}); err != nil {
		t.Fatal(err)
	}
	held := lease(c)
	complete(c, lease(c))
	// Part-way through epoch 0, as records and as a snapshot.
	if err := restore(oldStore(t, st)); err == nil || !strings.Contains(err.Error(), "earlier Rover") ||
		!strings.Contains(err.Error(), `"d" is part-way through shuffled epoch 0 (8 of 12`) || !strings.Contains(err.Error(), "--state-dir") {
		t.Fatalf("restore of old records part-way through a shuffled epoch: %v", err)
	}
	if err := restore(st); err != nil {
		t.Fatalf("restore of this Rover's records: %v", err)
	}
	snapped := store.NewMemory()
	c.mu.Lock()
	state, err := c.marshalStateLocked()
	c.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	snapped.Snapshot(ctx, state)
	if err := restore(oldStore(t, snapped)); err == nil || !strings.Contains(err.Error(), "part-way through shuffled epoch 0") {
		t.Fatalf("restore of an old snapshot part-way through a shuffled epoch: %v", err)
	}

	// At the end of epoch 0 the old records restore, and so do they with
	// this Rover's records of epoch 1 after them.
	complete(c, held)
	complete(c, lease(c))
	old := oldStore(t, st)
	if err := restore(old); err != nil {
		t.Fatalf("restore of old records at the end of an epoch: %v", err)
	}
	c2 := newCore("job", old)
	if _, err := c2.restore(ctx, now); err != nil {
		t.Fatal(err)
	}
	complete(c2, lease(c2)) // journaled as schema 2, part-way through epoch 1
	if err := restore(old); err != nil {
		t.Fatalf("restore of old records followed by new ones: %v", err)
	}
	if s, _ := c2.datasetStatus("d"); s.Epoch != 1 || s.DoneSamples != 4 {
		t.Fatalf("status after the upgrade %+v", s)
	}
}
