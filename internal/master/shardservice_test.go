package master

import (
	"context"
	"runtime"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/shard"
	"github.com/roverml/rover/internal/store"
)

func leasedSpec(name string) *roverv1.DatasetSpec {
	return &roverv1.DatasetSpec{Name: name, Size: 100, BatchSize: 5, ShardSize: 10, Epochs: 1, Mode: roverv1.ShardMode_SHARD_MODE_LEASED}
}

func TestShardsOverRPC(t *testing.T) {
	_, c := startMaster(t, Config{})
	ctx := context.Background()
	if _, err := c.RegisterDataset(ctx, connect.NewRequest(&roverv1.RegisterDatasetRequest{Dataset: leasedSpec("train")})); err != nil {
		t.Fatal(err)
	}
	// The same registration again is fine; a different one is refused.
	if _, err := c.RegisterDataset(ctx, connect.NewRequest(&roverv1.RegisterDatasetRequest{Dataset: leasedSpec("train")})); err != nil {
		t.Fatalf("identical registration: %v", err)
	}
	other := leasedSpec("train")
	other.Size = 200
	if _, err := c.RegisterDataset(ctx, connect.NewRequest(&roverv1.RegisterDatasetRequest{Dataset: other})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("conflicting registration: %v, want AlreadyExists", err)
	}
	seen := map[int64]bool{}
	for {
		r, err := c.LeaseShards(ctx, connect.NewRequest(&roverv1.LeaseShardsRequest{Dataset: "train", Worker: "n/0", Max: 3}))
		if err != nil {
			t.Fatal(err)
		}
		if r.Msg.GetEnd() {
			break
		}
		var results []*roverv1.ShardResult
		for _, s := range r.Msg.GetShards() {
			for i := s.GetStart(); i < s.GetEnd(); i++ {
				if seen[i] {
					t.Fatalf("sample %d leased twice", i)
				}
				seen[i] = true
			}
			results = append(results, &roverv1.ShardResult{LeaseId: s.GetLeaseId(), Ok: true})
		}
		if _, err := c.CompleteShards(ctx, connect.NewRequest(&roverv1.CompleteShardsRequest{Dataset: "train", Worker: "n/0", Results: results})); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 100 {
		t.Errorf("%d samples trained, want 100", len(seen))
	}
	if _, err := c.LeaseShards(ctx, connect.NewRequest(&roverv1.LeaseShardsRequest{Dataset: "nope", Worker: "n/0", Max: 1})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("lease of an unknown dataset: %v, want NotFound", err)
	}
	if _, err := c.LeaseShards(ctx, connect.NewRequest(&roverv1.LeaseShardsRequest{Dataset: "train", Worker: "n/0", Max: 0})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("lease of 0 shards: %v, want InvalidArgument", err)
	}
}

// TestShardsRequeuedWhenNodeLost: a lost node's leases go back to the queue,
// and the journal replays the shard state exactly.
func TestShardsRequeuedWhenNodeLost(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	now := time.Unix(1000, 0)
	c := newCore("job", st)
	cfg, _ := validateRendezvous(rdzvConfig(1, 2))
	if err := c.configure(ctx, *cfg, now); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		req, _, _ := validateJoin(joinReq(id, rdzvConfig(1, 2)).Msg)
		if _, _, err := c.join(ctx, req, memoryReport{}, 0, now); err != nil {
			t.Fatal(err)
		}
	}
	ds, _ := datasetFromProto(leasedSpec("d"))
	if _, err := c.shardCall(ctx, &jobstate.Event{Type: jobstate.EventRegisterDataset, Time: now, Shard: &jobstate.ShardEvent{Dataset: "d", Spec: &ds}}); err != nil {
		t.Fatal(err)
	}
	out, err := c.shardCall(ctx, &jobstate.Event{Type: jobstate.EventLease, Time: now, Shard: &jobstate.ShardEvent{Dataset: "d", Worker: "a/0", Max: 2}})
	if err != nil || len(out.Lease.Shards) != 2 {
		t.Fatalf("lease: %v %v", out, err)
	}
	if _, err := c.shardCall(ctx, &jobstate.Event{Type: jobstate.EventLease, Time: now, Shard: &jobstate.ShardEvent{Dataset: "d", Worker: "a/1", Max: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := c.apply(ctx, &jobstate.Event{Type: jobstate.EventNodeLost, Time: now, Node: "a"}); err != nil {
		t.Fatal(err)
	}
	st1, _ := c.datasetStatus("d")
	if st1.Doing != 0 || st1.Todo != 10 {
		t.Errorf("after node a was lost: doing %d todo %d, want 0 and 10", st1.Doing, st1.Todo)
	}
	// The shards handed out next are the lost node's three, before any new
	// one. (Its two workers are requeued in name order, so that a replay
	// requeues them in the same order.)
	out, err = c.shardCall(ctx, &jobstate.Event{Type: jobstate.EventLease, Time: now, Shard: &jobstate.ShardEvent{Dataset: "d", Worker: "b/0", Max: 3}})
	if err != nil || len(out.Lease.Shards) != 3 {
		t.Fatalf("lease after requeue: %+v %v", out.Lease, err)
	}
	for _, l := range out.Lease.Shards {
		if l.Shard.Start >= 30 {
			t.Errorf("lease after requeue: %+v is not one of the lost node's", l.Shard)
		}
	}
	c2 := newCore("job", st)
	if _, err := c2.restore(ctx, now); err != nil {
		t.Fatal(err)
	}
	a, _ := c.st.Datasets.Machine().MarshalState()
	b, _ := c2.st.Datasets.Machine().MarshalState()
	if string(a) != string(b) {
		t.Errorf("replayed shard state differs:\n%s\n%s", a, b)
	}
}

// TestStreamingOverRPC appends to a streaming dataset while a worker
// leases: shards are cut as the stream grows, and the dataset ends once it
// is sealed and done.
func TestStreamingOverRPC(t *testing.T) {
	_, c := startMaster(t, Config{})
	ctx := context.Background()
	spec := &roverv1.DatasetSpec{Name: "stream", BatchSize: 1, ShardSize: 10, Epochs: 1, Streaming: true, Mode: roverv1.ShardMode_SHARD_MODE_LEASED}
	if _, err := c.RegisterDataset(ctx, connect.NewRequest(&roverv1.RegisterDatasetRequest{Dataset: spec})); err != nil {
		t.Fatal(err)
	}
	lease := func() *roverv1.LeaseShardsResponse {
		t.Helper()
		r, err := c.LeaseShards(ctx, connect.NewRequest(&roverv1.LeaseShardsRequest{Dataset: "stream", Worker: "n/0", Max: 10}))
		if err != nil {
			t.Fatal(err)
		}
		return r.Msg
	}
	if r := lease(); len(r.GetShards()) != 0 || !r.GetWait() {
		t.Fatalf("lease of an empty stream: %v, want wait", r)
	}
	r, err := c.AppendStream(ctx, connect.NewRequest(&roverv1.AppendStreamRequest{Dataset: "stream", Samples: 25}))
	if err != nil || r.Msg.GetEnd() != 25 {
		t.Fatalf("append: %v %v", r, err)
	}
	var trained int64
	complete := func(shards []*roverv1.Shard) {
		t.Helper()
		var results []*roverv1.ShardResult
		for _, s := range shards {
			trained += s.GetEnd() - s.GetStart()
			results = append(results, &roverv1.ShardResult{LeaseId: s.GetLeaseId(), Ok: true})
		}
		if len(results) == 0 {
			return
		}
		if _, err := c.CompleteShards(ctx, connect.NewRequest(&roverv1.CompleteShardsRequest{Dataset: "stream", Worker: "n/0", Results: results})); err != nil {
			t.Fatal(err)
		}
	}
	first := lease()
	if len(first.GetShards()) != 2 {
		t.Fatalf("25 samples of shard size 10 gave %d shards, want the 2 full ones", len(first.GetShards()))
	}
	complete(first.GetShards())
	if _, err := c.AppendStream(ctx, connect.NewRequest(&roverv1.AppendStreamRequest{Dataset: "stream", Samples: 3, Seal: true})); err != nil {
		t.Fatal(err)
	}
	last := lease()
	complete(last.GetShards())
	if trained != 28 {
		t.Errorf("trained %d samples, want all 28 appended", trained)
	}
	if r := lease(); !r.GetEnd() {
		t.Errorf("the sealed, finished stream does not end: %v", r)
	}
}

// TestHugeShuffledDataset registers a shuffled dataset of 2^32 samples
// (its order used to be a 16 GiB permutation), leases and completes a few
// shards of it, and registers and advances a Sync one of 2^62 samples,
// against a real master: the memory the process allocates meanwhile, the
// test's client included, stays below 64 MiB.
func TestHugeShuffledDataset(t *testing.T) {
	_, c := startMaster(t, Config{})
	ctx := context.Background()
	const bound = 64 << 20
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	spec := &roverv1.DatasetSpec{Name: "huge", Size: 1 << 32, BatchSize: 64, ShardSize: 4096, Epochs: 2, Shuffle: true, Seed: 9,
		Mode: roverv1.ShardMode_SHARD_MODE_LEASED}
	if _, err := c.RegisterDataset(ctx, connect.NewRequest(&roverv1.RegisterDatasetRequest{Dataset: spec})); err != nil {
		t.Fatal(err)
	}
	order := shard.EpochOrder(shard.Dataset{Size: 1 << 32, Shuffle: true, Seed: 9}, 0)
	for range 4 {
		r, err := c.LeaseShards(ctx, connect.NewRequest(&roverv1.LeaseShardsRequest{Dataset: "huge", Worker: "n/0", Max: 8}))
		if err != nil {
			t.Fatal(err)
		}
		var results []*roverv1.ShardResult
		for _, s := range r.Msg.GetShards() {
			if n := s.GetEnd() - s.GetStart(); n != 4096 || int64(len(s.GetIndices())) != n {
				t.Fatalf("shard [%d, %d) with %d indices", s.GetStart(), s.GetEnd(), len(s.GetIndices()))
			}
			for i, x := range s.GetIndices() {
				if want := order.At(s.GetStart() + int64(i)); x != want {
					t.Fatalf("position %d: sample %d, want %d", s.GetStart()+int64(i), x, want)
				}
			}
			results = append(results, &roverv1.ShardResult{LeaseId: s.GetLeaseId(), Ok: true})
		}
		if len(results) != 8 {
			t.Fatalf("leased %d shards, want 8", len(results))
		}
		if _, err := c.CompleteShards(ctx, connect.NewRequest(&roverv1.CompleteShardsRequest{Dataset: "huge", Worker: "n/0", Results: results})); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{})); err != nil {
			t.Fatal(err)
		}
	}
	sync := &roverv1.DatasetSpec{Name: "sync", Size: shard.MaxSize, BatchSize: 64, Shuffle: true, Mode: roverv1.ShardMode_SHARD_MODE_SYNC}
	if _, err := c.RegisterDataset(ctx, connect.NewRequest(&roverv1.RegisterDatasetRequest{Dataset: sync})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AdvancePosition(ctx, connect.NewRequest(&roverv1.AdvancePositionRequest{Dataset: "sync", Position: &roverv1.DataPosition{Consumed: 1 << 40}})); err != nil {
		t.Fatal(err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > bound {
		t.Errorf("the process allocated %d MiB to register and lease; want below %d MiB", grew>>20, bound>>20)
	}
	t.Logf("allocated %.1f MiB, heap in use %.1f MiB", float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), float64(after.HeapInuse)/(1<<20))
}
