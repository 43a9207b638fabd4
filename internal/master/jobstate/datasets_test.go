package jobstate

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/shard"
)

// TestDatasetHolders: the workers that leased are the holders; a node's
// loss returns its workers' leases and forgets them, a new round's fence
// forgets all; a restored state keeps them.
func TestDatasetHolders(t *testing.T) {
	now := time.Unix(1000, 0)
	d := NewDatasets()
	if err := d.Register(shard.Dataset{Name: "d", Size: 100, BatchSize: 1, ShardSize: 10, Epochs: 1, Mode: shard.Leased}, now); err != nil {
		t.Fatal(err)
	}
	lease := func(worker string) []shard.Lease {
		t.Helper()
		out, err := d.Lease(&ShardEvent{Dataset: "d", Worker: worker, Max: 2}, shard.Worker{Name: worker, Incarnation: 1}, now)
		if err != nil {
			t.Fatal(err)
		}
		return out.Lease.Shards
	}
	lease("a/0")
	lease("a/1")
	held := lease("b/0")
	if got, want := d.Holders(), []string{"a/0", "a/1", "b/0"}; !cmp.Equal(got, want) {
		t.Errorf("holders %v, want %v", got, want)
	}
	d.NodeLost("a", now)
	if got, want := d.Holders(), []string{"b/0"}; !cmp.Equal(got, want) {
		t.Errorf("holders after a's loss %v, want %v", got, want)
	}
	if st, _ := d.Machine().Status("d"); st.Doing != 2 {
		t.Errorf("%d shards doing after a's loss, want b's 2", st.Doing)
	}
	state, err := d.Machine().MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	r, err := RestoreDatasets(state, d.Holders())
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Holders(); !cmp.Equal(got, []string{"b/0"}) {
		t.Errorf("restored holders %v", got)
	}
	out, err := r.Complete(&ShardEvent{Dataset: "d", Results: []ShardResult{{ID: held[0].ID, OK: true}, {ID: 9999, OK: true}}},
		shard.Worker{Name: "b/0", Incarnation: 1}, now)
	if err != nil || !cmp.Equal(out.Unknown, []uint64{9999}) {
		t.Errorf("complete: %+v, %v; want lease 9999 unknown", out, err)
	}
	r.Fence(2, now)
	if got := r.Holders(); len(got) != 0 {
		t.Errorf("holders after the fence %v, want none", got)
	}
}

// TestDatasetBatch: a batch applies its ops in order, refuses what is
// neither a lease nor a completion, and answers Wait to leases past the
// batch's sample budget.
func TestDatasetBatch(t *testing.T) {
	now := time.Unix(1000, 0)
	d := NewDatasets()
	big := shard.Dataset{Name: "big", Size: 2 * shard.MaxLeaseSamples, BatchSize: 1, ShardSize: shard.MaxLeaseSamples, Epochs: 1, Shuffle: true, Mode: shard.Leased}
	if err := d.Register(big, now); err != nil {
		t.Fatal(err)
	}
	worker := func(s *ShardEvent) shard.Worker { return shard.Worker{Name: s.Worker, Incarnation: 1} }
	outs, errs := d.Batch([]BatchOp{
		{Type: BatchLease, Shard: &ShardEvent{Dataset: "big", Worker: "a/0", Max: 1}},
		{Type: "advance", Shard: &ShardEvent{Dataset: "big"}},
		{Type: BatchLease, Shard: &ShardEvent{Dataset: "big", Worker: "b/0", Max: 1}},
	}, worker, now)
	if errs[0] != nil || len(outs[0].Lease.Shards) != 1 {
		t.Errorf("the first lease: %+v, %v", outs[0], errs[0])
	}
	if !errors.Is(errs[1], ErrInvalid) {
		t.Errorf("an advance in a batch: %v, want ErrInvalid", errs[1])
	}
	if errs[2] != nil || !outs[2].Lease.Wait || len(outs[2].Lease.Shards) != 0 {
		t.Errorf("a lease past the batch's budget: %+v, %v; want Wait", outs[2], errs[2])
	}
}
