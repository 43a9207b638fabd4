package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roverml/rover/internal/metrics/metricstest"

	"github.com/roverml/rover/internal/agent/standalone"
	"github.com/roverml/rover/internal/testbuf"
)

// TestAgentMetricsOfCheckpoints: two Go workers save steps 1 to 3 into the
// agent's shared memory; the agent's metrics then count six saves with
// their bytes, the arenas' shared memory, two running workers and no
// persistence (nothing was asked to persist yet). A worker SIGKILLed then
// makes the agent persist what both ranks hold in memory (steps 2 and 3,
// one per slot) and restart the workers: four persists timed with their
// bytes, one worker restart, twelve saves.
func TestAgentMetricsOfCheckpoints(t *testing.T) {
	worker := ckptWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agentCtx, stop := context.WithCancel(ctx)
	defer stop()
	dir, store := t.TempDir(), filepath.Join(t.TempDir(), "ckpts")
	addrFile := filepath.Join(dir, "metrics.addr")
	stderr := &testbuf.Buffer{}
	done := make(chan agentRun, 1)
	go func() {
		done <- runAgentWith(agentCtx, t, stderr, standalone.Start, "--standalone", "--checkpoint-dir", store, "--nproc-per-node", "2",
			"--metrics-addr", "127.0.0.1:0", "--metrics-addr-file", addrFile, "--max-restarts", "1",
			"--stop-grace-period", "5s", "--no-python", worker, "--out", dir, "--url", store, "--hold")
	}()
	for _, rank := range []string{"0", "1"} {
		waitForFile(ctx, t, filepath.Join(dir, "held-"+rank), stderr)
	}
	addr, err := os.ReadFile(addrFile)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + strings.TrimSpace(string(addr)) + "/metrics"
	fams := metricstest.Families(t, metricstest.Get(t, url))
	value := func(name string) float64 {
		f := fams[name]
		if f == nil || len(f.GetMetric()) == 0 {
			t.Errorf("no %s", name)
			return -1
		}
		m := f.GetMetric()[0]
		switch {
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	if n := value("rover_checkpoint_save_duration_seconds"); n != 6 {
		t.Errorf("%v saves timed, want 6 (3 steps of 2 ranks)", n)
	}
	if b := value("rover_checkpoint_save_bytes_total"); b <= 0 {
		t.Errorf("%v bytes saved", b)
	}
	if b := value("rover_agent_shm_bytes"); b <= 0 {
		t.Errorf("%v bytes of shared memory", b)
	}
	if n := value("rover_checkpoint_persist_duration_seconds"); n != 0 {
		t.Errorf("%v persists timed before any persistence", n)
	}
	running := 0.0
	for _, m := range fams["rover_agent_workers"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "state" && l.GetValue() == "running" {
				running = m.GetGauge().GetValue()
			}
		}
	}
	if running != 2 {
		t.Errorf("%v running workers, want 2", running)
	}

	for _, rank := range []string{"0", "1"} {
		if err := os.Remove(filepath.Join(dir, "held-"+rank)); err != nil {
			t.Fatal(err)
		}
	}
	pids := processesWith(t, worker, dir)
	if len(pids) != 2 {
		t.Fatalf("found worker processes %v, want 2", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, rank := range []string{"0", "1"} {
		waitForFile(ctx, t, filepath.Join(dir, "held-"+rank), stderr)
	}
	fams = metricstest.Families(t, metricstest.Get(t, url))
	for _, w := range []struct {
		name string
		want float64
	}{
		{"rover_checkpoint_persist_duration_seconds", 4},
		{"rover_checkpoint_save_duration_seconds", 12},
		{"rover_agent_worker_restarts_total", 1},
		{"rover_agent_worker_group_starts_total", 2},
	} {
		if got := value(w.name); got != w.want {
			t.Errorf("%s = %v after the restart, want %v", w.name, got, w.want)
		}
	}
	if b := value("rover_checkpoint_persist_bytes_total"); b <= 0 {
		t.Errorf("%v bytes persisted", b)
	}
	stop()
	<-done
}

// processesWith lists the processes whose command line holds every one of
// words.
func processesWith(t *testing.T, words ...string) []int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // exited
		}
		cmd := string(b)
		all := true
		for _, w := range words {
			all = all && strings.Contains(cmd, w)
		}
		if all {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			pids = append(pids, pid)
		}
	}
	return pids
}
