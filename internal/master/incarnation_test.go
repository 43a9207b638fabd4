package master

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/store"
)

// shardClient makes the shard calls of a test over RPC.
type shardClient struct {
	t   *testing.T
	ctx context.Context
	c   roverv1connect.MasterServiceClient
}

func (s shardClient) lease(worker string, inc int64, req uint64, max int32) (*roverv1.LeaseShardsResponse, error) {
	r, err := s.c.LeaseShards(s.ctx, connect.NewRequest(&roverv1.LeaseShardsRequest{Dataset: "d", Worker: worker, Incarnation: inc, RequestId: req, Max: max}))
	if err != nil {
		return nil, err
	}
	return r.Msg, nil
}

func (s shardClient) complete(worker string, inc int64, ids ...uint64) (*roverv1.CompleteShardsResponse, error) {
	r := &roverv1.CompleteShardsRequest{Dataset: "d", Worker: worker, Incarnation: inc}
	for _, id := range ids {
		r.Results = append(r.Results, &roverv1.ShardResult{LeaseId: id, Ok: true})
	}
	resp, err := s.c.CompleteShards(s.ctx, connect.NewRequest(r))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

func spans(ss []*roverv1.Shard) [][2]int64 {
	var out [][2]int64
	for _, s := range ss {
		out = append(out, [2]int64{s.GetStart(), s.GetEnd()})
	}
	return out
}

func ids(ss []*roverv1.Shard) []uint64 {
	var out []uint64
	for _, s := range ss {
		out = append(out, s.GetLeaseId())
	}
	return out
}

// wantSuperseded checks that err refuses a superseded worker precisely.
func wantSuperseded(t *testing.T, what string, err error) {
	t.Helper()
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "worker superseded") || !strings.Contains(err.Error(), "must stop") {
		t.Errorf("%s: %v, want FailedPrecondition telling the worker it is superseded and must stop", what, err)
	}
}

// TestOldRoundRefusedAfterRoundChange: when a new round opens, the master
// takes back every lease of the workers of the earlier round, and refuses
// whatever such a worker sends later (the lease that used to leak), alone
// or in a batch; the new round's workers get the requeued shards first.
// The journal replays it all to the same shard state.
func TestOldRoundRefusedAfterRoundChange(t *testing.T) {
	st := store.NewMemory()
	m, c := startMaster(t, Config{Store: st})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := rdzvConfig(2, 2)
	var streams []session
	for i, id := range []string{"a", "b"} {
		streams = append(streams, openSessionRank(ctx, t, c, id, i, cfg))
	}
	for _, s := range streams {
		nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetAssignment() != nil && v.GetRound() == 1 })
	}
	if _, err := c.RegisterDataset(ctx, connect.NewRequest(&roverv1.RegisterDatasetRequest{Dataset: leasedSpec("d")})); err != nil {
		t.Fatal(err)
	}
	sc := shardClient{t, ctx, c}
	a, err := sc.lease("a/0", 1, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sc.lease("b/0", 1, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.complete("b/0", 1, b.GetShards()[0].GetLeaseId()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReportFailure(ctx, connect.NewRequest(&roverv1.ReportFailureRequest{NodeId: "a", Round: 1,
		Failures: []*roverv1.WorkerFailure{{Rank: 1, ExitCode: -9, Message: "killed"}}})); err != nil {
		t.Fatal(err)
	}
	nextView(t, streams[1], func(v *roverv1.NodeView) bool { return v.GetRound() == 2 })

	st1, _ := m.core.datasetStatus("d")
	if st1.Doing != 0 || st1.Done != 1 {
		t.Fatalf("after round 2 opened: %d doing, %d done; want a/0's 2 leases back in the queue", st1.Doing, st1.Done)
	}
	_, err = sc.lease("a/0", 1, 0, 1) // a late request of round 1
	wantSuperseded(t, "lease from round 1", err)
	_, err = sc.lease("b/1", 1, 0, 1) // round 1, never seen: fenced all the same
	wantSuperseded(t, "lease from an unseen worker of round 1", err)
	_, err = sc.complete("a/0", 1, a.GetShards()[0].GetLeaseId())
	wantSuperseded(t, "complete from round 1", err)
	r, err := c.BatchShards(ctx, connect.NewRequest(&roverv1.BatchShardsRequest{Ops: []*roverv1.ShardOp{
		{Op: &roverv1.ShardOp_Lease{Lease: &roverv1.LeaseShardsRequest{Dataset: "d", Worker: "a/1", Incarnation: 1, Max: 1}}},
		{Op: &roverv1.ShardOp_Lease{Lease: &roverv1.LeaseShardsRequest{Dataset: "d", Worker: "a/1", Incarnation: 2, Max: 1}}},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	if e := r.Msg.GetResults()[0].GetError(); connect.Code(e.GetCode()) != connect.CodeFailedPrecondition || !strings.Contains(e.GetMessage(), "must stop") {
		t.Errorf("batched lease from round 1: %v, want FailedPrecondition", r.Msg.GetResults()[0])
	}
	if got, want := spans(r.Msg.GetResults()[1].GetLease().GetShards()), [][2]int64{{0, 10}}; !cmp.Equal(got, want) {
		t.Errorf("batched lease from round 2 got %v, want a/0's first shard %v", got, want)
	}
	// Round 2's workers, and a caller that sends no incarnation (taken for
	// the current round), get shards; the requeued one comes first.
	if got, err := sc.lease("a/0", 2, 0, 1); err != nil || !cmp.Equal(spans(got.GetShards()), [][2]int64{{10, 20}}) {
		t.Errorf("lease from round 2: %v, %v; want a/0's second shard [10, 20)", got, err)
	}
	if got, err := sc.lease("old-agent/0", 0, 0, 1); err != nil || !cmp.Equal(spans(got.GetShards()), [][2]int64{{30, 40}}) {
		t.Errorf("lease without an incarnation: %v, %v; want [30, 40)", got, err)
	}

	checkShardsReplay(t, m, st)
}

// TestDuplicateLeaseRequest: a lease request sent again with the same
// request_id (its answer was lost) gets the same shards, alone or in a
// batch; an older request_id is refused.
func TestDuplicateLeaseRequest(t *testing.T) {
	st := store.NewMemory()
	m, c := startMaster(t, Config{Store: st})
	ctx := context.Background()
	if _, err := c.RegisterDataset(ctx, connect.NewRequest(&roverv1.RegisterDatasetRequest{Dataset: leasedSpec("d")})); err != nil {
		t.Fatal(err)
	}
	sc := shardClient{t, ctx, c}
	const client = 77 << 32
	first, err := sc.lease("n/0", 3, client|1, 2)
	if err != nil {
		t.Fatal(err)
	}
	again, err := sc.lease("n/0", 3, client|1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ids(first.GetShards()), ids(again.GetShards())); diff != "" || len(first.GetShards()) != 2 {
		t.Errorf("the retried request got other leases (-first +again):\n%s", diff)
	}
	op := &roverv1.ShardOp{Op: &roverv1.ShardOp_Lease{Lease: &roverv1.LeaseShardsRequest{Dataset: "d", Worker: "n/0", Incarnation: 3, RequestId: client | 2, Max: 1}}}
	r, err := c.BatchShards(ctx, connect.NewRequest(&roverv1.BatchShardsRequest{Ops: []*roverv1.ShardOp{op, op}}))
	if err != nil {
		t.Fatal(err)
	}
	x, y := r.Msg.GetResults()[0].GetLease().GetShards(), r.Msg.GetResults()[1].GetLease().GetShards()
	if !cmp.Equal(spans(x), [][2]int64{{20, 30}}) || !cmp.Equal(ids(x), ids(y)) {
		t.Errorf("a request delivered twice in a batch: %v then %v; want [20, 30) twice", spans(x), spans(y))
	}
	_, err = sc.lease("n/0", 3, client|1, 2)
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "stale lease request") {
		t.Errorf("an older request_id: %v, want FailedPrecondition (stale lease request)", err)
	}
	// Once completed, the shards are not handed out again by a repeat.
	if _, err := sc.complete("n/0", 3, ids(x)...); err != nil {
		t.Fatal(err)
	}
	if got, err := sc.lease("n/0", 3, client|2, 1); err != nil || len(got.GetShards()) != 0 || !got.GetWait() {
		t.Errorf("repeat after its shard was completed: %v, %v; want no shards, wait", got, err)
	}
	_, err = sc.lease("n/0", -1, 0, 1)
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("negative incarnation: %v, want InvalidArgument", err)
	}

	checkShardsReplay(t, m, st)
}
