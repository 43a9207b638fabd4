package e2e

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// ddpResult is what examples/ddp/train.py writes with --out.
type ddpResult struct {
	Step         int                  `json:"step"`
	WorldSize    int                  `json:"world_size"`
	RestartCount int                  `json:"restart_count"`
	Weights      map[string][]float64 `json:"weights"`
}

func readResult(t *testing.T, path string) ddpResult {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the training result: %v", err)
	}
	var r ddpResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	return r
}

// maxRelDiff returns the largest relative difference between two weight sets.
func maxRelDiff(t *testing.T, a, b map[string][]float64) float64 {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("weights have %d and %d tensors", len(a), len(b))
	}
	worst := 0.0
	for name, x := range a {
		y, ok := b[name]
		if !ok || len(x) != len(y) {
			t.Fatalf("tensor %s differs in shape", name)
		}
		for i := range x {
			d := math.Abs(x[i]-y[i]) / math.Max(math.Abs(x[i]), 1e-12)
			worst = math.Max(worst, d)
		}
	}
	return worst
}

const (
	rdzvConf   = "last_call_timeout=1s,join_timeout=60s,heartbeat_timeout=15s,disconnect_grace=2s"
	jobTimeout = 4 * time.Minute
)

// trainArgs are the common arguments of a DDP job in dir.
//
// "--flash", DIR among extra becomes the agent's --checkpoint-dir DIR (keeping
// two steps) and the script's --flash: the job's storage is the agent's to set.
func trainArgs(dir string, extra ...string) []string {
	script := filepath.Join(repoRoot, "examples", "ddp", "train.py")
	var agent []string
	if i := slices.Index(extra, "--flash"); i >= 0 && i+1 < len(extra) {
		agent = []string{"--checkpoint-dir", extra[i+1], "--checkpoint-keep", "2"}
		extra = slices.Delete(slices.Clone(extra), i+1, i+2)
	}
	args := append(agent, "--nproc-per-node", "2", "--rdzv-conf", rdzvConf, "--max-restarts", "3", script,
		"--steps", "60", "--ckpt-every", "10", "--ckpt", filepath.Join(dir, "ckpt.pt"),
		"--out", filepath.Join(dir, "out.json"), "--log-world", filepath.Join(dir, "world.log"))
	return append(args, extra...)
}

// runTwoNodes runs the DDP example on two nodes of two workers and returns its result.
func runTwoNodes(t *testing.T, extra ...string) ddpResult {
	t.Helper()
	return runTwoNodesIn(t, t.TempDir(), extra...)
}

// runTwoNodesIn is runTwoNodes with the job's files in dir.
func runTwoNodesIn(t *testing.T, dir string, extra ...string) ddpResult {
	t.Helper()
	c := newCluster(t, "ddp")
	args := append([]string{"--nnodes", "2"}, trainArgs(dir, extra...)...)
	a0, a1 := c.agent("node0", args...), c.agent("node1", args...)
	for _, a := range []*process{a0, a1} {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}
	if code := c.master.wait(t, 30*time.Second); code != 0 {
		t.Errorf("master exited %d", code)
	}
	return readResult(t, filepath.Join(dir, "out.json"))
}

// TestDDPCrashRecovers runs (a) an uninterrupted job and (b) the same job with
// one worker crashing once: (b) finishes after one restart with the same
// weights. The relative tolerance of 1e-6 allows for float summation order
// in gloo's collectives; train.py's ordered all-reduce normally makes the
// results bit for bit equal.
func TestDDPCrashRecovers(t *testing.T) {
	clean := cleanRun(t)
	if clean.Step != 60 || clean.WorldSize != 4 || clean.RestartCount != 0 {
		t.Fatalf("uninterrupted run: step %d world %d restarts %d; want 60, 4, 0", clean.Step, clean.WorldSize, clean.RestartCount)
	}
	marker := filepath.Join(t.TempDir(), "crashed")
	crashed := runTwoNodes(t, "--crash-at-step", "25", "--crash-rank", "3", "--crash-marker", marker)
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the crash was not injected")
	}
	if crashed.Step != 60 || crashed.WorldSize != 4 || crashed.RestartCount != 1 {
		t.Fatalf("crashed run: step %d world %d restarts %d; want 60, 4, 1", crashed.Step, crashed.WorldSize, crashed.RestartCount)
	}
	d := maxRelDiff(t, clean.Weights, crashed.Weights)
	t.Logf("largest relative weight difference after a crash and resume: %g", d)
	if d > 1e-6 {
		t.Errorf("weights differ by %g relative, want <= 1e-6", d)
	}
}

// TestDDPNodeLostContinues kills one of two agents (--nnodes=1:2): the job
// finishes on the remaining node.
func TestDDPNodeLostContinues(t *testing.T) {
	c := newCluster(t, "shrink")
	dir := t.TempDir()
	args := append([]string{"--nnodes", "1:2"}, trainArgs(dir, "--step-sleep", "0.1")...)
	a0, a1 := c.agent("node0", args...), c.agent("node1", args...)
	waitExists(t, filepath.Join(dir, "ckpt.pt"), jobTimeout) // step 10 is done
	a1.kill(t)
	if code := a0.wait(t, jobTimeout); code != 0 {
		t.Fatalf("node0 exited %d:\n%s", code, a0.out)
	}
	r := readResult(t, filepath.Join(dir, "out.json"))
	if r.Step != 60 || r.WorldSize != 2 {
		t.Errorf("result: step %d world %d; want 60 on a world of 2", r.Step, r.WorldSize)
	}
}

// TestDDPNodeJoins starts a third agent mid-run (--nnodes=2:3): it is admitted
// at the next round and the job finishes on a world of six workers.
func TestDDPNodeJoins(t *testing.T) {
	c := newCluster(t, "grow")
	dir := t.TempDir()
	args := append([]string{"--nnodes", "2:3"}, trainArgs(dir, "--step-sleep", "0.1")...)
	a0, a1 := c.agent("node0", args...), c.agent("node1", args...)
	waitExists(t, filepath.Join(dir, "ckpt.pt"), jobTimeout) // step 10 is done
	a2 := c.agent("node2", args...)
	for _, a := range []*process{a0, a1, a2} {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}
	r := readResult(t, filepath.Join(dir, "out.json"))
	if r.Step != 60 || r.WorldSize != 6 || r.RestartCount != 0 {
		t.Errorf("result: step %d world %d restarts %d; want 60 on a world of 6 with no failure restart", r.Step, r.WorldSize, r.RestartCount)
	}
	worlds, _ := os.ReadFile(filepath.Join(dir, "world.log"))
	if !strings.Contains(string(worlds), "world=4") || !strings.Contains(string(worlds), "world=6") {
		t.Errorf("world.log does not show the world growing from 4 to 6:\n%s", worlds)
	}
}

// TestDDPFlashCheckpointResumesFromMemory runs the DDP example with flash
// checkpoints (memory every step, storage every 10) on two nodes of two
// workers, crashes a worker at step 25, and checks that the job resumed from
// step 24 held in memory, not from step 20 in storage, and ends with the
// same weights as an uninterrupted run.
func TestDDPFlashCheckpointResumesFromMemory(t *testing.T) {
	clean := cleanRun(t)
	dir := t.TempDir()
	store := filepath.Join(dir, "flash")
	crashed := runTwoNodesIn(t, dir, "--flash", store, "--crash-at-step", "25", "--crash-rank", "3",
		"--crash-marker", filepath.Join(dir, "crashed"))
	if crashed.Step != 60 || crashed.RestartCount != 1 {
		t.Fatalf("crashed run: step %d restarts %d; want 60, 1", crashed.Step, crashed.RestartCount)
	}
	worlds, _ := os.ReadFile(filepath.Join(dir, "world.log"))
	if !strings.Contains(string(worlds), "restart=1 world=4 rank=0 start_step=24") {
		t.Errorf("the restart did not resume from step 24 in memory; world.log:\n%s", worlds)
	}
	if d := maxRelDiff(t, clean.Weights, crashed.Weights); d > 1e-6 {
		t.Errorf("weights differ by %g relative, want <= 1e-6", d)
	}
	latest, err := os.ReadFile(filepath.Join(store, "latest"))
	if err != nil || strings.TrimSpace(string(latest)) != "60" {
		t.Errorf("storage's latest = %q (%v), want the last persisted step 60", latest, err)
	}
}
