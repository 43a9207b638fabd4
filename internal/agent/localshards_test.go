package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/roverml/rover/sdk/go/rover"
	"golang.org/x/sync/errgroup"
)

// countingMaster counts the shard calls that reach the master, and makes
// each batch take a little longer, as a busy master or a longer network
// path would.
type countingMaster struct {
	roverv1connect.MasterServiceClient
	delay            time.Duration
	batches, ops     atomic.Int64
	leases, complete atomic.Int64
}

func (m *countingMaster) BatchShards(ctx context.Context, req *connect.Request[roverv1.BatchShardsRequest]) (*connect.Response[roverv1.BatchShardsResponse], error) {
	m.batches.Add(1)
	m.ops.Add(int64(len(req.Msg.GetOps())))
	time.Sleep(m.delay)
	return m.MasterServiceClient.BatchShards(ctx, req)
}

func (m *countingMaster) LeaseShards(ctx context.Context, req *connect.Request[roverv1.LeaseShardsRequest]) (*connect.Response[roverv1.LeaseShardsResponse], error) {
	m.leases.Add(1)
	return m.MasterServiceClient.LeaseShards(ctx, req)
}

func (m *countingMaster) CompleteShards(ctx context.Context, req *connect.Request[roverv1.CompleteShardsRequest]) (*connect.Response[roverv1.CompleteShardsResponse], error) {
	m.complete.Add(1)
	return m.MasterServiceClient.CompleteShards(ctx, req)
}

// TestConcurrentShardCallsAreBatched runs 32 Go SDK workers against one
// agent's local API and a real master: their concurrent lease and complete
// calls reach the master in a few BatchShards calls, and every worker gets
// its own answers (each sample is trained exactly once).
func TestConcurrentShardCallsAreBatched(t *testing.T) {
	const workers, size, shardSize = 32, 3200, 10
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := master.New(ctx, master.Config{Listen: "127.0.0.1:0", Token: "t", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var bg errgroup.Group
	defer bg.Wait()
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	bg.Go(func() error { return m.Run(mctx) })
	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	counter := &countingMaster{MasterServiceClient: client.New(hc, m.Addr(), "t"), delay: 2 * time.Millisecond}
	a := &agent{cfg: &runconfig.Config{NprocPerNode: workers}, log: log, nodeID: "node-a", client: counter}
	a.shards = shardbatch.New(counter, shardbatch.Options{MaxOps: master.MaxBatchOps})
	bg.Go(func() error { a.shards.Run(mctx); return nil })
	l, err := a.startLocalAPI()
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()

	var mu sync.Mutex
	count := map[int64]int{}
	var calls atomic.Int64
	var g errgroup.Group
	for rank := range workers {
		g.Go(func() error {
			c, err := rover.ConnectSocket(l.socket, fmt.Sprint(rank))
			if err != nil {
				return err
			}
			ds, err := c.Dataset(ctx, rover.DatasetSpec{Name: "d", Size: size, ShardSize: shardSize, Epochs: 1})
			if err != nil {
				return err
			}
			ds.Poll = 5 * time.Millisecond
			for {
				s, err := ds.Next(ctx)
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				ok, err := ds.Complete(ctx, s, true)
				if err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("rank %d: the master forgot lease %d", rank, s.LeaseID)
				}
				calls.Add(2)
				mu.Lock()
				for _, i := range s.Indices() {
					count[i]++
				}
				mu.Unlock()
			}
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for i := range int64(size) {
		if count[i] != 1 {
			t.Fatalf("sample %d trained %d times, want once", i, count[i])
		}
	}
	if n := counter.leases.Load() + counter.complete.Load(); n != 0 {
		t.Errorf("%d lease or complete calls reached the master alone", n)
	}
	batches, ops := counter.batches.Load(), counter.ops.Load()
	t.Logf("%d worker calls (%d of them leased or completed a shard) reached the master in %d batches", ops, calls.Load(), batches)
	if ops < calls.Load() {
		t.Errorf("the master saw %d ops, fewer than the %d calls that got a shard", ops, calls.Load())
	}
	if batches*4 > ops {
		t.Errorf("%d ops in %d batches: the agent should batch concurrent calls (at least 4 a batch on average)", ops, batches)
	}
}

// recordingMaster records the shard ops that reach the master.
type recordingMaster struct {
	roverv1connect.MasterServiceClient
	mu  sync.Mutex
	ops []*roverv1.ShardOp
}

func (m *recordingMaster) BatchShards(ctx context.Context, req *connect.Request[roverv1.BatchShardsRequest]) (*connect.Response[roverv1.BatchShardsResponse], error) {
	m.mu.Lock()
	m.ops = append(m.ops, req.Msg.GetOps()...)
	m.mu.Unlock()
	return m.MasterServiceClient.BatchShards(ctx, req)
}

func (m *recordingMaster) take() []*roverv1.ShardOp {
	m.mu.Lock()
	defer m.mu.Unlock()
	ops := m.ops
	m.ops = nil
	return ops
}

// startAgentAPI serves an agent's local API in front of client, as node
// "node-a" with two workers.
func startAgentAPI(t *testing.T, client roverv1connect.MasterServiceClient, cfg runconfig.Config) *localAPI {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.NprocPerNode = 2
	a := &agent{cfg: &cfg, log: log, nodeID: "node-a", client: client}
	a.shards = shardbatch.New(client, shardbatch.Options{MaxOps: master.MaxBatchOps})
	done := make(chan struct{})
	go func() { defer close(done); a.shards.Run(ctx) }()
	l, err := a.startLocalAPI()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.close(); cancel(); <-done })
	return l
}

// TestWorkerIncarnationReachesMaster: a worker started by the agent (its
// environment from workerEnv) sends ROVER_WORKER_INCARNATION and numbered
// lease requests, and the agent forwards both to the master; a client
// that sends no incarnation gets the worker group's round; a process of an
// earlier round is told to stop.
func TestWorkerIncarnationReachesMaster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := master.New(ctx, master.Config{Listen: "127.0.0.1:0", Token: "t", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(mctx) }()
	defer func() { stop(); <-done }()
	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	rec := &recordingMaster{MasterServiceClient: client.New(hc, m.Addr(), "t")}
	l := startAgentAPI(t, rec, runconfig.Config{})
	p := placement{Round: 5, LocalRank: 1, LocalWorldSize: 2, NodeID: "node-a"}
	l.current.Store(&p)

	env := map[string]string{}
	for _, kv := range workerEnv(nil, p) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if env["ROVER_WORKER_INCARNATION"] != "5" {
		t.Fatalf("worker environment has ROVER_WORKER_INCARNATION=%q, want the round, 5", env["ROVER_WORKER_INCARNATION"])
	}
	t.Setenv("ROVER_AGENT_SOCKET", l.socket)
	t.Setenv("LOCAL_RANK", env["LOCAL_RANK"])
	t.Setenv("ROVER_WORKER_INCARNATION", env["ROVER_WORKER_INCARNATION"])
	c, err := rover.Connect()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := c.Dataset(ctx, rover.DatasetSpec{Name: "d", Size: 100, ShardSize: 10, Epochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	s1, err := ds.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ds.Complete(ctx, s1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := ds.Next(ctx); err != nil {
		t.Fatal(err)
	}
	ops := rec.take()
	if len(ops) != 3 {
		t.Fatalf("the master saw %d ops, want lease, complete, lease: %v", len(ops), ops)
	}
	l1, c1, l2 := ops[0].GetLease(), ops[1].GetComplete(), ops[2].GetLease()
	if l1.GetWorker() != "node-a/1" || l1.GetIncarnation() != 5 || c1.GetIncarnation() != 5 || l2.GetIncarnation() != 5 {
		t.Errorf("the master saw worker %q, incarnations %d, %d, %d; want node-a/1 and 5", l1.GetWorker(), l1.GetIncarnation(), c1.GetIncarnation(), l2.GetIncarnation())
	}
	if id1, id2 := l1.GetRequestId(), l2.GetRequestId(); id1 == 0 || id2 != id1+1 {
		t.Errorf("lease request IDs %x then %x: want numbered, one client counting up", id1, id2)
	}

	// An older client, without an incarnation: the group's round.
	old, err := rover.ConnectSocket(l.socket, "0")
	if err != nil {
		t.Fatal(err)
	}
	ods, err := old.Dataset(ctx, rover.DatasetSpec{Name: "d", Size: 100, ShardSize: 10, Epochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ods.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if ops := rec.take(); len(ops) != 1 || ops[0].GetLease().GetIncarnation() != 5 || ops[0].GetLease().GetWorker() != "node-a/0" {
		t.Errorf("a lease without an incarnation reached the master as %v; want node-a/0 of round 5", ops)
	}

	// A process of round 4, after round 5's took over: told to stop. One
	// that claims a round the agent has not started: refused by the agent.
	for inc, want := range map[string]connect.Code{"4": connect.CodeFailedPrecondition, "6": connect.CodeInvalidArgument} {
		t.Setenv("ROVER_WORKER_INCARNATION", inc)
		c, err := rover.Connect()
		if err != nil {
			t.Fatal(err)
		}
		ds, err := c.Dataset(ctx, rover.DatasetSpec{Name: "d", Size: 100, ShardSize: 10, Epochs: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ds.Next(ctx); connect.CodeOf(err) != want {
			t.Errorf("lease from incarnation %s: %v, want %v", inc, err, want)
		}
	}
}

// flakyMaster answers shard calls with Unavailable until fails runs out,
// then with a lease of [0, 10); it records every request ID it saw.
type flakyMaster struct {
	roverv1connect.MasterServiceClient
	mu      sync.Mutex
	fails   int
	ids     []uint64
	appends int
}

func (m *flakyMaster) BatchShards(ctx context.Context, req *connect.Request[roverv1.BatchShardsRequest]) (*connect.Response[roverv1.BatchShardsResponse], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var res []*roverv1.ShardOpResult
	for _, op := range req.Msg.GetOps() {
		m.ids = append(m.ids, op.GetLease().GetRequestId())
		res = append(res, &roverv1.ShardOpResult{Result: &roverv1.ShardOpResult_Lease{Lease: &roverv1.LeaseShardsResponse{
			Shards: []*roverv1.Shard{{LeaseId: 1, Start: 0, End: 10}}}}})
	}
	if m.fails > 0 {
		m.fails--
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("connection refused"))
	}
	return connect.NewResponse(&roverv1.BatchShardsResponse{Results: res}), nil
}

func (m *flakyMaster) AppendStream(context.Context, *connect.Request[roverv1.AppendStreamRequest]) (*connect.Response[roverv1.AppendStreamResponse], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.appends++
	return nil, connect.NewError(connect.CodeUnavailable, errors.New("connection refused"))
}

// TestShardCallsWaitForMaster: while the master is unreachable, the agent
// holds a worker's lease and sends it again, with the same request ID,
// until the master answers.
func TestShardCallsWaitForMaster(t *testing.T) {
	fm := &flakyMaster{fails: 3}
	l := startAgentAPI(t, fm, runconfig.Config{MasterTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	api := roverv1connect.NewAgentServiceClient(unixClient(l.socket), "http://agent")
	r, err := api.LeaseShards(ctx, connect.NewRequest(&roverv1.LeaseShardsRequest{Dataset: "d", Worker: "1", Incarnation: 0, RequestId: 7<<32 | 1, Max: 1}))
	if err != nil {
		t.Fatalf("the lease failed while the master came back: %v", err)
	}
	if len(r.Msg.GetShards()) != 1 {
		t.Fatalf("lease answered %v", r.Msg)
	}
	want := []uint64{7<<32 | 1, 7<<32 | 1, 7<<32 | 1, 7<<32 | 1}
	if diff := cmp.Diff(want, fm.ids); diff != "" {
		t.Errorf("request IDs the master saw (-want +got):\n%s", diff)
	}
}

// TestShardCallsGiveUpAtHeartbeatTimeout: a master unreachable for the
// agent's heartbeat timeout fails the call, naming the master and the
// timeout; a stream append, which must not be sent twice, fails at once.
func TestShardCallsGiveUpAtHeartbeatTimeout(t *testing.T) {
	fm := &flakyMaster{fails: 1 << 30}
	l := startAgentAPI(t, fm, runconfig.Config{MasterTimeout: 300 * time.Millisecond, RdzvEndpoint: "master.example:7000"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	api := roverv1connect.NewAgentServiceClient(unixClient(l.socket), "http://agent")
	_, err := api.LeaseShards(ctx, connect.NewRequest(&roverv1.LeaseShardsRequest{Dataset: "d", Worker: "0", RequestId: 9, Max: 1}))
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded || !strings.Contains(err.Error(), "master.example:7000") || !strings.Contains(err.Error(), "heartbeat timeout (300ms)") {
		t.Errorf("lease with the master away: %v; want DeadlineExceeded naming the master and the heartbeat timeout", err)
	}
	if len(fm.ids) < 2 {
		t.Errorf("the agent tried %d times, want retries", len(fm.ids))
	}
	_, err = api.AppendStream(ctx, connect.NewRequest(&roverv1.AppendStreamRequest{Dataset: "s", Samples: 5}))
	if connect.CodeOf(err) != connect.CodeUnavailable || fm.appends != 1 {
		t.Errorf("append with the master away: %v after %d tries; want Unavailable after 1", err, fm.appends)
	}
}

func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
}
