package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
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
