package master

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/shard"
	"github.com/roverml/rover/internal/store"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

func leaseOp(dataset, worker string, max int32) *roverv1.ShardOp {
	return &roverv1.ShardOp{Op: &roverv1.ShardOp_Lease{Lease: &roverv1.LeaseShardsRequest{Dataset: dataset, Worker: worker, Max: max}}}
}

func completeOp(dataset, worker string, ok bool, ids ...uint64) *roverv1.ShardOp {
	r := &roverv1.CompleteShardsRequest{Dataset: dataset, Worker: worker}
	for _, id := range ids {
		r.Results = append(r.Results, &roverv1.ShardResult{LeaseId: id, Ok: ok})
	}
	return &roverv1.ShardOp{Op: &roverv1.ShardOp_Complete{Complete: r}}
}

// TestBatchShards sends batches that mix good and bad ops: each op is
// answered in its place as the single call would be, the good ones are
// applied in order as one journal record, and the journal replays them.
func TestBatchShards(t *testing.T) {
	st := store.NewMemory()
	m, c := startMaster(t, Config{Store: st})
	ctx := context.Background()
	if _, err := c.RegisterDataset(ctx, connect.NewRequest(&roverv1.RegisterDatasetRequest{Dataset: leasedSpec("train")})); err != nil {
		t.Fatal(err)
	}
	batch := func(ops ...*roverv1.ShardOp) []*roverv1.ShardOpResult {
		t.Helper()
		before := st.Len()
		r, err := c.BatchShards(ctx, connect.NewRequest(&roverv1.BatchShardsRequest{Ops: ops}))
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Msg.GetResults()) != len(ops) {
			t.Fatalf("%d results for %d ops", len(r.Msg.GetResults()), len(ops))
		}
		if n := st.Len() - before; n != 1 {
			t.Errorf("the batch took %d journal records, want 1", n)
		}
		return r.Msg.GetResults()
	}
	span := func(r *roverv1.ShardOpResult) [][2]int64 {
		var out [][2]int64
		for _, s := range r.GetLease().GetShards() {
			out = append(out, [2]int64{s.GetStart(), s.GetEnd()})
		}
		return out
	}
	code := func(r *roverv1.ShardOpResult) connect.Code { return connect.Code(r.GetError().GetCode()) }

	res := batch(
		leaseOp("train", "n/0", 2),
		leaseOp("nope", "n/0", 1),
		leaseOp("train", "n/1", 0),
		&roverv1.ShardOp{},
		leaseOp("train", "n/1", 1),
	)
	if got, want := span(res[0]), [][2]int64{{0, 10}, {10, 20}}; !cmp.Equal(got, want) {
		t.Errorf("op 0 leased %v, want %v", got, want)
	}
	for i, want := range map[int]connect.Code{1: connect.CodeNotFound, 2: connect.CodeInvalidArgument, 3: connect.CodeInvalidArgument} {
		if got := code(res[i]); got != want || res[i].GetError().GetMessage() == "" {
			t.Errorf("op %d: %v, want an error %v with a message", i, res[i], want)
		}
	}
	// Ops apply in order: n/1 gets the shard after n/0's two.
	if got, want := span(res[4]), [][2]int64{{20, 30}}; !cmp.Equal(got, want) {
		t.Errorf("op 4 leased %v, want %v", got, want)
	}
	a, b := res[0].GetLease().GetShards(), res[4].GetLease().GetShards()

	// n/1 fails its shard (it goes back to the front of the queue), then n/2
	// leases it in the same batch; n/0 cannot complete a lease it does not
	// hold, but completes its own.
	res = batch(
		completeOp("train", "n/1", false, b[0].GetLeaseId()),
		leaseOp("train", "n/2", 1),
		completeOp("train", "n/0", true, b[0].GetLeaseId()),
		completeOp("train", "n/0", true, a[0].GetLeaseId(), a[1].GetLeaseId()),
	)
	if res[0].GetComplete() == nil || len(res[0].GetComplete().GetUnknown()) != 0 {
		t.Errorf("op 0: %v, want a clean completion", res[0])
	}
	if got, want := span(res[1]), [][2]int64{{20, 30}}; !cmp.Equal(got, want) {
		t.Errorf("op 1 leased %v, want the failed shard %v", got, want)
	}
	want := &roverv1.CompleteShardsResponse{Unknown: []uint64{b[0].GetLeaseId()}}
	if diff := cmp.Diff(want, res[2].GetComplete(), protocmp.Transform()); diff != "" {
		t.Errorf("op 2 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&roverv1.CompleteShardsResponse{}, res[3].GetComplete(), protocmp.Transform()); diff != "" {
		t.Errorf("op 3 (-want +got):\n%s", diff)
	}

	// The journal replays both batches to the same shard state.
	checkShardsReplay(t, m, st)
}

func TestBatchShardsSizeLimit(t *testing.T) {
	_, c := startMaster(t, Config{})
	ctx := context.Background()
	for _, n := range []int{0, MaxBatchOps + 1} {
		ops := make([]*roverv1.ShardOp, n)
		for i := range ops {
			ops[i] = leaseOp("train", "n/0", 1)
		}
		_, err := c.BatchShards(ctx, connect.NewRequest(&roverv1.BatchShardsRequest{Ops: ops}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("batch of %d ops: %v, want InvalidArgument", n, err)
		}
	}
	ops := make([]*roverv1.ShardOp, MaxBatchOps)
	for i := range ops {
		ops[i] = leaseOp("train", "n/0", 1)
	}
	r, err := c.BatchShards(ctx, connect.NewRequest(&roverv1.BatchShardsRequest{Ops: ops}))
	if err != nil {
		t.Fatalf("batch of %d ops: %v", MaxBatchOps, err)
	}
	if got := connect.Code(r.Msg.GetResults()[MaxBatchOps-1].GetError().GetCode()); got != connect.CodeNotFound {
		t.Errorf("lease of an unregistered dataset in a full batch: %v, want NotFound", got)
	}
}

// FuzzBatchShards feeds arbitrary batches to a master with one dataset:
// every op gets an answer in its place, nothing panics, and replaying the
// journal rebuilds exactly the same shard state.
func FuzzBatchShards(f *testing.F) {
	good, _ := proto.Marshal(&roverv1.BatchShardsRequest{Ops: []*roverv1.ShardOp{
		leaseOp("d", "a/0", 3), completeOp("d", "a/0", true, 1, 2), leaseOp("nope", "a/0", 1), completeOp("d", "b/1", false, 9),
	}})
	f.Add(good)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var req roverv1.BatchShardsRequest
		if proto.Unmarshal(b, &req) != nil || len(req.GetOps()) > MaxBatchOps {
			return
		}
		ctx, now := context.Background(), time.Unix(1000, 0)
		st := store.NewMemory()
		c := newCore("job", st)
		ds, _ := datasetFromProto(leasedSpec("d"))
		if _, err := c.shardCall(ctx, &jobstate.Event{Type: jobstate.EventRegisterDataset, Time: now, Shard: &jobstate.ShardEvent{Dataset: "d", Spec: &ds}}); err != nil {
			t.Fatal(err)
		}
		var ops []jobstate.BatchOp
		for _, op := range req.GetOps() {
			if o, err := batchOpFromProto(op); err == nil {
				ops = append(ops, o)
			}
		}
		if len(ops) == 0 {
			return
		}
		outs, errs, err := c.shardBatch(ctx, now, ops)
		if err != nil {
			t.Fatalf("a valid batch was not journaled: %v", err)
		}
		if len(outs) != len(ops) || len(errs) != len(ops) {
			t.Fatalf("%d outcomes and %d errors for %d ops", len(outs), len(errs), len(ops))
		}
		again := newCore("job", st)
		if _, err := again.restore(ctx, now); err != nil {
			t.Fatalf("replay: %v", err)
		}
		x, _ := c.st.Datasets.Machine().MarshalState()
		y, _ := again.st.Datasets.Machine().MarshalState()
		if string(x) != string(y) {
			t.Errorf("replayed shard state differs:\n%s\n%s", x, y)
		}
	})
}

// checkShardsReplay restores a new core from st, the store of master m, and
// checks that the journal replays to m's shard state.
func checkShardsReplay(t *testing.T, m *Master, st Store) {
	t.Helper()
	c2 := newCore(m.cfg.Job, st)
	if _, err := c2.restore(context.Background(), m.cfg.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	want, _ := m.core.st.Datasets.Machine().MarshalState()
	got, _ := c2.st.Datasets.Machine().MarshalState()
	if string(want) != string(got) {
		t.Errorf("replayed shard state differs:\n%s\n%s", want, got)
	}
}

// TestBatchSampleBudget: a batch of leases of the largest shuffled shards
// hands out about one call's worth of sample indices; its other leases are
// told to wait and get their shards from the next batch.
func TestBatchSampleBudget(t *testing.T) {
	_, c := startMaster(t, Config{})
	ctx := context.Background()
	const shardSize = shard.MaxLeaseSamples
	spec := &roverv1.DatasetSpec{Name: "big", Size: 64 * shardSize, BatchSize: 1, ShardSize: shardSize, Epochs: 1,
		Shuffle: true, Seed: 3, Mode: roverv1.ShardMode_SHARD_MODE_LEASED}
	if _, err := c.RegisterDataset(ctx, connect.NewRequest(&roverv1.RegisterDatasetRequest{Dataset: spec})); err != nil {
		t.Fatal(err)
	}
	var ops []*roverv1.ShardOp
	for i := range 16 {
		ops = append(ops, leaseOp("big", fmt.Sprintf("n/%d", i), 4))
	}
	leased := 0
	for round := 0; leased < 16; round++ {
		if round > 32 {
			t.Fatalf("16 workers got %d shards in 32 batches", leased)
		}
		r, err := c.BatchShards(ctx, connect.NewRequest(&roverv1.BatchShardsRequest{Ops: ops}))
		if err != nil {
			t.Fatal(err)
		}
		indices, got := 0, 0
		for _, res := range r.Msg.GetResults() {
			for _, s := range res.GetLease().GetShards() {
				indices += len(s.GetIndices())
				got++
			}
			if len(res.GetLease().GetShards()) == 0 && !res.GetLease().GetWait() {
				t.Errorf("a lease without shards that is not told to wait: %v", res)
			}
		}
		if indices > shardSize || got != 1 {
			t.Fatalf("a batch handed out %d shards with %d indices, want one shard of %d", got, indices, shardSize)
		}
		leased += got
		ops = ops[1:] // the worker served leases no more
		if len(ops) == 0 {
			break
		}
	}
}
