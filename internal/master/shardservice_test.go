package master

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
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
		if _, _, err := c.join(ctx, req, nil, 0, now); err != nil {
			t.Fatal(err)
		}
	}
	ds, _ := datasetFromProto(leasedSpec("d"))
	if _, err := c.shardCall(ctx, &event{Type: eventRegisterDataset, Time: now, Shard: &shardEvent{Dataset: "d", Spec: &ds}}); err != nil {
		t.Fatal(err)
	}
	out, err := c.shardCall(ctx, &event{Type: eventLease, Time: now, Shard: &shardEvent{Dataset: "d", Worker: "a/0", Max: 2}})
	if err != nil || len(out.lease.Shards) != 2 {
		t.Fatalf("lease: %v %v", out, err)
	}
	if _, err := c.shardCall(ctx, &event{Type: eventLease, Time: now, Shard: &shardEvent{Dataset: "d", Worker: "a/1", Max: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := c.apply(ctx, &event{Type: eventNodeLost, Time: now, Node: "a"}); err != nil {
		t.Fatal(err)
	}
	st1, _ := c.datasetStatus("d")
	if st1.Doing != 0 || st1.Todo != 10 {
		t.Errorf("after node a was lost: doing %d todo %d, want 0 and 10", st1.Doing, st1.Todo)
	}
	// The shards handed out next are the lost node's three, before any new
	// one. (Its two workers are requeued in name order, so that a replay
	// requeues them in the same order.)
	out, err = c.shardCall(ctx, &event{Type: eventLease, Time: now, Shard: &shardEvent{Dataset: "d", Worker: "b/0", Max: 3}})
	if err != nil || len(out.lease.Shards) != 3 {
		t.Fatalf("lease after requeue: %+v %v", out.lease, err)
	}
	for _, l := range out.lease.Shards {
		if l.Shard.Start >= 30 {
			t.Errorf("lease after requeue: %+v is not one of the lost node's", l.Shard)
		}
	}
	c2 := newCore("job", st)
	if _, err := c2.restore(ctx, now); err != nil {
		t.Fatal(err)
	}
	a, _ := c.shards.MarshalState()
	b, _ := c2.shards.MarshalState()
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
