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

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// lastStepScript: in restart 0 the worker reports steps 0 to 5 within
// well under a second, with rover.progress's flush timer disabled, so no
// report carries steps 1 to 5 (as for a worker killed within a second of
// its last steps); it then writes its pid to the file "pid" and waits to
// be killed. In restart 1 it exits at once without calling
// rover.progress: a worker that never reported a step.
const lastStepScript = `
import os, sys, time
import rover.progress
d = sys.argv[1]
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    rover.progress._schedule = lambda delay, fn: None  # no flush: steps 1-5 stay unsent
    for step in range(6):
        rover.progress.step(step)
    with open(os.path.join(d, "pid.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.rename(os.path.join(d, "pid.tmp"), os.path.join(d, "pid"))
    while True:
        time.sleep(1)
`

// TestLastStepOfAKilledWorker runs a real Python worker that completed
// steps 0 to 5 but reported only step 0, SIGKILLs it (it can send
// nothing), and checks that its agent told the master the true last step:
// a LAST_STEP event of step 5 in the round it died in, while no progress
// report went past step 0; the next round, whose worker never called
// rover.progress, sends no LAST_STEP.
func TestLastStepOfAKilledWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	proxy, rec := startRecordingProxy(t, startMaster(t))
	dir := t.TempDir()
	done, stderr := runPythonNode(ctx, t, lastStepScript, dir, "--nproc-per-node", "1", "--rdzv-endpoint", proxy, "--max-restarts", "1",
		"--rdzv-conf", "last_call_timeout=100ms,join_timeout=60s,heartbeat_timeout=3h,disconnect_grace=1s", "--heartbeat-interval", "1h")

	pidFile := filepath.Join(dir, "pid")
	waitForFile(ctx, t, pidFile, stderr)
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the worker (pid %d): %v", pid, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("agent: %v\n%s", err, stderr)
	}

	var rounds []int64
	last := map[int64][]int64{}
	for _, e := range rec.events() {
		if e.GetKind() == roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED {
			rounds = append(rounds, e.GetRound())
		}
		if e.GetKind() == roverv1.NodeEventKind_NODE_EVENT_KIND_LAST_STEP {
			last[e.GetRound()] = append(last[e.GetRound()], e.GetStep())
			if e.GetTimeUnixNanos() <= 0 {
				t.Errorf("LAST_STEP %v has no time", e)
			}
		}
	}
	if len(rounds) != 2 {
		t.Fatalf("workers started in rounds %v, want two", rounds)
	}
	if got := last[rounds[0]]; len(got) != 1 || got[0] != 5 {
		t.Errorf("round %d (the killed worker's) sent LAST_STEP %v, want [5]", rounds[0], got)
	}
	if got := last[rounds[1]]; len(got) != 0 {
		t.Errorf("round %d (no step recorded) sent LAST_STEP %v, want none", rounds[1], got)
	}
	for _, hb := range rec.snapshot() {
		for _, w := range hb.GetProgress().GetWorkers() {
			if w.GetStep() > 0 {
				t.Fatalf("a progress report carried step %d: the test's worker should have sent step 0 only", w.GetStep())
			}
		}
	}
}
