package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hangTimeout is the e2e jobs' --hang-timeout: short, so that the tests
// are quick, well under the example's --first-step-sleep, and well above
// the longest ordinary step of a loaded 2-core machine (5s was not: a
// step starved that long was rightly declared a second hang).
const hangTimeout = 10 * time.Second

// TestHangStacksAndRestart runs the DDP example on two nodes with
// --hang-timeout=10s --hang-detection=2, its first step longer than the
// timeout (not a hang: nothing completed yet), then stops one worker with
// SIGSTOP mid-training. Its peers block in their next collective; within
// the timeout plus a few seconds every node's log directory holds the
// stacks of its workers (the live ones through faulthandler, the stopped
// one reported as stopped), the master restarts the workers (the stopped
// one is resumed and ended), and the job finishes.
func TestHangStacksAndRestart(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	saves, times := filepath.Join(dir, "saves.log"), filepath.Join(dir, "times.log")
	c := newCluster(t, "ddp")
	agents := map[string]*process{}
	for _, name := range []string{"node0", "node1"} {
		args := append([]string{"--nnodes", "2", "--hang-timeout", hangTimeout.String(), "--hang-detection", "2",
			"--log-dir", filepath.Join(dir, "logs", name)},
			trainArgs(dir, "--flash", store, "--steps", "150", "--step-sleep", "0.05", "--first-step-sleep", "15",
				"--log-saves", saves, "--log-times", times)...)
		agents[name] = c.agent(name, args...)
	}
	// Rank 3 (node1's local rank 1) saved step 20: training runs.
	var pid int
	waitFor(t, 2*time.Minute, "rank 3 to save step 20", func() bool {
		pid = savedPid(saves, 3, 20)
		return pid > 0
	})
	if strings.Contains(c.master.out.String(), "the job hangs") {
		t.Fatalf("a long first step was called a hang:\n%s", c.master.out)
	}
	stopped := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP rank 3 (pid %d): %v", pid, err)
	}
	var files map[string]string
	waitFor(t, hangTimeout+time.Minute, "both nodes' stacks on disk", func() bool {
		files = hangFiles(t, filepath.Join(dir, "logs"))
		return len(files) == 2
	})
	onDisk := time.Since(stopped)
	all := files["node0"] + files["node1"]
	for rank := range 4 {
		if !strings.Contains(all, "== rank "+strconv.Itoa(rank)+" (local rank ") {
			t.Errorf("no stacks of rank %d:\n%s", rank, all)
		}
	}
	for _, want := range []string{"== rank 3 (local rank 1) pid " + strconv.Itoa(pid) + ": T (stopped)",
		"stopped (SIGSTOP or a debugger): a stopped process cannot run its faulthandler"} {
		if !strings.Contains(all, want) {
			t.Errorf("the stopped worker is not reported as stopped (%q):\n%s", want, all)
		}
	}
	// The three live workers' Python stacks, through faulthandler: they
	// wait in the backward pass's collective for the stopped one (a
	// worker may have more threads than its main one: the progress
	// reporter's flush timer).
	if n := strings.Count(all, "-- faulthandler, pid "); n != 3 || strings.Count(all, "in backward") < 3 {
		t.Errorf("%d Python stacks, want the 3 live workers' (in backward):\n%s", n, all)
	}
	waitFor(t, 2*time.Minute, "training to resume after the restart", func() bool {
		b, _ := os.ReadFile(times)
		return strings.Contains(string(b), "event=trained restart=1")
	})
	resumed := time.Since(stopped)
	for name, a := range agents {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", name, code, a.out)
		}
	}
	r := readResult(t, filepath.Join(dir, "out.json"))
	if r.Step != 150 || r.RestartCount != 1 {
		t.Errorf("result: step %d restarts %d; want 150, 1", r.Step, r.RestartCount)
	}
	if n := strings.Count(c.master.out.String(), "the job hangs"); n != 1 {
		t.Errorf("the master declared %d hangs, want 1 (the restarted workers' first step is not one):\n%s", n, c.master.out)
	}
	t.Logf("hang-timeout %s: SIGSTOP to both nodes' stacks on disk %s, to training resumed %s",
		hangTimeout, onDisk.Round(10*time.Millisecond), resumed.Round(10*time.Millisecond))
}

var hangSaveLine = regexp.MustCompile(`restart=0 rank=(\d+) pid=(\d+) step=(\d+)`)

// savedPid returns the pid of rank once it saved step (0: not yet).
func savedPid(path string, rank, step int) int {
	b, _ := os.ReadFile(path)
	for _, m := range hangSaveLine.FindAllStringSubmatch(string(b), -1) {
		r, _ := strconv.Atoi(m[1])
		s, _ := strconv.Atoi(m[3])
		if r == rank && s >= step {
			pid, _ := strconv.Atoi(m[2])
			return pid
		}
	}
	return 0
}

// hangFiles returns each node's stacks file (by node name) under logs.
func hangFiles(t *testing.T, logs string) map[string]string {
	t.Helper()
	out := map[string]string{}
	paths, _ := filepath.Glob(filepath.Join(logs, "*", "*", "hangs", "hang-*.txt"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		node := filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(p))))
		out[node] = string(b)
	}
	return out
}
