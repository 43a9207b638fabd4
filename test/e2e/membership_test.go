package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// setArg returns args with the value after the first flag replaced.
func setArg(t *testing.T, args []string, flag, value string) []string {
	t.Helper()
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("no %s in %v", flag, args)
	}
	args = slices.Clone(args)
	args[i+1] = value
	return args
}

// descendants returns the pids of pid's descendants (its workers, which
// run in process groups of their own), read from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces; cut at the last ')'.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		children[ppid] = append(children[ppid], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// status runs `rover status` against the cluster's master.
func (c *cluster) status(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(roverBin, "status", "--master", c.addr, "--token-file", c.tokenFile).CombinedOutput()
	if err != nil {
		t.Fatalf("rover status: %v\n%s", err, out)
	}
	return string(out)
}

// waitStep waits until a rank of the job saved step (train.py's --log-saves,
// which logs flash saves).
func waitStep(t testing.TB, saves string, step int) {
	t.Helper()
	waitFor(t, jobTimeout, fmt.Sprintf("training to reach step %d", step), func() bool {
		return slices.ContainsFunc(readSaves(t, saves), func(s saveLine) bool { return s.step >= step })
	})
}

// killAgent SIGKILLs an agent; its workers die with it (their parent-death
// signal), as when a machine goes away. It waits until they are gone.
func killAgent(t *testing.T, a *process) {
	t.Helper()
	workers := descendants(a.cmd.Process.Pid)
	a.kill(t)
	waitFor(t, time.Minute, "the killed agent's workers to die", func() bool {
		return !slices.ContainsFunc(workers, func(pid int) bool { return syscall.Kill(pid, 0) == nil && !zombie(pid) })
	})
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] == "Z"
}

// TestDDPLostNodeSpendsNoRestart runs two nodes with no restart budget and
// SIGKILLs one node's agent (its workers die with it) mid-training, at a
// random step, then starts a new agent for that node (at once, or once the
// master declared the node lost). The survivor's workers
// die of their broken collectives and its agent reports a failure, usually
// before the master has noticed the loss: the master takes that failure as
// the loss's consequence, so the job finishes with no restart spent and the
// same weights as an uninterrupted run, and its failure records name the
// lost node, never the survivor.
func TestDDPLostNodeSpendsNoRestart(t *testing.T) {
	clean := cleanRun(t)
	for try := range 2 {
		t.Run(fmt.Sprint(try), func(t *testing.T) {
			dir := t.TempDir()
			saves := filepath.Join(dir, "saves.log")
			c := newCluster(t, "blame")
			args := append([]string{"--nnodes", "2"}, trainArgs(dir, "--flash", filepath.Join(dir, "flash"),
				"--log-saves", saves, "--step-sleep", "0.05")...)
			args = setArg(t, args, "--max-restarts", "0")
			a0, a1 := c.agent("node0", args...), c.agent("node1", args...)
			at := 12 + time.Now().Nanosecond()%20 // a random step mid-run
			waitStep(t, saves, at)
			killAgent(t, a1)
			if try == 1 {
				// The other order: the master notices the loss before the
				// node's new agent joins.
				waitFor(t, time.Minute, "the master to declare node1 lost", func() bool {
					return regexp.MustCompile(`(?m)^node1\s.*lost: `).MatchString(c.status(t))
				})
			}
			a1 = c.agent("node1", args...)
			var st string
			waitFor(t, jobTimeout, "a new world of both nodes", func() bool {
				st = c.status(t)
				return regexp.MustCompile(`round [2-9]\d* \(training\), world size 4`).MatchString(st)
			})
			for _, a := range []*process{a0, a1} {
				if code := a.wait(t, jobTimeout); code != 0 {
					t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
				}
			}
			t.Logf("killed node1 at step %d; status in the new world:\n%s", at, st)
			if !strings.Contains(st, "restarts 0 of 0") {
				t.Errorf("status does not show 0 of 0 restarts spent:\n%s", st)
			}
			// The failure table's rows: ROUND NODE RANK EXIT CAUSE ACTION WHY.
			if !regexp.MustCompile(`(?m)^\d+\s+node1\s+\d+\s+-1\s+.*node node1 \(node rank \d\) was lost`).MatchString(st) {
				t.Errorf("the failure records do not name the lost node1:\n%s", st)
			}
			if regexp.MustCompile(`(?m)^\d+\s+node0\s`).MatchString(st) {
				t.Errorf("a failure record names the survivor node0:\n%s", st)
			}
			res := readResult(t, filepath.Join(dir, "out.json"))
			if res.Step != 60 || res.WorldSize != 4 || res.RestartCount != 0 {
				t.Fatalf("result: step %d world %d restarts %d; want 60, 4, 0", res.Step, res.WorldSize, res.RestartCount)
			}
			if d := maxRelDiff(t, clean.Weights, res.Weights); d > 1e-6 {
				t.Errorf("weights differ by %g relative, want <= 1e-6", d)
			}
		})
	}
}

// TestFrozenNodeIsLost freezes one of two nodes (SIGSTOP to its agent and
// its workers: their sockets stay open, so the master sees no disconnect)
// under the default heartbeat settings (5 s beats, 30 s timeout): the master
// declares it lost by its missing heartbeats, within the timeout plus a
// tick, and the job finishes on the other node (--nnodes 1:2).
func TestFrozenNodeIsLost(t *testing.T) {
	dir := t.TempDir()
	saves := filepath.Join(dir, "saves.log")
	c := newCluster(t, "frozen")
	args := append([]string{"--nnodes", "1:2"}, trainArgs(dir, "--flash", filepath.Join(dir, "flash"),
		"--log-saves", saves, "--step-sleep", "0.1")...)
	// The defaults, but for the test's short timeouts of rounds.
	args = setArg(t, args, "--rdzv-conf", "last_call_timeout=1s,join_timeout=60s")
	args = slices.Insert(args, 0, "--heartbeat-interval", "5s") // after the cluster's 1s, before the script
	a0, a1 := c.agent("node0", args...), c.agent("node1", args...)
	waitStep(t, saves, 12)
	frozen := append([]int{a1.cmd.Process.Pid}, descendants(a1.cmd.Process.Pid)...)
	t.Cleanup(func() {
		for _, pid := range frozen {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	for _, pid := range frozen {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP %d: %v", pid, err)
		}
	}
	stopped := time.Now()
	var st string
	waitFor(t, 5*time.Minute, "the master to declare node1 lost", func() bool {
		st = c.status(t)
		return regexp.MustCompile(`(?m)^node1\s.*lost: no heartbeat`).MatchString(st)
	})
	t.Logf("froze node1 (%d processes); declared lost %.1fs later:\n%s", len(frozen), time.Since(stopped).Seconds(), st)
	if code := a0.wait(t, jobTimeout); code != 0 {
		t.Fatalf("node0 exited %d:\n%s", code, a0.out)
	}
	if r := readResult(t, filepath.Join(dir, "out.json")); r.Step != 60 || r.WorldSize != 2 {
		t.Errorf("result: step %d world %d; want 60 on node0's world of 2", r.Step, r.WorldSize)
	}
}

// TestDDPFlashReplacedNodeResumesFromMemory: a two-node DDP job with flash
// checkpoints (memory every step, storage every 10) loses a node at step ~25
// (its agent SIGKILLed, its workers with it), and a new node, with nothing
// in memory, takes its place. Every rank resumes from the same step: the
// newest the survivor held in memory (which its agent made durable before
// rejoining, for the newcomer to load from storage), not the last persisted
// step 20; the final weights equal an uninterrupted run's.
func TestDDPFlashReplacedNodeResumesFromMemory(t *testing.T) {
	clean := cleanRun(t)
	dir := t.TempDir()
	saves := filepath.Join(dir, "saves.log")
	c := newCluster(t, "replace")
	args := append([]string{"--nnodes", "2"}, trainArgs(dir, "--flash", filepath.Join(dir, "flash"),
		"--log-saves", saves, "--step-sleep", "0.05")...)
	a0, a1 := c.agent("node0", args...), c.agent("node1", args...)
	waitStep(t, saves, 25)
	killAgent(t, a1)
	newest := 0 // the newest step node0's ranks (0 and 1) both saved
	per := map[int]int{}
	for _, s := range readSaves(t, saves) {
		if s.rank < 2 && s.restart == 0 {
			per[s.rank] = max(per[s.rank], s.step)
		}
	}
	newest = min(per[0], per[1])
	a2 := c.agent("node2", args...) // a new machine: nothing in memory
	for _, a := range []*process{a0, a2} {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}
	res := readResult(t, filepath.Join(dir, "out.json"))
	if res.Step != 60 || res.WorldSize != 4 {
		t.Fatalf("result: step %d world %d; want 60, 4", res.Step, res.WorldSize)
	}
	starts := readRestarts(t, filepath.Join(dir, "world.log"), 4, 4)
	t.Logf("node1 killed after node0 saved step %d; resumed:\n%s", newest, startLines(starts))
	if s := sameStep(t, starts); s < 24 || s < newest {
		t.Errorf("every rank resumed from step %d; want the survivor's newest step in memory, %d (>= 24), not the last persisted 20", s, newest)
	}
	if d := maxRelDiff(t, clean.Weights, res.Weights); d > 1e-6 {
		t.Errorf("weights differ by %g relative, want <= 1e-6", d)
	}
}

// TestDDPFlashGrownWorldResumesFromMemory adds a third node, with nothing in
// memory, to a two-node DDP job with flash checkpoints (memory every step,
// storage every 10) at step ~25. The running workers are stopped, not
// failed, so it is the agents' persisting before they rejoin that lets
// every rank of the grown world resume from the newest step the two nodes
// held in memory, not from the last persisted step 20.
func TestDDPFlashGrownWorldResumesFromMemory(t *testing.T) {
	dir := t.TempDir()
	saves := filepath.Join(dir, "saves.log")
	c := newCluster(t, "grow-flash")
	args := append([]string{"--nnodes", "2:3"}, trainArgs(dir, "--flash", filepath.Join(dir, "flash"),
		"--log-saves", saves, "--step-sleep", "0.05")...)
	a0, a1 := c.agent("node0", args...), c.agent("node1", args...)
	waitStep(t, saves, 25)
	before := 0 // a step every rank had saved before the new node came
	per := map[int]int{}
	for _, s := range readSaves(t, saves) {
		per[s.rank] = max(per[s.rank], s.step)
	}
	before = min(per[0], per[1], per[2], per[3])
	a2 := c.agent("node2", args...)
	for _, a := range []*process{a0, a1, a2} {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}
	if r := readResult(t, filepath.Join(dir, "out.json")); r.Step != 60 || r.WorldSize != 6 {
		t.Fatalf("result: step %d world %d; want 60 on a world of 6", r.Step, r.WorldSize)
	}
	starts := readRestarts(t, filepath.Join(dir, "world.log"), 4, 6)
	t.Logf("node2 added once every rank had saved step %d; resumed:\n%s", before, startLines(starts))
	for _, s := range starts {
		if s.world != 6 {
			t.Errorf("%q: want a world of 6", s.line)
		}
	}
	if resumed := sameStep(t, starts); resumed < before || resumed <= 20 {
		t.Errorf("every rank resumed from step %d; want at least %d, the newest step all held in memory (not 20)", resumed, before)
	}
}
