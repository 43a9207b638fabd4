package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/master"
	"golang.org/x/sync/errgroup"
)

// RendezvousConfig configures the rendezvous benchmark.
type RendezvousConfig struct {
	Nodes int
	// Rover is the rover binary that runs the master process.
	Rover string
	// Durable gives the master a state dir (bbolt) instead of memory.
	Durable bool
	// Conns is how many HTTP/2 connections the simulated agents share.
	Conns int
	// HeartbeatPeriod and Periods set the heartbeat phase.
	HeartbeatPeriod time.Duration
	Periods         int
}

// RendezvousResult holds the figures; it is printed as the last line in JSON.
type RendezvousResult struct {
	Nodes                              int     `json:"nodes"`
	RoundSeconds                       float64 `json:"round_seconds"`
	JoinSeconds                        float64 `json:"join_seconds"`
	MasterCPUSecondsRound              float64 `json:"master_cpu_seconds_round"`
	MasterCPUSecondsPerHeartbeatPeriod float64 `json:"master_cpu_seconds_per_heartbeat_period"`
	HeartbeatPeriodSeconds             float64 `json:"heartbeat_period_seconds"`
	HeartbeatsPerSecond                float64 `json:"heartbeats_per_second"`
	MasterRSSBytes                     int64   `json:"master_rss_bytes"`
	Cores                              int     `json:"cores"`
}

// Rendezvous runs the benchmark and writes human-readable figures to w
// followed by one line of JSON.
func Rendezvous(ctx context.Context, cfg RendezvousConfig, w io.Writer) (*RendezvousResult, error) {
	if cfg.Nodes < 1 {
		return nil, fmt.Errorf("--nodes must be at least 1, got %d", cfg.Nodes)
	}
	if cfg.Conns <= 0 {
		cfg.Conns = 16
	}
	if cfg.HeartbeatPeriod <= 0 {
		cfg.HeartbeatPeriod = time.Second
	}
	if cfg.Periods <= 0 {
		cfg.Periods = 3
	}
	token := master.NewToken()
	m, err := startMasterProcess(ctx, cfg, token)
	if err != nil {
		return nil, err
	}
	defer m.stop()

	clients, closeClients := m.clients(cfg.Conns, token)
	defer closeClients()
	rdzv := &roverv1.RendezvousConfig{
		MinNodes: int32(cfg.Nodes), MaxNodes: int32(cfg.Nodes), NodeUnit: 1,
		LastCallMillis: 30_000, JoinTimeoutMillis: 600_000,
		HeartbeatTimeoutMillis: 600_000, DisconnectGraceMillis: 60_000,
	}
	fmt.Fprintf(w, "rendezvous benchmark: %d simulated agents over %d connections to one master process\n", cfg.Nodes, cfg.Conns)

	cpu0, _ := m.cpuSeconds()
	type session = *connect.BidiStreamForClient[roverv1.SessionRequest, roverv1.SessionResponse]
	sessions := make([]session, cfg.Nodes)
	var assigned sync.WaitGroup
	assigned.Add(cfg.Nodes)
	var joinedCount atomic.Int64
	joinedAll := make(chan time.Time, 1)
	streamCtx, cancelStreams := context.WithCancel(ctx)
	defer cancelStreams()
	g, gctx := errgroup.WithContext(streamCtx)
	start := time.Now()
	for i := 0; i < cfg.Nodes; i++ {
		c := clients[i%len(clients)]
		id := fmt.Sprintf("bench-node-%05d", i)
		g.Go(func() error {
			s := c.Session(gctx)
			sessions[i] = s
			join := &roverv1.JoinRequest{NodeId: id, RequestedRank: -1, LocalWorldSize: 8, Addr: "127.0.0.1", Rendezvous: rdzv}
			if err := s.Send(&roverv1.SessionRequest{Msg: &roverv1.SessionRequest_Join{Join: join}}); err != nil {
				return fmt.Errorf("join %s: %w", id, err)
			}
			resp, err := s.Receive()
			if err != nil || resp.GetJoined() == nil {
				return fmt.Errorf("join %s: %v", id, err)
			}
			if joinedCount.Add(1) == int64(cfg.Nodes) {
				joinedAll <- time.Now()
			}
			done := false
			if resp.GetView().GetAssignment() != nil {
				done = true
				assigned.Done()
			}
			for {
				msg, err := s.Receive()
				if err != nil {
					if !done && gctx.Err() == nil {
						return fmt.Errorf("session of %s ended before an assignment: %w", id, err)
					}
					return nil
				}
				if msg.GetView().GetAssignment() != nil && !done {
					done = true
					assigned.Done()
				}
			}
		})
	}
	waitDone := make(chan struct{})
	go func() { assigned.Wait(); close(waitDone) }()
	select {
	case <-waitDone:
	case <-gctx.Done():
		cancelStreams()
		return nil, fmt.Errorf("rendezvous did not complete: %w", g.Wait())
	}
	roundSeconds := time.Since(start).Seconds()
	joinSeconds := (<-joinedAll).Sub(start).Seconds()
	cpu1, _ := m.cpuSeconds()
	fmt.Fprintf(w, "round: %d nodes joined in %.3fs; every agent knew its world after %.3fs (master CPU %.3fs)\n",
		cfg.Nodes, joinSeconds, roundSeconds, cpu1-cpu0)

	// Heartbeat phase: every agent beats once per period on its session,
	// spread evenly over the period.
	var beats atomic.Int64
	hbStart := time.Now()
	hg, _ := errgroup.WithContext(ctx)
	workers := min(cfg.Nodes, 256)
	beat := &roverv1.SessionRequest{Msg: &roverv1.SessionRequest_Heartbeat{Heartbeat: &roverv1.Heartbeat{}}}
	for wk := 0; wk < workers; wk++ {
		hg.Go(func() error {
			for p := 0; p < cfg.Periods; p++ {
				periodStart := hbStart.Add(time.Duration(p) * cfg.HeartbeatPeriod)
				for i := wk; i < cfg.Nodes; i += workers {
					at := periodStart.Add(time.Duration(int64(cfg.HeartbeatPeriod) * int64(i) / int64(cfg.Nodes)))
					if d := time.Until(at); d > 0 {
						time.Sleep(d)
					}
					if err := sessions[i].Send(beat); err != nil {
						return fmt.Errorf("heartbeat of node %d: %w", i, err)
					}
					beats.Add(1)
				}
			}
			return nil
		})
	}
	if err := hg.Wait(); err != nil {
		return nil, err
	}
	if d := time.Until(hbStart.Add(time.Duration(cfg.Periods) * cfg.HeartbeatPeriod)); d > 0 {
		time.Sleep(d)
	}
	hbSeconds := time.Since(hbStart).Seconds()
	cpu2, _ := m.cpuSeconds()
	rss, _ := m.rssBytes()
	// Closing its side ends each session on the master, which ends the
	// response stream the session's goroutine reads.
	for _, s := range sessions {
		_ = s.CloseRequest()
	}
	_ = g.Wait()

	res := &RendezvousResult{
		Nodes:                              cfg.Nodes,
		RoundSeconds:                       round3(roundSeconds),
		JoinSeconds:                        round3(joinSeconds),
		MasterCPUSecondsRound:              round3(cpu1 - cpu0),
		MasterCPUSecondsPerHeartbeatPeriod: round3((cpu2 - cpu1) / float64(cfg.Periods)),
		HeartbeatPeriodSeconds:             cfg.HeartbeatPeriod.Seconds(),
		HeartbeatsPerSecond:                round3(float64(beats.Load()) / hbSeconds),
		MasterRSSBytes:                     rss,
		Cores:                              runtime.NumCPU(),
	}
	fmt.Fprintf(w, "heartbeats: %d agents x %d periods of %s: %.0f heartbeats/s, master CPU %.3fs per period, master RSS %.1f MiB\n",
		cfg.Nodes, cfg.Periods, cfg.HeartbeatPeriod, res.HeartbeatsPerSecond, res.MasterCPUSecondsPerHeartbeatPeriod, float64(rss)/(1<<20))
	return res, printJSON(w, res)
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// masterProcess is a `rover master` child process.
type masterProcess struct {
	cmd  *exec.Cmd
	addr string
	dir  string
}

func startMasterProcess(_ context.Context, cfg RendezvousConfig, token string) (*masterProcess, error) {
	dir, err := os.MkdirTemp("", "rover-bench-")
	if err != nil {
		return nil, err
	}
	var extra []string
	if cfg.Durable {
		extra = []string{"--state-dir", filepath.Join(dir, "state")}
	}
	m, err := launchMaster(cfg.Rover, dir, "127.0.0.1:0", token, extra...)
	if err != nil {
		os.RemoveAll(dir)
	}
	return m, err
}

// launchMaster starts `rover master` with its files in dir and waits until
// it listens.
func launchMaster(rover, dir, listen, token string, extra ...string) (*masterProcess, error) {
	addrFile := filepath.Join(dir, "addr")
	os.Remove(addrFile)
	args := append([]string{"master", "--listen", listen, "--job", "bench", "--addr-file", addrFile}, extra...)
	cmd := exec.Command(rover, args...)
	cmd.Env = append(os.Environ(), "ROVER_TOKEN="+token)
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the master process %s: %w", rover, err)
	}
	m := &masterProcess{cmd: cmd, dir: dir}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(addrFile); err == nil && len(b) > 0 {
			m.addr = strings.TrimSpace(string(b))
			return m, nil // the listener is open: connections queue until it serves
		}
		time.Sleep(5 * time.Millisecond)
	}
	m.kill()
	return nil, fmt.Errorf("the master process did not write %s within 10s", addrFile)
}

// kill SIGKILLs the master and waits for it, keeping its files.
func (m *masterProcess) kill() {
	_ = m.cmd.Process.Kill()
	_ = m.cmd.Wait()
}

func (m *masterProcess) stop() {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = m.cmd.Process.Kill()
		<-done
	}
	os.RemoveAll(m.dir)
}

// cpuSeconds reads the master process's user+system CPU time.
func (m *masterProcess) cpuSeconds() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which is in parentheses).
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / clockTicks, nil
}

// clockTicks is USER_HZ, 100 on every Linux platform Go supports.
const clockTicks = 100

func (m *masterProcess) rssBytes() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", m.cmd.Process.Pid)
}

// clients returns n gRPC clients of the master, each on its own HTTP/2
// connection, and a function that closes them.
func (m *masterProcess) clients(n int, token string) ([]roverv1connect.MasterServiceClient, func()) {
	out := make([]roverv1connect.MasterServiceClient, n)
	var https []*http.Client
	for i := range out {
		hc := client.NewHTTPClient()
		https = append(https, hc)
		out[i] = client.New(hc, m.addr, token)
	}
	return out, func() {
		for _, hc := range https {
			hc.CloseIdleConnections()
		}
	}
}

// printJSON writes v as the last line of a benchmark's output.
func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}
