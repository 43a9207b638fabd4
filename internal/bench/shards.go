package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/shardbatch"
	"golang.org/x/sync/errgroup"
)

// ShardsConfig configures the shard-leasing benchmark.
type ShardsConfig struct {
	Clients int
	// Batch is how many shards a client leases per call (an agent batches
	// the requests of its workers).
	Batch    int
	Duration time.Duration
	Conns    int
	Rover    string
	// Agents, when above zero, makes the clients workers of that many
	// simulated node agents: each agent sends its workers' calls to the
	// master through a shardbatch.Batcher, as `rover run` does. At zero
	// every client calls the master itself.
	Agents int
	// Durable gives the master a state dir: every transition is fsynced.
	Durable bool
}

// ShardsResult holds the figures; it is printed as the last line in JSON.
type ShardsResult struct {
	Clients         int     `json:"clients"`
	Batch           int     `json:"batch"`
	Agents          int     `json:"agents,omitempty"`
	Durable         bool    `json:"durable"`
	LeasesPerSecond float64 `json:"leases_per_second"`
	CallsPerSecond  float64 `json:"lease_calls_per_second"`
	// MasterCallsPerSecond counts the RPCs that reached the master: lease
	// and complete calls, or the agents' batches.
	MasterCallsPerSecond float64 `json:"master_calls_per_second"`
	P50LeaseMillis       float64 `json:"p50_lease_ms"`
	P99LeaseMillis       float64 `json:"p99_lease_ms"`
	MasterCPUFraction    float64 `json:"master_cpu_cores"`
	Cores                int     `json:"cores"`
}

// Shards runs the benchmark: Clients simulated agents (or workers of Agents
// simulated agents) lease and complete shards of one dataset against one
// master process for Duration.
func Shards(ctx context.Context, cfg ShardsConfig, w io.Writer) (*ShardsResult, error) {
	if cfg.Clients < 1 {
		return nil, fmt.Errorf("--clients must be at least 1, got %d", cfg.Clients)
	}
	cfg.Batch = max(cfg.Batch, 1)
	if cfg.Duration <= 0 {
		cfg.Duration = 5 * time.Second
	}
	if cfg.Conns <= 0 {
		cfg.Conns = min(cfg.Clients, 16)
	}
	if cfg.Agents < 0 || cfg.Agents > cfg.Clients {
		return nil, fmt.Errorf("--agents must be 0 to --clients (%d), got %d", cfg.Clients, cfg.Agents)
	}
	token := master.NewToken()
	m, err := startMasterProcess(ctx, RendezvousConfig{Rover: cfg.Rover, Durable: cfg.Durable}, token)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	conns, closeClients := m.clients(cfg.Conns, token)
	defer closeClients()
	clients := make([]*countingClient, len(conns))
	for i, c := range conns {
		clients[i] = &countingClient{MasterServiceClient: c}
	}
	spec := &roverv1.DatasetSpec{Name: "bench", Size: 1 << 24, BatchSize: 1, ShardSize: 1, Epochs: 0, Mode: roverv1.ShardMode_SHARD_MODE_LEASED}
	if _, err := clients[0].RegisterDataset(ctx, connect.NewRequest(&roverv1.RegisterDatasetRequest{Dataset: spec})); err != nil {
		return nil, fmt.Errorf("register the dataset: %w", err)
	}
	callers := make([]shardCaller, cfg.Clients)
	bctx, stopBatchers := context.WithCancel(ctx)
	var batchers errgroup.Group
	defer batchers.Wait()
	defer stopBatchers()
	if cfg.Agents == 0 {
		fmt.Fprintf(w, "shard benchmark: %d clients leasing %d shard(s) per call for %s against one master process\n", cfg.Clients, cfg.Batch, cfg.Duration)
		for i := range callers {
			callers[i] = direct{clients[i%len(clients)]}
		}
	} else {
		fmt.Fprintf(w, "shard benchmark: %d workers of %d agents leasing %d shard(s) per call for %s against one master process; each agent batches its workers' calls\n",
			cfg.Clients, cfg.Agents, cfg.Batch, cfg.Duration)
		agents := make([]*shardbatch.Batcher, cfg.Agents)
		for a := range agents {
			agents[a] = shardbatch.New(clients[a%len(clients)], shardbatch.Options{MaxOps: client.MaxBatchOps, InFlight: 2})
			batchers.Go(func() error { agents[a].Run(bctx); return nil })
		}
		for i := range callers {
			callers[i] = agents[i%cfg.Agents]
		}
	}

	var mu sync.Mutex
	var latencies []time.Duration
	leases := 0
	cpu0, _ := m.cpuSeconds()
	rpcs0 := masterCalls(clients)
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < cfg.Clients; i++ {
		c := callers[i]
		worker := fmt.Sprintf("bench-node-%05d/0", i)
		if cfg.Agents > 0 {
			worker = fmt.Sprintf("bench-node-%05d/%d", i%cfg.Agents, i/cfg.Agents)
		}
		g.Go(func() error {
			var lat []time.Duration
			n := 0
			for time.Now().Before(deadline) {
				t0 := time.Now()
				r, err := c.Lease(gctx, &roverv1.LeaseShardsRequest{Dataset: "bench", Worker: worker, Max: int32(cfg.Batch)})
				if err != nil {
					return fmt.Errorf("lease: %w", err)
				}
				lat = append(lat, time.Since(t0))
				results := make([]*roverv1.ShardResult, 0, len(r.GetShards()))
				for _, s := range r.GetShards() {
					results = append(results, &roverv1.ShardResult{LeaseId: s.GetLeaseId(), Ok: true})
				}
				n += len(results)
				if len(results) == 0 {
					continue
				}
				if _, err := c.Complete(gctx, &roverv1.CompleteShardsRequest{Dataset: "bench", Worker: worker, Results: results}); err != nil {
					return fmt.Errorf("complete: %w", err)
				}
			}
			mu.Lock()
			latencies = append(latencies, lat...)
			leases += n
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	elapsed := time.Since(start).Seconds()
	cpu1, _ := m.cpuSeconds()
	rpcs := masterCalls(clients) - rpcs0
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		return float64(latencies[int(p*float64(len(latencies)-1))].Microseconds()) / 1000
	}
	res := &ShardsResult{Durable: cfg.Durable,
		Clients:              cfg.Clients,
		Batch:                cfg.Batch,
		Agents:               cfg.Agents,
		LeasesPerSecond:      round3(float64(leases) / elapsed),
		CallsPerSecond:       round3(float64(len(latencies)) / elapsed),
		MasterCallsPerSecond: round3(float64(rpcs) / elapsed),
		P50LeaseMillis:       pct(0.50),
		P99LeaseMillis:       pct(0.99),
		MasterCPUFraction:    round3((cpu1 - cpu0) / elapsed),
		Cores:                runtime.NumCPU(),
	}
	fmt.Fprintf(w, "leases: %.0f/s in %.0f lease calls/s; lease call latency p50 %.2fms p99 %.2fms; master %.0f calls/s, %.2f cores\n",
		res.LeasesPerSecond, res.CallsPerSecond, res.P50LeaseMillis, res.P99LeaseMillis, res.MasterCallsPerSecond, res.MasterCPUFraction)
	return res, printJSON(w, res)
}

// shardCaller is how a benchmark client leases and completes shards: on the
// master itself, or through its agent's batcher.
type shardCaller interface {
	Lease(context.Context, *roverv1.LeaseShardsRequest) (*roverv1.LeaseShardsResponse, error)
	Complete(context.Context, *roverv1.CompleteShardsRequest) (*roverv1.CompleteShardsResponse, error)
}

var (
	_ shardCaller = direct{}
	_ shardCaller = (*shardbatch.Batcher)(nil)
)

// direct calls the master itself.
type direct struct {
	c roverv1connect.MasterServiceClient
}

func (d direct) Lease(ctx context.Context, req *roverv1.LeaseShardsRequest) (*roverv1.LeaseShardsResponse, error) {
	r, err := d.c.LeaseShards(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return r.Msg, nil
}

func (d direct) Complete(ctx context.Context, req *roverv1.CompleteShardsRequest) (*roverv1.CompleteShardsResponse, error) {
	r, err := d.c.CompleteShards(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return r.Msg, nil
}

// countingClient counts the shard calls that reach the master.
type countingClient struct {
	roverv1connect.MasterServiceClient
	calls atomic.Int64
}

func (c *countingClient) LeaseShards(ctx context.Context, req *connect.Request[roverv1.LeaseShardsRequest]) (*connect.Response[roverv1.LeaseShardsResponse], error) {
	c.calls.Add(1)
	return c.MasterServiceClient.LeaseShards(ctx, req)
}

func (c *countingClient) CompleteShards(ctx context.Context, req *connect.Request[roverv1.CompleteShardsRequest]) (*connect.Response[roverv1.CompleteShardsResponse], error) {
	c.calls.Add(1)
	return c.MasterServiceClient.CompleteShards(ctx, req)
}

func (c *countingClient) BatchShards(ctx context.Context, req *connect.Request[roverv1.BatchShardsRequest]) (*connect.Response[roverv1.BatchShardsResponse], error) {
	c.calls.Add(1)
	return c.MasterServiceClient.BatchShards(ctx, req)
}

func masterCalls(cs []*countingClient) int64 {
	var n int64
	for _, c := range cs {
		n += c.calls.Load()
	}
	return n
}
