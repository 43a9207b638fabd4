package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/shard"
	"golang.org/x/sync/errgroup"
)

// RecoveryConfig configures the master-recovery benchmark.
type RecoveryConfig struct {
	Nodes int
	// Shards is how many shard records the master holds when it dies: half
	// leased and held by the nodes' workers, half completed out of order.
	Shards int
	Rover  string
}

// RecoveryResult holds the figures; it is printed as the last line in JSON.
type RecoveryResult struct {
	Nodes  int `json:"nodes"`
	Shards int `json:"shards"`
	// StateBytes is the size of the state dir when the master was killed.
	StateBytes int64 `json:"state_bytes"`
	// RecoverySeconds runs from starting the new master process to its first
	// answer that shows the whole state.
	RecoverySeconds float64 `json:"recovery_seconds"`
	BuildSeconds    float64 `json:"build_seconds"`
	Cores           int     `json:"cores"`
}

// Recovery runs the benchmark: a durable master process gets Nodes joined
// nodes and a dataset of Shards shards, half held and half completed; it is
// SIGKILLed and started again on the same state dir, and the time until it
// serves the full state is measured.
func Recovery(ctx context.Context, cfg RecoveryConfig, w io.Writer) (*RecoveryResult, error) {
	if cfg.Nodes < 1 || cfg.Shards < 2 {
		return nil, fmt.Errorf("--nodes must be at least 1 and --shards at least 2, got %d and %d", cfg.Nodes, cfg.Shards)
	}
	dir, err := os.MkdirTemp("", "rover-bench-recovery-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	state := filepath.Join(dir, "state")
	token := master.NewToken()
	m, err := launchMaster(cfg.Rover, dir, "127.0.0.1:0", token, "--state-dir", state)
	if err != nil {
		return nil, err
	}
	defer m.kill()
	fmt.Fprintf(w, "recovery benchmark: %d nodes and %d shard records in a durable master, then SIGKILL and restart\n", cfg.Nodes, cfg.Shards)
	start := time.Now()
	clients, closeClients := m.clients(16, token)
	last, err := buildState(ctx, clients, cfg)
	if err != nil {
		closeClients()
		return nil, err
	}
	closeClients()
	build := time.Since(start)
	m.kill()
	size, err := dirSize(state)
	if err != nil {
		return nil, err
	}

	start = time.Now()
	m2, err := launchMaster(cfg.Rover, dir, m.addr, token, "--state-dir", state)
	if err != nil {
		return nil, err
	}
	defer m2.kill()
	clients, closeClients = m2.clients(1, token)
	defer closeClients()
	for {
		ok, err := recovered(ctx, clients[0], cfg, last)
		if err != nil {
			return nil, err
		}
		if ok {
			break
		}
		if time.Since(start) > time.Minute {
			return nil, fmt.Errorf("the restarted master did not show the whole state within a minute")
		}
	}
	res := &RecoveryResult{Nodes: cfg.Nodes, Shards: cfg.Shards, StateBytes: size,
		RecoverySeconds: time.Since(start).Seconds(), BuildSeconds: build.Seconds(), Cores: runtime.NumCPU()}
	fmt.Fprintf(w, "state: %.1f MB built in %.1fs; recovery (process start to serving the whole state): %.3fs\n",
		float64(size)/1e6, res.BuildSeconds, res.RecoverySeconds)
	return res, printJSON(w, res)
}

const (
	recoveryDataset = "recovery"
	leasePerCall    = shard.MaxLeaseShards
)

// heldLease is a lease a worker holds.
type heldLease struct {
	worker string
	id     uint64
}

// buildState joins the nodes, registers the dataset and leases every shard,
// completing every other one. It returns the held lease of the highest ID.
func buildState(ctx context.Context, clients []roverv1connect.MasterServiceClient, cfg RecoveryConfig) (heldLease, error) {
	var mu sync.Mutex
	var last heldLease
	rdzv := &roverv1.RendezvousConfig{
		MinNodes: int32(cfg.Nodes), MaxNodes: int32(cfg.Nodes), NodeUnit: 1,
		LastCallMillis: 30_000, JoinTimeoutMillis: 600_000,
		HeartbeatTimeoutMillis: 600_000, DisconnectGraceMillis: 600_000,
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(64)
	for i := range cfg.Nodes {
		g.Go(func() error {
			_, err := clients[i%len(clients)].Join(gctx, connect.NewRequest(&roverv1.JoinRequest{
				NodeId: nodeName(i), RequestedRank: -1, LocalWorldSize: 8, Addr: "127.0.0.1", Rendezvous: rdzv}))
			if err != nil {
				return fmt.Errorf("join %s: %w", nodeName(i), err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return last, err
	}
	_, err := clients[0].RegisterDataset(ctx, connect.NewRequest(&roverv1.RegisterDatasetRequest{Dataset: &roverv1.DatasetSpec{
		Name: recoveryDataset, Size: int64(cfg.Shards), BatchSize: 1, ShardSize: 1, Epochs: 1}}))
	if err != nil {
		return last, fmt.Errorf("register the dataset: %w", err)
	}
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(16)
	calls := (cfg.Shards + leasePerCall - 1) / leasePerCall
	for i := range calls {
		g.Go(func() error {
			c := clients[i%len(clients)]
			worker := nodeName(i%cfg.Nodes) + "/0"
			resp, err := c.LeaseShards(gctx, connect.NewRequest(&roverv1.LeaseShardsRequest{Dataset: recoveryDataset, Worker: worker, Max: int32(leasePerCall)}))
			if err != nil {
				return fmt.Errorf("lease: %w", err)
			}
			var results []*roverv1.ShardResult
			for j, s := range resp.Msg.GetShards() {
				if j%2 == 0 {
					results = append(results, &roverv1.ShardResult{LeaseId: s.GetLeaseId(), Ok: true})
					continue
				}
				mu.Lock()
				if s.GetLeaseId() > last.id {
					last = heldLease{worker: worker, id: s.GetLeaseId()}
				}
				mu.Unlock()
			}
			if len(results) == 0 {
				return nil
			}
			_, err = c.CompleteShards(gctx, connect.NewRequest(&roverv1.CompleteShardsRequest{Dataset: recoveryDataset, Worker: worker, Results: results}))
			if err != nil {
				return fmt.Errorf("complete: %w", err)
			}
			return nil
		})
	}
	return last, g.Wait()
}

func nodeName(i int) string { return fmt.Sprintf("bench-node-%05d", i) }

// recovered asks the restarted master for the job and the dataset: true
// once both show everything the killed master held.
func recovered(ctx context.Context, c roverv1connect.MasterServiceClient, cfg RecoveryConfig, last heldLease) (bool, error) {
	job, err := c.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
	if err != nil {
		return false, nil // not serving yet
	}
	if len(job.Msg.GetNodes()) != cfg.Nodes || job.Msg.GetRound() < 1 || job.Msg.GetRoundOpen() {
		return false, fmt.Errorf("the restarted master shows %d nodes in round %d (open %v), want %d in a closed round",
			len(job.Msg.GetNodes()), job.Msg.GetRound(), job.Msg.GetRoundOpen(), cfg.Nodes)
	}
	// The newest lease held when the master died must still be held.
	resp, err := c.CompleteShards(ctx, connect.NewRequest(&roverv1.CompleteShardsRequest{Dataset: recoveryDataset,
		Worker: last.worker, Results: []*roverv1.ShardResult{{LeaseId: last.id, Ok: true}}}))
	if err != nil {
		return false, fmt.Errorf("complete lease %d after the restart: %w", last.id, err)
	}
	if len(resp.Msg.GetUnknown()) > 0 {
		return false, fmt.Errorf("the restarted master lost lease %d of %s", last.id, last.worker)
	}
	return true, nil
}

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			n += info.Size()
		}
		return err
	})
	return n, err
}
