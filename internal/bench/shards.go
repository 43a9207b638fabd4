package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/master"
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
}

// ShardsResult holds the figures; it is printed as the last line in JSON.
type ShardsResult struct {
	Clients           int     `json:"clients"`
	Batch             int     `json:"batch"`
	LeasesPerSecond   float64 `json:"leases_per_second"`
	CallsPerSecond    float64 `json:"lease_calls_per_second"`
	P50LeaseMillis    float64 `json:"p50_lease_ms"`
	P99LeaseMillis    float64 `json:"p99_lease_ms"`
	MasterCPUFraction float64 `json:"master_cpu_cores"`
	Cores             int     `json:"cores"`
}

// Shards runs the benchmark: Clients simulated agents lease and complete
// shards of one dataset against one master process for Duration.
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
	token := master.NewToken()
	m, err := startMasterProcess(ctx, RendezvousConfig{Rover: cfg.Rover}, token)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	clients, closeClients := m.clients(cfg.Conns, token)
	defer closeClients()
	spec := &roverv1.DatasetSpec{Name: "bench", Size: 1 << 24, BatchSize: 1, ShardSize: 1, Epochs: 0, Mode: roverv1.ShardMode_SHARD_MODE_LEASED}
	if _, err := clients[0].RegisterDataset(ctx, connect.NewRequest(&roverv1.RegisterDatasetRequest{Dataset: spec})); err != nil {
		return nil, fmt.Errorf("register the dataset: %w", err)
	}
	fmt.Fprintf(w, "shard benchmark: %d clients leasing %d shard(s) per call for %s against one master process\n", cfg.Clients, cfg.Batch, cfg.Duration)

	var mu sync.Mutex
	var latencies []time.Duration
	leases := 0
	cpu0, _ := m.cpuSeconds()
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < cfg.Clients; i++ {
		c := clients[i%len(clients)]
		worker := fmt.Sprintf("bench-node-%05d/0", i)
		g.Go(func() error {
			var lat []time.Duration
			n := 0
			for time.Now().Before(deadline) {
				t0 := time.Now()
				r, err := c.LeaseShards(gctx, connect.NewRequest(&roverv1.LeaseShardsRequest{Dataset: "bench", Worker: worker, Max: int32(cfg.Batch)}))
				if err != nil {
					return fmt.Errorf("lease: %w", err)
				}
				lat = append(lat, time.Since(t0))
				results := make([]*roverv1.ShardResult, 0, len(r.Msg.GetShards()))
				for _, s := range r.Msg.GetShards() {
					results = append(results, &roverv1.ShardResult{LeaseId: s.GetLeaseId(), Ok: true})
				}
				n += len(results)
				if len(results) == 0 {
					continue
				}
				if _, err := c.CompleteShards(gctx, connect.NewRequest(&roverv1.CompleteShardsRequest{Dataset: "bench", Worker: worker, Results: results})); err != nil {
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
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		return float64(latencies[int(p*float64(len(latencies)-1))].Microseconds()) / 1000
	}
	res := &ShardsResult{
		Clients:           cfg.Clients,
		Batch:             cfg.Batch,
		LeasesPerSecond:   round3(float64(leases) / elapsed),
		CallsPerSecond:    round3(float64(len(latencies)) / elapsed),
		P50LeaseMillis:    pct(0.50),
		P99LeaseMillis:    pct(0.99),
		MasterCPUFraction: round3((cpu1 - cpu0) / elapsed),
		Cores:             runtime.NumCPU(),
	}
	fmt.Fprintf(w, "leases: %.0f/s in %.0f lease calls/s; lease call latency p50 %.2fms p99 %.2fms; master %.2f cores\n",
		res.LeasesPerSecond, res.CallsPerSecond, res.P50LeaseMillis, res.P99LeaseMillis, res.MasterCPUFraction)
	return res, printJSON(w, res)
}
