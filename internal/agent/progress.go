package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// progressBook sums the workers' progress reports (ReportProgress) between
// the heartbeats that carry them to the master: however often workers
// report, the master hears from this node at most once per progress tick
// (heartbeats.go's progressInterval) plus the regular heartbeats.
type progressBook struct {
	mu      sync.Mutex
	round   int64
	workers map[int32]*roverv1.WorkerProgress // by local rank, since the last take
	// ready is signalled (size one) when a report arrived.
	ready chan struct{}
	// devices samples accelerator health for each take; nil without NVML.
	devices DeviceMonitor
	// now stamps a report that does not say when its step completed
	// (Unix nanoseconds, the agent's clock).
	now func() int64
	// usage measures the workers' memory and CPU for each take.
	usage *usageMeter
	// links measures the node's link from its workers' TCP connections for
	// each take.
	links *linkMeter
}

func newProgressBook() *progressBook {
	return &progressBook{workers: map[int32]*roverv1.WorkerProgress{}, ready: make(chan struct{}, 1),
		now: func() int64 { return time.Now().UnixNano() }, usage: newUsageMeter(), links: newLinkMeter()}
}

// add records one report of a worker of round.
func (b *progressBook) add(round int64, p *roverv1.WorkerProgress) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if round != b.round {
		b.round = round
		clear(b.workers) // the previous group's sums are of no use now
	}
	w := b.workers[p.GetLocalRank()]
	if w == nil {
		w = &roverv1.WorkerProgress{LocalRank: p.GetLocalRank(), Rank: p.GetRank()}
		b.workers[p.GetLocalRank()] = w
	}
	w.Step = p.GetStep()
	// When the newest step completed: as the worker says, else its receipt.
	w.StepUnixNanos = p.GetStepUnixNanos()
	if w.StepUnixNanos == 0 {
		w.StepUnixNanos = b.now()
	}
	w.Steps += p.GetSteps()
	w.WallSeconds += p.GetWallSeconds()
	w.CpuSeconds += p.GetCpuSeconds()
	w.CommSeconds += p.GetCommSeconds()
	w.Collectives += p.GetCollectives()
	w.GpuCollectiveSeconds += p.GetGpuCollectiveSeconds()
	w.MatmulSeconds += p.GetMatmulSeconds()
	w.MatmulFlops += p.GetMatmulFlops()
	// Capped, so that however many reports come, the sum stays a count
	// the master can take (checkProgress bounds each report).
	w.Samples = min(w.Samples+p.GetSamples(), maxSamples)
	if c := p.GetCollective(); c != nil { // the newest; else the one before stands
		w.Collective = c
	}
	if d := p.GetDdpStep(); d != nil { // likewise
		w.DdpStep = d
	}
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// take returns the sums since the previous take and starts new ones; nil
// when there is nothing to send.
func (b *progressBook) take() *roverv1.NodeProgress {
	var devs []*roverv1.DeviceHealth
	if b.devices != nil {
		devs = sampleDevices(b.devices)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.workers) == 0 && len(devs) == 0 {
		return nil
	}
	np := &roverv1.NodeProgress{Round: b.round, Devices: devs, Usage: b.usage.sample()}
	if rtt, n := b.links.sample(); n > 0 {
		np.LinkRttSeconds, np.LinkConnections = rtt.Seconds(), int32(n)
	}
	for _, w := range b.workers {
		np.Workers = append(np.Workers, w)
	}
	b.workers = map[int32]*roverv1.WorkerProgress{}
	return np
}

// workersStarted begins measuring the usage of a new group's workers.
func (b *progressBook) workersStarted(pids []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.usage.started(pids)
	b.links.started(pids)
}

// ReportProgress records a worker's progress for the next heartbeat.
func (s *agentService) ReportProgress(ctx context.Context, req *connect.Request[roverv1.ReportProgressRequest]) (*connect.Response[roverv1.ReportProgressResponse], error) {
	p := req.Msg.GetProgress()
	cur := s.l.current.Load()
	if cur == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("no worker group is running on this node"))
	}
	if err := checkProgress(p, cur.LocalWorldSize); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	s.a.progress.add(int64(cur.Round), p)
	return connect.NewResponse(&roverv1.ReportProgressResponse{}), nil
}

// maxSamples is the most training samples one report of a worker may
// carry (2^40, as the master's throughput record accepts); a sum of reports
// between two heartbeats is capped at it.
const maxSamples = 1 << 40

func checkProgress(p *roverv1.WorkerProgress, localWorldSize int) error {
	if p == nil {
		return errors.New("progress is missing")
	}
	var errs []error
	if lr := p.GetLocalRank(); lr < 0 || int(lr) >= localWorldSize {
		errs = append(errs, fmt.Errorf("local_rank %d is not one of this node's (0 to %d)", lr, localWorldSize-1))
	}
	if p.GetStep() < 0 || p.GetSteps() < 0 {
		errs = append(errs, fmt.Errorf("step %d and steps %d must not be negative", p.GetStep(), p.GetSteps()))
	}
	if n := p.GetSamples(); n < 0 || n > maxSamples {
		errs = append(errs, fmt.Errorf("samples %d must be 0..%d (the samples trained in the report's steps; 0: unknown)", n, int64(maxSamples)))
	}
	if p.GetStepUnixNanos() < 0 {
		errs = append(errs, fmt.Errorf("step_unix_nanos %d must not be negative (0: unknown, the agent stamps the receipt)", p.GetStepUnixNanos()))
	}
	for _, v := range []float64{p.GetWallSeconds(), p.GetCpuSeconds(), p.GetCommSeconds()} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			errs = append(errs, fmt.Errorf("wall_seconds %v, cpu_seconds %v and comm_seconds %v must be finite and not negative",
				p.GetWallSeconds(), p.GetCpuSeconds(), p.GetCommSeconds()))
			break
		}
	}
	if p.GetCollectives() < 0 {
		errs = append(errs, fmt.Errorf("collectives %d must not be negative", p.GetCollectives()))
	}
	for _, v := range []float64{p.GetGpuCollectiveSeconds(), p.GetMatmulSeconds()} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			errs = append(errs, fmt.Errorf("gpu_collective_seconds %v and matmul_seconds %v must be finite and not negative",
				p.GetGpuCollectiveSeconds(), p.GetMatmulSeconds()))
			break
		}
	}
	if p.GetMatmulFlops() < 0 {
		errs = append(errs, fmt.Errorf("matmul_flops %d must not be negative", p.GetMatmulFlops()))
	}
	if c := p.GetCollective(); c != nil && (c.GetSeq() < 1 || c.GetBytes() < 0 || c.GetOp() == "" || len(c.GetOp()) > 64 || len(c.GetGroup()) > 256) {
		errs = append(errs, fmt.Errorf("collective %q #%d (%d bytes, group %.32q): want an op of at most 64 bytes, seq >= 1, bytes >= 0, a group of at most 256 bytes",
			c.GetOp(), c.GetSeq(), c.GetBytes(), c.GetGroup()))
	}
	if d := p.GetDdpStep(); d != nil && (d.GetForwards() < 1 || len(d.GetGroup()) > 256) {
		errs = append(errs, fmt.Errorf("ddp_step #%d (group %.32q): want forwards >= 1 and a group of at most 256 bytes",
			d.GetForwards(), d.GetGroup()))
	}
	return errors.Join(errs...)
}
