package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/agent"
	"github.com/roverml/rover/internal/agent/standalone"
	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/runconfig"
	"github.com/roverml/rover/internal/testbuf"
	"github.com/roverml/rover/internal/testsrc"
)

var fakeWorker, sdkWorker string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rover-agent-test-")
	if err != nil {
		panic(err)
	}
	fakeWorker = filepath.Join(dir, "fakeworker")
	out, err := exec.Command("go", "build", "-o", fakeWorker, "github.com/roverml/rover/test/fakeworker").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build fakeworker: %v\n%s", err, out)
		os.Exit(1)
	}
	sdkWorker = filepath.Join(dir, "sdkworker")
	out, err = exec.Command("go", "build", "-o", sdkWorker, "github.com/roverml/rover/test/sdkworker").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build sdkworker: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const token = "test-token-0123456789"

// startMaster runs a real master on loopback.
func startMaster(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m, err := master.New(ctx, master.Config{Listen: "127.0.0.1:0", Job: "test", Token: token,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m.Addr()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

type agentRun struct {
	err    error
	stdout *testbuf.Buffer
	stderr *testbuf.Buffer
}

// runAgent parses a `rover run` command line and runs the agent.
func runAgent(ctx context.Context, t *testing.T, args ...string) agentRun {
	t.Helper()
	return runAgentLogging(ctx, t, &testbuf.Buffer{}, args...)
}

// runAgentLogging is runAgent with the agent's stderr (and log) going to
// stderr while it runs.
func runAgentLogging(ctx context.Context, t *testing.T, stderr *testbuf.Buffer, args ...string) agentRun {
	t.Helper()
	return runAgentWith(ctx, t, stderr, standalone.Start, args...)
}

// runAgentWith is runAgentLogging with start as the embedded master's starter.
func runAgentWith(ctx context.Context, t *testing.T, stderr *testbuf.Buffer, start agent.StartMaster, args ...string) agentRun {
	t.Helper()
	testsrc.Track() // the test workers it runs are built from other packages
	env := map[string]string{"ROVER_TOKEN": token}
	cfg, err := runconfig.Parse(args, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	r := agentRun{stdout: &testbuf.Buffer{}, stderr: stderr}
	r.err = agent.Run(ctx, cfg, agent.Options{
		Stdout: r.stdout, Stderr: r.stderr,
		Getenv:      func(k string) string { return env[k] },
		Logger:      slog.New(slog.NewTextHandler(r.stderr, nil)),
		StartMaster: start,
	})
	return r
}

// runAgents runs several agents concurrently and returns their results in order.
func runAgents(ctx context.Context, t *testing.T, cmdlines ...[]string) []agentRun {
	t.Helper()
	out := make([]agentRun, len(cmdlines))
	var wg sync.WaitGroup
	for i, args := range cmdlines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = runAgent(ctx, t, args...)
		}()
	}
	wg.Wait()
	return out
}

func nodeArgs(addr, id string, extra ...string) []string {
	args := []string{"--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", addr, "--node-id", id,
		"--rdzv-conf", "last_call_timeout=200ms,join_timeout=20s,heartbeat_timeout=20s,disconnect_grace=1s",
		"--stop-grace-period", "2s", "--heartbeat-interval", "500ms", "--no-python", fakeWorker}
	return append(args, extra...)
}

func readEnvs(t *testing.T, dir string) []map[string]string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "env-*.json"))
	var out []map[string]string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]string
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func TestStandaloneSucceeds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	envDir := t.TempDir()
	r := runAgent(ctx, t, "--standalone", "--nproc-per-node", "3", "--no-python", fakeWorker, "--env-dir", envDir)
	if r.err != nil {
		t.Fatalf("agent: %v\n%s", r.err, r.stderr)
	}
	envs := readEnvs(t, envDir)
	if len(envs) != 3 {
		t.Fatalf("%d workers wrote their environment, want 3", len(envs))
	}
	// Without --tee the workers write to the console unprefixed, as with torchrun.
	if out := r.stdout.String(); !strings.Contains(out, "fakeworker rank 0 restart 0 started\n") || strings.Contains(out, "[default") {
		t.Errorf("stdout lacks rank 0's unprefixed line:\n%s", out)
	}
}

// TestEnvContract checks every torchrun variable on two nodes of two workers.
func TestEnvContract(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := startMaster(t)
	envDir := t.TempDir()
	rs := runAgents(ctx, t,
		nodeArgs(addr, "n0", "--env-dir", envDir),
		nodeArgs(addr, "n1", "--env-dir", envDir))
	for i, r := range rs {
		if r.err != nil {
			t.Fatalf("agent %d: %v\n%s", i, r.err, r.stderr)
		}
	}
	envs := readEnvs(t, envDir)
	if len(envs) != 4 {
		t.Fatalf("%d workers wrote their environment, want 4", len(envs))
	}
	ranks := map[string]bool{}
	for _, e := range envs {
		for _, k := range []string{"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
			"ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
			"TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
			"TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS"} {
			if _, ok := e[k]; !ok {
				t.Errorf("rank %s: %s is not set", e["RANK"], k)
			}
		}
		var rank, local, group int
		fmt.Sscan(e["RANK"], &rank)
		fmt.Sscan(e["LOCAL_RANK"], &local)
		fmt.Sscan(e["GROUP_RANK"], &group)
		if rank != group*2+local {
			t.Errorf("RANK %d != GROUP_RANK %d * 2 + LOCAL_RANK %d", rank, group, local)
		}
		want := map[string]string{"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_WORLD_SIZE": "2", "ROLE_WORLD_SIZE": "4",
			"ROLE_RANK": e["RANK"], "ROLE_NAME": "default", "TORCHELASTIC_USE_AGENT_STORE": "False",
			"TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_RUN_ID": "none",
			"MASTER_ADDR": envs[0]["MASTER_ADDR"], "MASTER_PORT": envs[0]["MASTER_PORT"], "OMP_NUM_THREADS": "1",
			"ROVER_MAX_NODES": "2"}
		for k, v := range want {
			if e[k] != v {
				t.Errorf("rank %s: %s=%q, want %q", e["RANK"], k, e[k], v)
			}
		}
		if !strings.HasSuffix(e["TORCHELASTIC_ERROR_FILE"], "error.json") {
			t.Errorf("rank %s: TORCHELASTIC_ERROR_FILE=%q", e["RANK"], e["TORCHELASTIC_ERROR_FILE"])
		}
		ranks[e["RANK"]] = true
	}
	if len(ranks) != 4 {
		t.Errorf("ranks %v are not 4 distinct ones", ranks)
	}
}

func TestFailureRestartsEveryNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr := startMaster(t)
	envDir := t.TempDir()
	marker := filepath.Join(t.TempDir(), "failed")
	// Rank 3 fails once, quickly, with a torch-style error file; the others
	// would run for 90s. The job ending well within that proves the master
	// stopped them on both nodes instead of waiting for them.
	args := func(id string) []string {
		return append([]string{"--max-restarts", "1"}, nodeArgs(addr, id,
			"--env-dir", envDir, "--run-time", "90s", "--restarted-run-time", "100ms",
			"--exit-code", "3", "--fail-rank", "3", "--fail-after", "300ms",
			"--fail-once-marker", marker, "--error-message", "ValueError: injected")...)
	}
	start := time.Now()
	rs := runAgents(ctx, t, args("n0"), args("n1"))
	for i, r := range rs {
		if r.err != nil {
			t.Fatalf("agent %d: %v\n%s", i, r.err, r.stderr)
		}
	}
	if d := time.Since(start); d > 60*time.Second {
		t.Errorf("the job took %s: the healthy workers were not stopped after the failure", d)
	}
	restarted := 0
	for _, e := range readEnvs(t, envDir) {
		if e["TORCHELASTIC_RESTART_COUNT"] == "1" {
			restarted++
		}
	}
	if restarted != 4 {
		t.Errorf("%d workers ran with TORCHELASTIC_RESTART_COUNT=1, want 4", restarted)
	}
}

func TestRestartBudgetExhausted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr := startMaster(t)
	args := func(id string) []string {
		return append([]string{"--max-restarts", "1"}, nodeArgs(addr, id,
			"--run-time", "90s", "--exit-code", "5", "--fail-rank", "1", "--fail-after", "200ms",
			"--error-message", "RuntimeError: always broken")...)
	}
	rs := runAgents(ctx, t, args("n0"), args("n1"))
	for i, r := range rs {
		if code := agent.ExitCode(r.err); code != agent.ExitJobFailed {
			t.Errorf("agent %d: exit code %d (%v), want %d", i, code, r.err, agent.ExitJobFailed)
		}
		report := r.stderr.String()
		for _, want := range []string{"FAILED", "Root Cause", "rank      : 1 (local_rank: 1", "exitcode  : 5", "RuntimeError: always broken"} {
			if !strings.Contains(report, want) {
				t.Errorf("agent %d: report lacks %q:\n%s", i, want, report)
			}
		}
	}
}

func TestUnreachableMaster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A token file names a `rover master` (with $ROVER_TOKEN alone, an
	// agent that can bind the endpoint hosts the master there).
	tokenFile := filepath.Join(t.TempDir(), "job.token")
	if err := os.WriteFile(tokenFile, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runAgent(ctx, t, "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:1", "--node-id", "x", "--token-file", tokenFile,
		"--rdzv-conf", "join_timeout=1s", "--no-python", fakeWorker)
	if code := agent.ExitCode(r.err); code != agent.ExitRendezvous {
		t.Fatalf("exit code %d (%v), want %d", code, r.err, agent.ExitRendezvous)
	}
	if !strings.Contains(r.err.Error(), "could not reach the master") {
		t.Errorf("error %q does not say the master is unreachable", r.err)
	}
}

func TestAgentStopsWorkersOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	envDir := t.TempDir()
	done := make(chan agentRun, 1)
	go func() {
		done <- runAgent(ctx, t, "--standalone", "--nproc-per-node", "2", "--stop-grace-period", "300ms",
			"--no-python", fakeWorker, "--hang", "--ignore-sigterm", "--env-dir", envDir)
	}()
	// Wait until both workers run, then stop the agent.
	deadline := time.Now().Add(30 * time.Second)
	for len(readEnvs(t, envDir)) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	envs := readEnvs(t, envDir)
	if len(envs) != 2 {
		t.Fatalf("%d workers started, want 2", len(envs))
	}
	stopErr := errors.New("test stop")
	cancel(stopErr)
	r := <-done
	if !errors.Is(r.err, stopErr) {
		t.Errorf("agent returned %v, want the cancel cause", r.err)
	}
	for _, e := range envs {
		var pid int
		fmt.Sscan(e["PID"], &pid)
		if err := syscallKill0(pid); err == nil {
			t.Errorf("worker pid %d still runs after the agent stopped", pid)
		}
	}
}

func syscallKill0(pid int) error { return syscall.Kill(pid, 0) }

type sigintCause struct{}

func (sigintCause) Error() string          { return "received interrupt" }
func (sigintCause) Signal() syscall.Signal { return syscall.SIGINT }

func TestAgentForwardsItsSignal(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	envDir, sigDir := t.TempDir(), t.TempDir()
	done := make(chan agentRun, 1)
	go func() {
		done <- runAgent(ctx, t, "--standalone", "--nproc-per-node", "2", "--stop-grace-period", "10s",
			"--no-python", fakeWorker, "--hang", "--env-dir", envDir, "--signal-dir", sigDir)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for len(readEnvs(t, envDir)) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel(sigintCause{})
	r := <-done
	if !errors.Is(r.err, sigintCause{}) {
		t.Errorf("agent returned %v, want the signal cause", r.err)
	}
	for _, rank := range []string{"0", "1"} {
		b, err := os.ReadFile(filepath.Join(sigDir, "signal-rank"+rank))
		if err != nil || string(b) != "interrupt" {
			t.Errorf("rank %s received %q (%v), want the forwarded interrupt", rank, b, err)
		}
	}
}

func TestTooFewNodesFailsTheJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := startMaster(t)
	args := nodeArgs(addr, "lonely")
	for i, a := range args {
		if strings.HasPrefix(a, "last_call_timeout") {
			args[i] = "last_call_timeout=100ms,join_timeout=1s,heartbeat_timeout=20s"
		}
	}
	r := runAgent(ctx, t, args...)
	if code := agent.ExitCode(r.err); code != agent.ExitJobFailed {
		t.Fatalf("exit code %d (%v), want %d", code, r.err, agent.ExitJobFailed)
	}
	if !strings.Contains(r.err.Error(), "minimum 2") {
		t.Errorf("error %q does not say too few nodes joined", r.err)
	}
}

// TestLogDirLayout: --log-dir holds torchrun's layout,
// <dir>/<run id>_<random>/attempt_<restart count>/<local rank>/, with the
// files --redirects and --tee ask for and the failed worker's error.json,
// for the first attempt and for the one after a restart.
func TestLogDirLayout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logDir := t.TempDir()
	marker := filepath.Join(t.TempDir(), "failed")
	r := runAgent(ctx, t, "--standalone", "--nproc-per-node", "2", "--log-dir", logDir, "--rdzv-id", "logs",
		"--max-restarts", "1", "--redirects", "0:3", "--tee", "1:1", "--no-python", fakeWorker,
		"--exit-code", "3", "--fail-rank", "0", "--fail-after", "500ms", "--fail-once-marker", marker,
		"--error-message", "ValueError: once")
	if r.err != nil {
		t.Fatalf("agent: %v\n%s", r.err, r.stderr)
	}
	runs, _ := filepath.Glob(filepath.Join(logDir, "logs_*"))
	if len(runs) != 1 {
		t.Fatalf("run directories %q in --log-dir, want one logs_<random>", runs)
	}
	var files []string
	err := filepath.WalkDir(runs[0], func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(runs[0], path)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"attempt_0/0/error.json", "attempt_0/0/stderr.log", "attempt_0/0/stdout.log", "attempt_0/1/stdout.log",
		"attempt_1/0/stderr.log", "attempt_1/0/stdout.log", "attempt_1/1/stdout.log",
	}
	var got []string
	for _, f := range files {
		if !strings.HasPrefix(f, "master/") { // the embedded master's state
			got = append(got, filepath.ToSlash(f))
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files in %s (-want +got):\n%s", runs[0], diff)
	}
	read := func(rel string) string {
		b, _ := os.ReadFile(filepath.Join(runs[0], rel))
		return string(b)
	}
	for rel, want := range map[string]string{
		"attempt_0/0/stdout.log": "fakeworker rank 0 restart 0 started\n",
		"attempt_0/0/stderr.log": "fakeworker rank 0 failing with exit code 3\n",
		"attempt_0/1/stdout.log": "fakeworker rank 1 restart 0 started\n",
		"attempt_1/0/stdout.log": "fakeworker rank 0 restart 1 started\n",
		"attempt_1/0/stderr.log": "",
		"attempt_1/1/stdout.log": "fakeworker rank 1 restart 1 started\n",
	} {
		if got := read(rel); got != want {
			t.Errorf("%s = %q, want %q", rel, got, want)
		}
	}
	if got := read("attempt_0/0/error.json"); !strings.Contains(got, `"ValueError: once"`) {
		t.Errorf("attempt_0/0/error.json = %q, want the worker's error", got)
	}
	console := r.stdout.String()
	if strings.Contains(console, "rank 0") {
		t.Errorf("rank 0's output is redirected but reached the console:\n%s", console)
	}
	for _, line := range []string{"[default1]:fakeworker rank 1 restart 0 started\n", "[default1]:fakeworker rank 1 restart 1 started\n"} {
		if !strings.Contains(console, line) {
			t.Errorf("rank 1's teed line %q is missing from the console:\n%s", line, console)
		}
	}
}
