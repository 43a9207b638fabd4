package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The master is SIGKILLed mid-training and started again on the same state
// dir and address: the job goes on where it was, losing nothing.

const (
	samplerSize, samplerBatch, samplerEpochs = 480, 4, 2
)

// samplerJob is a two-node ElasticSampler job with flash checkpoints in dir.
func samplerJob(dir string) []string {
	return []string{"--nnodes", "2", "--nproc-per-node", "2", "--max-restarts", "3", "--rdzv-conf", rdzvConf,
		"--checkpoint-dir", filepath.Join(dir, "flash"), "--checkpoint-keep", "2",
		filepath.Join(repoRoot, "examples", "elastic_data", "ddp_sampler.py"),
		"--size", strconv.Itoa(samplerSize), "--batch-size", strconv.Itoa(samplerBatch), "--epochs", strconv.Itoa(samplerEpochs),
		"--persist-every", "5", "--step-sleep", "0.05",
		"--log", dir, "--out", filepath.Join(dir, "out.json")}
}

// nodeRanks reads `rover status`: node id -> node rank.
func (c *cluster) nodeRanks(t *testing.T) map[string]int {
	t.Helper()
	out, err := exec.Command(roverBin, "status", "--master", c.addr, "--token-file", c.tokenFile).CombinedOutput()
	if err != nil {
		t.Fatalf("rover status: %v\n%s", err, out)
	}
	ranks := map[string]int{}
	row := regexp.MustCompile(`(?m)^(node\d+)\s+(\d+)\s`)
	for _, m := range row.FindAllStringSubmatch(string(out), -1) {
		ranks[m[1]], _ = strconv.Atoi(m[2])
	}
	return ranks
}

// latestCommitted reads the step in a checkpoint directory's latest marker
// (0 when there is none).
func latestCommitted(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "latest"))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// waitOutput waits until every process has printed text.
func waitOutput(t *testing.T, text string, ps ...*process) {
	t.Helper()
	for _, p := range ps {
		waitFor(t, jobTimeout, fmt.Sprintf("%s to print %q", p.name, text), func() bool {
			return strings.Contains(p.out.String(), text)
		})
	}
}

// TestMasterRestartLosesNothing SIGKILLs the master mid-epoch of a two-node
// ElasticSampler job with flash checkpoints and starts it again on the same
// state dir once both agents noticed: the workers never restart (one round,
// TORCHELASTIC_RESTART_COUNT 0), every sample is trained exactly once,
// checkpoints keep being committed, node ranks are unchanged, and the final
// weights equal an uninterrupted run's.
func TestMasterRestartLosesNothing(t *testing.T) {
	refDir := t.TempDir()
	ref := newCluster(t, "sampler-ref")
	r0, r1 := ref.agent("node0", samplerJob(refDir)...), ref.agent("node1", samplerJob(refDir)...)
	for _, a := range []*process{r0, r1} {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("reference %s exited %d:\n%s", a.name, code, a.out)
		}
	}
	want := readResult(t, filepath.Join(refDir, "out.json"))

	dir := t.TempDir()
	c := newCluster(t, "master-restart", "--state-dir", filepath.Join(dir, "state"))
	a0, a1 := c.agent("node0", samplerJob(dir)...), c.agent("node1", samplerJob(dir)...)
	steps := func() int { return countSteps(readTrainLogs(t, dir)) }
	waitFor(t, jobTimeout, "step 20 with a committed checkpoint", func() bool {
		return steps() >= 4*20 && latestCommitted(filepath.Join(dir, "flash")) > 0
	})
	ranksBefore := c.nodeRanks(t)
	c.master.kill(t)
	committedAtKill := latestCommitted(filepath.Join(dir, "flash"))
	waitOutput(t, "lost the master", a0, a1) // the outage lasts until both agents saw it
	c.restartMaster("master2")
	waitOutput(t, "restored master state", c.master)
	if got := c.nodeRanks(t); len(got) != 2 || got["node0"] != ranksBefore["node0"] || got["node1"] != ranksBefore["node1"] {
		t.Errorf("node ranks %v after the master restart, were %v", got, ranksBefore)
	}
	for _, a := range []*process{a0, a1} {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}
	if code := c.master.wait(t, 30*time.Second); code != 0 {
		t.Errorf("the restarted master exited %d:\n%s", code, c.master.out)
	}

	logs := readTrainLogs(t, dir)
	for _, l := range logs {
		if l.round != 1 || l.start != 0 {
			t.Errorf("a worker started in round %d at step %d: workers must not restart when the master does", l.round, l.start)
		}
	}
	checkExactlyOnce(t, logs, samplerSize, samplerEpochs, 4*samplerBatch)
	if got := latestCommitted(filepath.Join(dir, "flash")); got <= committedAtKill {
		t.Errorf("latest committed step %d, %d when the master was killed: no checkpoint was committed after the restart", got, committedAtKill)
	}
	got := readResult(t, filepath.Join(dir, "out.json"))
	if got.Step != want.Step {
		t.Errorf("finished at step %d, the uninterrupted run at %d", got.Step, want.Step)
	}
	if d := maxRelDiff(t, want.Weights, got.Weights); d > 1e-6 {
		t.Errorf("final weights differ from an uninterrupted run's by %g relative", d)
	}
}

// TestMasterRestartAtTheEnd kills the master while the last steps run: the
// workers finish without it, and once it is back the job ends and every
// process exits 0.
func TestMasterRestartAtTheEnd(t *testing.T) {
	dir := t.TempDir()
	c := newCluster(t, "master-end", "--state-dir", filepath.Join(dir, "state"))
	// Steps of 0.2 s after the checkpoint of step 50: the master dies within
	// the last 10 steps, well before they end.
	args := append([]string{"--nnodes", "2"}, trainArgs(dir, "--step-sleep", "0.2", "--ckpt-every", "50")...)
	a0, a1 := c.agent("node0", args...), c.agent("node1", args...)
	waitExists(t, filepath.Join(dir, "ckpt.pt"), jobTimeout)
	c.master.kill(t)
	waitOutput(t, "lost the master", a0)
	c.restartMaster("master2")
	for _, a := range []*process{a0, a1} {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}
	if code := c.master.wait(t, 30*time.Second); code != 0 {
		t.Errorf("the restarted master exited %d:\n%s", code, c.master.out)
	}
	if r := readResult(t, filepath.Join(dir, "out.json")); r.Step != 60 || r.RestartCount != 0 {
		t.Errorf("result: step %d, restarts %d; want 60, 0", r.Step, r.RestartCount)
	}
}

// workerPIDs lists the python processes whose command line mentions dir.
func workerPIDs(dir string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if strings.Contains(filepath.Base(args[0]), "python") && strings.Contains(string(b), dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestCrashMasterRestartCrash: a worker crashes, the master restarts, another
// worker crashes: both failures are handled within the restart budget (which
// the restart does not reset) and the job succeeds with the same weights.
func TestCrashMasterRestartCrash(t *testing.T) {
	clean := cleanRun(t)
	dir := t.TempDir()
	c := newCluster(t, "crash-restart-crash", "--state-dir", filepath.Join(dir, "state"))
	marker := filepath.Join(dir, "crashed")
	// The job holds at step 20 until the test has killed a worker after
	// the master's restart: with fast restarts it could end before.
	hold := filepath.Join(dir, "go-on")
	// workerPIDs finds workers by their command line, which a worker run by
	// a standby rewrites to the cold one (docs/design/restart.md).
	args := append([]string{"--nnodes", "2"}, trainArgs(dir, "--step-sleep", "0.1",
		"--crash-at-step", "15", "--crash-rank", "3", "--crash-marker", marker,
		"--hold-at-step", "20", "--hold-file", hold)...)
	a0, a1 := c.agent("node0", args...), c.agent("node1", args...)
	waitOutput(t, "round=2", a0, a1) // the first crash restarted the workers in round 2
	c.master.kill(t)
	waitOutput(t, "lost the master", a0, a1)
	c.restartMaster("master2")
	waitOutput(t, "restored master state", c.master)
	if !strings.Contains(c.master.out.String(), "restarts=1") {
		t.Errorf("the restarted master does not count the first restart:\n%s", c.master.out)
	}
	// The workers of round 2 may still be starting (forked, not yet
	// running python) when the master is back.
	var pids []int
	waitFor(t, time.Minute, "a worker process to crash", func() bool {
		pids = workerPIDs(dir)
		return len(pids) > 0
	})
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, a := range []*process{a0, a1} {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}
	r := readResult(t, filepath.Join(dir, "out.json"))
	if r.Step != 60 || r.RestartCount != 2 {
		t.Errorf("result: step %d, restarts %d; want 60, 2", r.Step, r.RestartCount)
	}
	if d := maxRelDiff(t, clean.Weights, r.Weights); d > 1e-6 {
		t.Errorf("weights differ from an uninterrupted run's by %g relative", d)
	}
}

// TestMasterKilledWhileGoWorkersLease SIGKILLs the master while 32 Go SDK
// workers lease and complete shards through their agent, and starts it again
// on the same state dir: the workers' calls wait for it, no worker restarts,
// and every sample of both epochs is completed exactly once.
func TestMasterKilledWhileGoWorkersLease(t *testing.T) {
	const size, epochs = 3200, 2
	dir := t.TempDir()
	c := newCluster(t, "sdk-master-restart", "--state-dir", filepath.Join(dir, "state"))
	a := c.agent("node0", "--nnodes", "1", "--nproc-per-node", "32", "--rdzv-conf", rdzvConf, "--no-python", sdkWorker,
		"--out", dir, "--size", strconv.Itoa(size), "--shard-size", "10", "--epochs", strconv.Itoa(epochs), "--per-shard", "20ms")
	done := filepath.Join(dir, "done.jsonl")
	waitFor(t, jobTimeout, "100 shards completed", func() bool {
		_, n := leasedLines(t, done)
		return n >= 100
	})
	c.master.kill(t)
	waitOutput(t, "lost the master", a)
	c.restartMaster("master2")
	if code := a.wait(t, jobTimeout); code != 0 {
		t.Fatalf("agent exited %d:\n%s", code, a.out)
	}
	if strings.Contains(a.out.String(), "round=2") {
		t.Errorf("the workers restarted:\n%s", a.out)
	}
	count, _ := leasedLines(t, done)
	for e := int64(0); e < epochs; e++ {
		for i := int64(0); i < size; i++ {
			if n := count[[2]int64{e, i}]; n != 1 {
				t.Errorf("epoch %d sample %d completed %d times, want once", e, i, n)
			}
		}
	}
}
