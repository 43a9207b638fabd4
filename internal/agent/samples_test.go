package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// samplesScript reports steps 0 to 9 with 5 samples each through
// rover.progress (the real reporter and its flush timer), then waits for
// the file "stop" and exits.
const samplesScript = `
import os, sys, time
import rover.progress
d = sys.argv[1]
for step in range(10):
    rover.progress.step(step, samples=5)
    rover.progress.step(step, samples=5)  # a repeated call counts once
while not os.path.exists(os.path.join(d, "stop")):
    time.sleep(0.05)
`

// TestSamplesReachTheHeartbeat runs a real Python worker that reports 10
// steps of 5 samples and checks that the agent's heartbeats carry them to
// the master: summed over the heartbeats, 50 samples for the worker.
func TestSamplesReachTheHeartbeat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	proxy, rec := startRecordingProxy(t, startMaster(t))
	dir := t.TempDir()
	done, stderr := runPythonNode(ctx, t, samplesScript, dir, "--nproc-per-node", "1", "--rdzv-endpoint", proxy,
		"--rdzv-conf", "last_call_timeout=100ms,join_timeout=60s")
	sum := func() (n int64) {
		for _, hb := range rec.snapshot() {
			for _, w := range hb.GetProgress().GetWorkers() {
				n += w.GetSamples()
			}
		}
		return n
	}
	for sum() < 50 {
		select {
		case <-rec.notify:
		case err := <-done:
			t.Fatalf("the agent ended (%v) before its heartbeats carried 50 samples (%d)\n%s", err, sum(), stderr)
		case <-ctx.Done():
			t.Fatalf("the heartbeats carried %d samples, want 50\n%s", sum(), stderr)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("agent: %v\n%s", err, stderr)
	}
	if n := sum(); n != 50 {
		t.Errorf("the heartbeats carried %d samples, want 50 (10 steps of 5; repeated calls count once)", n)
	}
}
