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
	// Size, ShardSize and Shuffle describe the dataset leased from
	// (defaults: 2^24 samples, shards of 1, unshuffled).
	Size      int64
	ShardSize int64
	Shuffle   bool
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
	Size                 int64   `json:"size"`
	ShardSize            int64   `json:"shard_size"`
	Shuffle              bool    `json:"shuffle"`
	// RegisterMillis and FirstLeaseMillis time the dataset's registration
	// and the first lease from it, before the clients start.
	RegisterMillis   float64 `json:"register_ms"`
	FirstLeaseMillis float64 `json:"first_lease_ms"`
	// GetJob is called in a loop, one call at a time, while the clients
	// lease: it waits for the master's lock like any call.
	GetJobCalls     int     `json:"getjob_calls"`
	P50GetJobMillis float64 `json:"p50_getjob_ms"`
	P99GetJobMillis float64 `json:"p99_getjob_ms"`
	MaxGetJobMillis float64 `json:"max_getjob_ms"`
	MasterPeakRSS   int64   `json:"master_peak_rss_bytes"`
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
	if cfg.Size <= 0 {
		cfg.Size = 1 << 24
	}
	cfg.ShardSize = max(cfg.ShardSize, 1)
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
	// GetJob is probed from the start, on a connection of its own: it
	// waits for the master's lock while the dataset is registered and
	// leased from, and for nothing else.
	probeConn, closeProbe := m.clients(1, token)
	defer closeProbe()
	probe, stopProbe := context.WithCancel(ctx)
	var prober sync.WaitGroup
	var jobLatencies []time.Duration
	prober.Go(func() { jobLatencies = probeGetJob(probe, probeConn[0]) })
	defer prober.Wait()
	defer stopProbe()
	spec := &roverv1.DatasetSpec{Name: "bench", Size: cfg.Size, BatchSize: 1, ShardSize: cfg.ShardSize, Epochs: 0,
		Shuffle: cfg.Shuffle, Seed: 1, Mode: roverv1.ShardMode_SHARD_MODE_LEASED}
	t0 := time.Now()
	if _, err := clients[0].RegisterDataset(ctx, connect.NewRequest(&roverv1.RegisterDatasetRequest{Dataset: spec})); err != nil {
		return nil, fmt.Errorf("register the dataset: %w", err)
	}
	registered := time.Since(t0)
	first, err := firstLease(ctx, clients[0])
	if err != nil {
		return nil, err
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
	err = g.Wait()
	stopProbe()
	prober.Wait()
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start).Seconds()
	cpu1, _ := m.cpuSeconds()
	rss, _ := m.rssBytes()
	rpcs := masterCalls(clients) - rpcs0
	slices.Sort(latencies)
	pct := func(p float64) float64 { return percentile(latencies, p) }
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
		Size:                 cfg.Size,
		ShardSize:            cfg.ShardSize,
		Shuffle:              cfg.Shuffle,
		RegisterMillis:       millis(registered),
		FirstLeaseMillis:     millis(first),
		GetJobCalls:          len(jobLatencies),
		P50GetJobMillis:      percentile(jobLatencies, 0.50),
		P99GetJobMillis:      percentile(jobLatencies, 0.99),
		MaxGetJobMillis:      percentile(jobLatencies, 1),
		MasterPeakRSS:        rss,
	}
	fmt.Fprintf(w, "leases: %.0f/s in %.0f lease calls/s; lease call latency p50 %.2fms p99 %.2fms; master %.0f calls/s, %.2f cores\n",
		res.LeasesPerSecond, res.CallsPerSecond, res.P50LeaseMillis, res.P99LeaseMillis, res.MasterCallsPerSecond, res.MasterCPUFraction)
	fmt.Fprintf(w, "dataset of %d samples (shuffled: %v), shards of %d: registered in %.2fms, first lease in %.2fms; GetJob p50 %.2fms p99 %.2fms max %.2fms (%d calls); master peak RSS %.1f MiB\n",
		res.Size, res.Shuffle, res.ShardSize, res.RegisterMillis, res.FirstLeaseMillis, res.P50GetJobMillis, res.P99GetJobMillis,
		res.MaxGetJobMillis, res.GetJobCalls, float64(rss)/(1<<20))
	return res, printJSON(w, res)
}

// firstLease times one lease of the dataset and completes it.
func firstLease(ctx context.Context, c roverv1connect.MasterServiceClient) (time.Duration, error) {
	t0 := time.Now()
	r, err := c.LeaseShards(ctx, connect.NewRequest(&roverv1.LeaseShardsRequest{Dataset: "bench", Worker: "bench-first/0", Max: 1}))
	took := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("first lease: %w", err)
	}
	for _, s := range r.Msg.GetShards() {
		if _, err := c.CompleteShards(ctx, connect.NewRequest(&roverv1.CompleteShardsRequest{Dataset: "bench", Worker: "bench-first/0",
			Results: []*roverv1.ShardResult{{LeaseId: s.GetLeaseId(), Ok: true}}})); err != nil {
			return 0, fmt.Errorf("complete the first lease: %w", err)
		}
	}
	return took, nil
}

// probeGetJob calls GetJob one call at a time, every millisecond, until ctx
// is done, and returns the latencies, sorted.
func probeGetJob(ctx context.Context, c roverv1connect.MasterServiceClient) []time.Duration {
	var out []time.Duration
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			slices.Sort(out)
			return out
		case <-tick.C:
		}
		t0 := time.Now()
		if _, err := c.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{})); err != nil {
			continue // cancelled at the end
		}
		out = append(out, time.Since(t0))
	}
}

// percentile returns the p-th (0 to 1) of sorted latencies, in milliseconds.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return millis(sorted[int(p*float64(len(sorted)-1))])
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

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
