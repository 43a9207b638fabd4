package agent

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/runconfig"
	"github.com/roverml/rover/internal/shardbatch"
)

// gateMaster holds the batches that reach it, before the master sees them
// (arrived) or after it applied them (applied), until the test releases
// them; a nil channel lets batches through.
type gateMaster struct {
	roverv1connect.MasterServiceClient
	arrived, applied chan []*roverv1.ShardOp // the held batch
	release          chan struct{}
	// hook, if set, sees every batch before the master does and after it
	// applied it.
	hook func(ops []*roverv1.ShardOp, applied bool)
}

func (m *gateMaster) BatchShards(ctx context.Context, req *connect.Request[roverv1.BatchShardsRequest]) (*connect.Response[roverv1.BatchShardsResponse], error) {
	if m.hook != nil {
		m.hook(req.Msg.GetOps(), false)
	}
	if m.arrived != nil {
		m.arrived <- req.Msg.GetOps()
		<-m.release
	}
	resp, err := m.MasterServiceClient.BatchShards(ctx, req)
	if m.hook != nil {
		m.hook(req.Msg.GetOps(), true)
	}
	if m.applied != nil {
		m.applied <- req.Msg.GetOps()
		<-m.release
	}
	return resp, err
}

// deadWorkerRig is a real master behind a gate, and an agent's local API
// with its batcher, as node "n" with nproc workers in round 1, and
// dataset "d" of size samples in shards of 10, for epochs epochs.
type deadWorkerRig struct {
	t    *testing.T
	ctx  context.Context
	gate *gateMaster
	b    *shardbatch.Batcher
	l    *localAPI
	api  roverv1connect.AgentServiceClient
}

func newDeadWorkerRig(t *testing.T, nproc int, size int64, epochs int32) *deadWorkerRig {
	return newDeadWorkerRigOpts(t, nproc, size, epochs, shardbatch.Options{MaxOps: master.MaxBatchOps}, nil)
}

// newDeadWorkerRigOpts is newDeadWorkerRig with the batcher's options and
// a hook on the batches.
func newDeadWorkerRigOpts(t *testing.T, nproc int, size int64, epochs int32, opts shardbatch.Options, hook func([]*roverv1.ShardOp, bool)) *deadWorkerRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := master.New(ctx, master.Config{Listen: "127.0.0.1:0", Token: "t", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { mdone <- m.Run(mctx) }()
	hc := client.NewHTTPClient()
	gate := &gateMaster{MasterServiceClient: client.New(hc, m.Addr(), "t"), hook: hook}
	cfg := runconfig.Config{NprocPerNode: nproc}
	a := &agent{cfg: &cfg, log: log, nodeID: "n", client: gate}
	a.shards = shardbatch.New(gate, opts)
	bctx, bstop := context.WithCancel(ctx)
	bdone := make(chan struct{})
	go func() { defer close(bdone); a.shards.Run(bctx) }()
	l, err := a.startLocalAPI()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.close()
		bstop()
		<-bdone
		hc.CloseIdleConnections()
		stop()
		<-mdone
	})
	l.current.Store(&placement{Round: 1, NodeID: "n", LocalWorldSize: 2})
	r := &deadWorkerRig{t: t, ctx: ctx, gate: gate, b: a.shards, l: l,
		api: roverv1connect.NewAgentServiceClient(unixClient(l.socket), "http://agent")}
	if _, err := r.api.RegisterDataset(ctx, connect.NewRequest(&roverv1.RegisterDatasetRequest{Dataset: &roverv1.DatasetSpec{
		Name: "d", Size: size, BatchSize: 1, ShardSize: 10, Epochs: epochs, Mode: roverv1.ShardMode_SHARD_MODE_LEASED}})); err != nil {
		t.Fatal(err)
	}
	return r
}

// lease leases up to max shards for local rank w of incarnation inc, and
// returns their spans and lease IDs.
func (r *deadWorkerRig) lease(ctx context.Context, w string, inc, max int64) ([][2]int64, []uint64, *roverv1.LeaseShardsResponse) {
	r.t.Helper()
	resp, err := r.api.LeaseShards(ctx, connect.NewRequest(&roverv1.LeaseShardsRequest{Dataset: "d", Worker: w, Incarnation: inc, Max: int32(max)}))
	if err != nil {
		r.t.Fatalf("lease for worker %s of incarnation %d: %v", w, inc, err)
	}
	var spans [][2]int64
	var ids []uint64
	for _, s := range resp.Msg.GetShards() {
		spans = append(spans, [2]int64{s.GetStart(), s.GetEnd()})
		ids = append(ids, s.GetLeaseId())
	}
	return spans, ids, resp.Msg
}

func completeReq(w string, inc int64, ids ...uint64) *connect.Request[roverv1.CompleteShardsRequest] {
	req := &roverv1.CompleteShardsRequest{Dataset: "d", Worker: w, Incarnation: inc}
	for _, id := range ids {
		req.Results = append(req.Results, &roverv1.ShardResult{LeaseId: id, Ok: true})
	}
	return connect.NewRequest(req)
}

// restart is the worker's next process: round 2 takes over, and its
// first lease returns what the earlier process still held. It completes
// everything it gets; then the dataset must be finished.
func (r *deadWorkerRig) restart(w string, want [][2]int64) {
	r.t.Helper()
	r.l.current.Store(&placement{Round: 2, NodeID: "n", LocalWorldSize: 2})
	got, ids, _ := r.lease(r.ctx, w, 2, 3)
	if !cmp.Equal(got, want) {
		r.t.Errorf("the restarted worker got %v, want %v: what its dead predecessor held and did not complete", got, want)
	}
	if len(ids) > 0 {
		if _, err := r.api.CompleteShards(r.ctx, completeReq(w, 2, ids...)); err != nil {
			r.t.Fatal(err)
		}
	}
	if _, _, resp := r.lease(r.ctx, w, 2, 3); !resp.GetEnd() {
		r.t.Errorf("after the restarted worker completed its shards the dataset is not finished: %v", resp)
	}
}

// A worker dies while its completion is on its way through the agent. Its
// process's request ends with its connection; what happens to the
// completion depends on where it was, and either way no shard is lost or
// handed out twice.
func TestWorkerDiesCompleting(t *testing.T) {
	// Queued in the agent behind another worker's batch: the completion is
	// taken out of the queue, never reaches the master, and the shard goes
	// to the worker's next process.
	t.Run("queued", func(t *testing.T) {
		r := newDeadWorkerRig(t, 2, 30, 1)
		spans, ids, _ := r.lease(r.ctx, "0", 1, 2)
		if !cmp.Equal(spans, [][2]int64{{0, 10}, {10, 20}}) {
			t.Fatalf("worker 0 leased %v", spans)
		}
		r.gate.arrived, r.gate.release = make(chan []*roverv1.ShardOp), make(chan struct{})
		other := make(chan *roverv1.LeaseShardsResponse, 1)
		go func() {
			resp, err := r.api.LeaseShards(r.ctx, connect.NewRequest(&roverv1.LeaseShardsRequest{Dataset: "d", Worker: "1", Incarnation: 1, Max: 1}))
			if err != nil {
				t.Error(err)
				other <- &roverv1.LeaseShardsResponse{}
				return
			}
			other <- resp.Msg
		}()
		<-r.gate.arrived // worker 1's lease is on its way to the master
		wctx, die := context.WithCancel(r.ctx)
		dead := make(chan error, 1)
		go func() { _, err := r.api.CompleteShards(wctx, completeReq("0", 1, ids[0])); dead <- err }()
		waitCond(t, "worker 0's completion to queue behind the batch in flight", func() bool { return r.b.Queued() == 1 })
		die() // the process dies: its connection closes
		if err := <-dead; err == nil {
			t.Fatal("a dead worker's completion was answered")
		}
		waitCond(t, "the dead worker's completion to leave the queue", func() bool { return r.b.Queued() == 0 })
		r.gate.arrived = nil
		close(r.gate.release)
		got := (<-other).GetShards()
		if len(got) != 1 || got[0].GetStart() != 20 {
			t.Fatalf("worker 1 leased %v, want the third shard", got)
		}
		if _, err := r.api.CompleteShards(r.ctx, completeReq("1", 1, got[0].GetLeaseId())); err != nil {
			t.Fatal(err)
		}
		r.restart("0", [][2]int64{{0, 10}, {10, 20}})
	})
	// Sent and applied, and the worker dies before the answer reaches it:
	// the shard is done, and only the one it did not complete goes to its
	// next process.
	t.Run("sent", func(t *testing.T) {
		r := newDeadWorkerRig(t, 2, 30, 1)
		_, ids, _ := r.lease(r.ctx, "0", 1, 2)
		r.gate.applied, r.gate.release = make(chan []*roverv1.ShardOp), make(chan struct{})
		wctx, die := context.WithCancel(r.ctx)
		dead := make(chan error, 1)
		go func() { _, err := r.api.CompleteShards(wctx, completeReq("0", 1, ids[0])); dead <- err }()
		ops := <-r.gate.applied // the master took the completion
		if len(ops) != 1 || ops[0].GetComplete() == nil {
			t.Fatalf("the batch held %v, want worker 0's completion", ops)
		}
		die()
		if err := <-dead; err == nil {
			t.Fatal("a dead worker's completion was answered")
		}
		r.gate.applied = nil
		close(r.gate.release)
		// The third shard is still queued behind the second.
		r.restart("0", [][2]int64{{10, 20}, {20, 30}})
	})
}

// waitCond waits for cond, polling, for up to a generous deadline.
func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
