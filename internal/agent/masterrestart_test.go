package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/roverml/rover/internal/agent"
	"github.com/roverml/rover/internal/agent/standalone"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/liveness"
	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/rendezvous"
	"github.com/roverml/rover/internal/store"
	"github.com/roverml/rover/internal/testbuf"
)

// runningMaster is a master of the tests, on loopback.
type runningMaster struct {
	*master.Master
	stop func() // stops it and waits; idempotent
}

// startMasterOn runs a master on addr with st as its journal until stop is called.
func startMasterOn(t *testing.T, addr string, st master.Store) runningMaster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var m *master.Master
	var err error
	// The port of a stopped master may take a moment to free.
	waitFor(t, "a master to listen on "+addr, func() bool {
		m, err = master.New(ctx, master.Config{Listen: addr, Job: "test", Token: token, Store: st,
			Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
		return err == nil
	})
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return runningMaster{Master: m, stop: stop}
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func alive(pid int) bool { return syscallKill0(pid) == nil }

// workerPids are the pids of every worker started so far, from the
// environments they wrote.
func workerPids(t *testing.T, envDir string) []int {
	t.Helper()
	var pids []int
	for _, e := range readEnvs(t, envDir) {
		var pid int
		fmt.Sscan(e["PID"], &pid)
		pids = append(pids, pid)
	}
	return pids
}

// TestMasterRestartKeepsTheWorkers stops the master under a training node
// and starts a new one on the same address and journal: the agent keeps its
// worker running (the same process, never restarted), rejoins the new
// master, and the job succeeds there when the worker exits 0.
func TestMasterRestartKeepsTheWorkers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := store.NewMemory()
	first := startMasterOn(t, "127.0.0.1:0", st)
	addr := first.Addr()
	envDir, exitFile := t.TempDir(), filepath.Join(t.TempDir(), "exit")
	stderr := &testbuf.Buffer{}
	done := make(chan agentRun, 1)
	go func() {
		done <- runAgentLogging(ctx, t, stderr, "--nnodes", "1", "--rdzv-endpoint", addr, "--node-id", "n",
			"--rdzv-conf", "join_timeout=20s,heartbeat_timeout=60s", "--heartbeat-interval", "500ms",
			"--stop-grace-period", "2s", "--no-python", fakeWorker, "--env-dir", envDir, "--run-until", exitFile)
	}()
	waitFor(t, "the worker to start", func() bool { return len(workerPids(t, envDir)) == 1 })
	pid := workerPids(t, envDir)[0]

	first.stop()
	waitFor(t, "the agent to notice the master is gone", func() bool { return strings.Contains(stderr.String(), "lost the master") })
	if !alive(pid) {
		t.Fatalf("the worker (pid %d) stopped when the master went away", pid)
	}
	second := startMasterOn(t, addr, st)
	waitFor(t, "the agent to rejoin", func() bool { return strings.Contains(stderr.String(), "reconnected to the master") })
	if !alive(pid) {
		t.Fatalf("the worker (pid %d) stopped when the agent rejoined", pid)
	}

	if err := os.WriteFile(exitFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("agent: %v\n%s", r.err, r.stderr)
	}
	out, err := second.WaitFinished(ctx)
	if err != nil || !out.Succeeded {
		t.Errorf("the restarted master's outcome: %+v, %v; want success", out, err)
	}
	if diff := cmp.Diff([]int{pid}, workerPids(t, envDir)); diff != "" {
		t.Errorf("worker starts (-want +got pids): the master's restart restarted the worker\n%s", diff)
	}
}

// TestMasterRestartKeepsTheJob restarts the master (same journal) while two
// nodes train: the agents reconnect, nothing restarts, the job succeeds.
func TestMasterRestartKeepsTheJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := store.NewMemory()
	m := startMasterOn(t, "127.0.0.1:0", st)
	addr := m.Addr()
	envDir := t.TempDir()
	args := func(id string) []string {
		return nodeArgs(addr, id, "--env-dir", envDir, "--run-time", "4s")
	}
	done := make(chan []agentRun, 1)
	go func() { done <- runAgents(ctx, t, args("n0"), args("n1")) }()
	waitFor(t, "four workers to start", func() bool { return len(readEnvs(t, envDir)) == 4 })
	m.stop()
	startMasterOn(t, addr, st)
	rs := <-done
	for i, r := range rs {
		if r.err != nil {
			t.Fatalf("agent %d: %v\n%s", i, r.err, r.stderr)
		}
	}
	if n := len(readEnvs(t, envDir)); n != 4 {
		t.Errorf("%d worker starts, want 4: the master's restart restarted workers", n)
	}
}

// TestMasterLostStopsTheAgent: a master that never comes back is given the
// master_timeout; then the agent stops its worker and exits 4.
func TestMasterLostStopsTheAgent(t *testing.T) {
	const heartbeatTimeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := startMasterOn(t, "127.0.0.1:0", store.NewMemory())
	envDir := t.TempDir()
	stderr := &testbuf.Buffer{}
	done := make(chan agentRun, 1)
	go func() {
		done <- runAgentLogging(ctx, t, stderr, "--nnodes", "1", "--rdzv-endpoint", m.Addr(), "--node-id", "n",
			"--rdzv-conf", "master_timeout="+heartbeatTimeout.String(), "--heartbeat-interval", "500ms", "--stop-grace-period", "1s",
			"--no-python", fakeWorker, "--hang", "--env-dir", envDir)
	}()
	waitFor(t, "the worker to start", func() bool { return len(workerPids(t, envDir)) == 1 })
	pid := workerPids(t, envDir)[0]
	stopped := time.Now()
	m.stop()
	waitFor(t, "the agent to notice the master is gone", func() bool { return strings.Contains(stderr.String(), "lost the master") })
	if !alive(pid) {
		t.Errorf("the worker (pid %d) stopped as soon as the master went away", pid)
	}
	r := <-done
	if waited := time.Since(stopped); waited < heartbeatTimeout {
		t.Errorf("the agent gave up after %v, before the %v heartbeat timeout", waited, heartbeatTimeout)
	}
	if code := agent.ExitCode(r.err); code != agent.ExitMasterLost {
		t.Fatalf("exit code %d (%v), want %d", code, r.err, agent.ExitMasterLost)
	}
	if !strings.Contains(r.err.Error(), "for longer than the heartbeat timeout (2s)") {
		t.Errorf("error %q does not say the master was lost past the heartbeat timeout", r.err)
	}
	if alive(pid) {
		t.Errorf("the worker (pid %d) still runs after the agent gave up on the master", pid)
	}
}

// TestStandaloneMasterSpec: the embedded master of a standalone job is
// started with the job's settings and keeps its state in the "master"
// directory of the run's log directory.
func TestStandaloneMasterSpec(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logDir := t.TempDir()
	var got agent.EmbeddedMaster
	start := func(ctx context.Context, spec agent.EmbeddedMaster) (agent.RunningMaster, error) {
		got = spec
		return standalone.Start(ctx, spec)
	}
	r := runAgentWith(ctx, t, &testbuf.Buffer{}, start, "--standalone", "--nproc-per-node", "1", "--log-dir", logDir,
		"--rdzv-id", "sd", "--node-id", "n", "--max-restarts", "2", "--no-python", fakeWorker)
	if r.err != nil {
		t.Fatalf("agent: %v\n%s", r.err, r.stderr)
	}
	want := agent.EmbeddedMaster{
		Job: "sd",
		Rendezvous: jobconfig.Config{
			Rendezvous: rendezvous.Config{MinNodes: 1, MaxNodes: 1, NodeUnit: 1, MaxRestarts: 2,
				LastCall: 30 * time.Second, JoinTimeout: 600 * time.Second},
			Nodes: liveness.Config{HeartbeatTimeout: 30 * time.Second, DisconnectGrace: 5 * time.Second},
			Hang:  jobconfig.Hang{Timeout: 5 * time.Minute, Policy: 1},
		},
	}
	runs, _ := filepath.Glob(filepath.Join(logDir, "sd_*"))
	if len(runs) == 1 {
		want.StateDir = filepath.Join(runs[0], "master")
	} else {
		t.Errorf("run directories %q in --log-dir, want one sd_<random>", runs)
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(agent.EmbeddedMaster{}, "Logger")); diff != "" {
		t.Errorf("embedded master (-want +got):\n%s", diff)
	}
}

func TestStandaloneWithoutAMasterStarter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := runAgentWith(ctx, t, &testbuf.Buffer{}, nil, "--standalone", "--no-python", fakeWorker)
	if code := agent.ExitCode(r.err); code != agent.ExitRendezvous || !strings.Contains(r.err.Error(), "cannot run one") {
		t.Errorf("agent = %v (exit %d), want exit %d saying it cannot run an embedded master", r.err, code, agent.ExitRendezvous)
	}
}
