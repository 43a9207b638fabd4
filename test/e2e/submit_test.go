package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests here run whole jobs with `rover submit`: an embedded master
// that starts each node's agent as a child process on the local platform,
// relaunches nodes that die, and stops them all on Ctrl-C.

// submitDDP submits the DDP example on two nodes of two workers, with the
// job's files in dir, as the hand-run jobs of ddp_test.go run it.
func submitDDP(t *testing.T, job, dir string, extra ...string) *submitted {
	t.Helper()
	args := append([]string{"--rdzv-id", job, "--nnodes", "2"}, trainArgs(dir, extra...)...)
	return submit(t, job, args...)
}

// TestSubmitDDPMatchesHandRun submits the two-node DDP job: it succeeds,
// shows every node's output prefixed with its node id, keeps each node's
// log, and ends with the same weights as the job run by hand (two `rover
// run` agents against `rover master`).
func TestSubmitDDPMatchesHandRun(t *testing.T) {
	clean := cleanRun(t)
	dir := t.TempDir()
	s := submitDDP(t, uniqueJob("sub-ddp"), dir)
	if code := s.wait(t, jobTimeout); code != 0 {
		t.Fatalf("rover submit exited %d, want 0", code)
	}
	res := readResult(t, filepath.Join(dir, "out.json"))
	if res.Step != 60 || res.WorldSize != 4 || res.RestartCount != 0 {
		t.Fatalf("result: step %d world %d restarts %d; want 60, 4, 0", res.Step, res.WorldSize, res.RestartCount)
	}
	if d := maxRelDiff(t, clean.Weights, res.Weights); d > 1e-6 {
		t.Errorf("weights differ from the hand-run job's by %g relative, want <= 1e-6", d)
	}
	if ids, want := s.nodeIDs(t), []string{s.node(0, 0), s.node(1, 0)}; !slices.Equal(ids, want) {
		t.Errorf("node logs %v, want %v", ids, want)
	}
	if done := "[" + s.node(0, 0) + "][default0]:done: 60 steps"; !strings.Contains(s.stdout.String(), done) {
		t.Errorf("stdout does not show node 0's worker output prefixed with its node id (%q)", done)
	}
	if log, err := os.ReadFile(filepath.Join(s.dir, "nodes", s.node(0, 0), "stdout.log")); err != nil || !strings.Contains(string(log), "done: 60 steps") {
		t.Errorf("node 0's stdout.log does not hold its workers' output (%v):\n%s", err, log)
	}
	errOut := s.stderr.String()
	for _, want := range []string{"job " + s.job + " succeeded after ", "nodes on local:"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	for rank := range 2 {
		if re := s.summaryRow(rank, 0, "Succeeded", "0/3"); !re.MatchString(errOut) {
			t.Errorf("the summary has no row %s", re)
		}
	}
}

// TestSubmitRelaunchesKilledNode SIGKILLs the agent of node rank 1 (its
// workers die with it) at a random step after a checkpoint was committed:
// the master relaunches it as <job>-worker-1-1 with the same rank, every
// rank resumes from a checkpoint at least as new as the one committed
// before the kill, and the job succeeds with an uninterrupted run's
// weights. Nothing of the killed agent is left in shared memory.
func TestSubmitRelaunchesKilledNode(t *testing.T) {
	clean := cleanRun(t)
	dir := t.TempDir()
	saves := filepath.Join(dir, "saves.log")
	s := submitDDP(t, uniqueJob("sub-kill"), dir, "--flash", filepath.Join(dir, "flash"),
		"--log-saves", saves, "--step-sleep", "0.1")
	waitFor(t, jobTimeout, "a committed checkpoint", func() bool { return s.committed() >= 10 })
	at := 12 + rand.IntN(17) // a random step in 12..28
	waitStep(t, saves, at)
	committed := s.committed()
	victim := agentPid(s.node(1, 0))
	if victim == 0 {
		t.Fatalf("no agent process of node %s", s.node(1, 0))
	}
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the agent of %s: %v", s.node(1, 0), err)
	}
	t.Logf("killed the agent of %s (pid %d) at step %d, checkpoint step %d committed", s.node(1, 0), victim, at, committed)
	waitExists(t, filepath.Join(s.dir, "nodes", s.node(1, 1)), jobTimeout)
	if code := s.wait(t, jobTimeout); code != 0 {
		t.Fatalf("rover submit exited %d, want 0", code)
	}

	if ids, want := s.nodeIDs(t), []string{s.node(0, 0), s.node(1, 0), s.node(1, 1)}; !slices.Equal(ids, want) {
		t.Errorf("node logs %v, want %v", ids, want)
	}
	errOut := s.stderr.String()
	for _, re := range []*regexp.Regexp{s.summaryRow(0, 0, "Succeeded", "0/3"), s.summaryRow(1, 1, "Succeeded", "1/3")} {
		if !re.MatchString(errOut) {
			t.Errorf("the summary has no row %s", re)
		}
	}
	if want := "relaunching it as " + s.node(1, 1) + " (relaunch 1 of 3)"; !strings.Contains(errOut, want) {
		t.Errorf("stderr does not say %q", want)
	}
	// The platform saw the killed agent exit: the relaunch's cause.
	if want := "node relaunches 1 (exited 1)"; !strings.Contains(errOut, want) {
		t.Errorf("the summary does not say %q", want)
	}
	res := readResult(t, filepath.Join(dir, "out.json"))
	if res.Step != 60 || res.WorldSize != 4 {
		t.Fatalf("result: step %d world %d; want 60, 4", res.Step, res.WorldSize)
	}
	if d := maxRelDiff(t, clean.Weights, res.Weights); d > 1e-6 {
		t.Errorf("weights differ from an uninterrupted run's by %g relative, want <= 1e-6", d)
	}
	resumed := resumedSteps(t, filepath.Join(dir, "world.log"))
	t.Logf("every rank resumed from step %d", resumed)
	if resumed < committed {
		t.Errorf("the job resumed from step %d, older than checkpoint step %d committed before the kill", resumed, committed)
	}
	// The killed agent's arenas are an orphan no other node may adopt (the
	// replacement has a node id of its own): rover submit removes them.
	if !strings.Contains(errOut, `msg="removed shared memory that killed agents left" directories=1`) {
		t.Errorf("rover submit did not report removing the killed agent's shared memory")
	}
	if left := jobArenas(s.job); len(left) > 0 {
		t.Errorf("the job left shared memory behind: %v", left)
	}
}

// resumedSteps reads train.py's --log-world of a job whose four ranks
// started once more after their first start, all from a checkpoint, and
// returns the step they resumed from.
func resumedSteps(t *testing.T, path string) int {
	t.Helper()
	starts := readRestarts(t, path, 4, 4)
	for _, s := range starts {
		if s.world != 4 || (s.source != "memory" && s.source != "storage") {
			t.Errorf("%q: want a world of 4 resumed from a checkpoint", s.line)
		}
	}
	return sameStep(t, starts)
}

// TestSubmitWorkerCrashRestartsInPlace crashes one worker once: its agent
// restarts the workers in place (one restart of the job's budget), no node
// is relaunched, and the weights equal an uninterrupted run's.
func TestSubmitWorkerCrashRestartsInPlace(t *testing.T) {
	clean := cleanRun(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "crashed")
	s := submitDDP(t, uniqueJob("sub-crash"), dir, "--crash-at-step", "25", "--crash-rank", "3", "--crash-marker", marker)
	if code := s.wait(t, jobTimeout); code != 0 {
		t.Fatalf("rover submit exited %d, want 0", code)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the crash was not injected")
	}
	res := readResult(t, filepath.Join(dir, "out.json"))
	if res.Step != 60 || res.WorldSize != 4 || res.RestartCount != 1 {
		t.Fatalf("result: step %d world %d restarts %d; want 60, 4, 1", res.Step, res.WorldSize, res.RestartCount)
	}
	if d := maxRelDiff(t, clean.Weights, res.Weights); d > 1e-6 {
		t.Errorf("weights differ from an uninterrupted run's by %g relative, want <= 1e-6", d)
	}
	if ids, want := s.nodeIDs(t), []string{s.node(0, 0), s.node(1, 0)}; !slices.Equal(ids, want) {
		t.Errorf("node logs %v, want %v: no node relaunched", ids, want)
	}
	errOut := s.stderr.String()
	for _, want := range []string{"restarts 1 of 3, node relaunches 0"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("the summary does not say %q", want)
		}
	}
	for rank := range 2 {
		if re := s.summaryRow(rank, 0, "Succeeded", "0/3"); !re.MatchString(errOut) {
			t.Errorf("the summary has no row %s", re)
		}
	}
}

// suicidalNode is a worker script whose node rank 1 keeps killing its own
// agent (SIGKILL, as a machine that dies), every time it is relaunched.
const suicidalNode = `import os, signal, time
if os.environ.get("GROUP_RANK") == "1" and os.environ.get("LOCAL_RANK") == "0":
    print("killing my agent", os.getppid(), flush=True)
    time.sleep(0.3)
    os.kill(os.getppid(), signal.SIGKILL)
time.sleep(300)
`

// TestSubmitNodeExhaustsRelaunchBudget: a node that dies every time it is
// relaunched uses up its budget of 3 relaunches, and then the job fails,
// naming the node and why; none of its processes is left.
func TestSubmitNodeExhaustsRelaunchBudget(t *testing.T) {
	script := filepath.Join(t.TempDir(), "suicidal.py")
	if err := os.WriteFile(script, []byte(suicidalNode), 0o644); err != nil {
		t.Fatal(err)
	}
	job := uniqueJob("sub-budget")
	s := submit(t, job, "--quiet", "--rdzv-id", job, "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-conf", rdzvConf, script)
	if code := s.wait(t, jobTimeout); code != 1 {
		t.Fatalf("rover submit exited %d, want 1 (job failed)", code)
	}
	errOut := s.stderr.String()
	for _, want := range []string{
		"job " + job + " failed after ",
		"node " + s.node(1, 3) + " (worker rank 1) exited with code 137 (signal 9)",
		"relaunch budget of 3 is used up",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if re := s.summaryRow(1, 3, "Failed", "3/3"); !re.MatchString(errOut) {
		t.Errorf("the summary has no row %s", re)
	}
	want := []string{s.node(0, 0), s.node(1, 0), s.node(1, 1), s.node(1, 2), s.node(1, 3)}
	if ids := s.nodeIDs(t); !slices.Equal(ids, want) {
		t.Errorf("node logs %v, want %v", ids, want)
	}
	if left := jobProcesses(job); len(left) > 0 {
		t.Errorf("processes of the failed job remain:\n%s", describe(left))
	}
}

// TestSubmitInterruptStopsEverything sends SIGINT (Ctrl-C) to rover submit
// while a job trains with flash checkpoints in shared memory: it exits 130
// and leaves no process of the job (agents or workers) and none of its
// shared memory.
func TestSubmitInterruptStopsEverything(t *testing.T) {
	dir := t.TempDir()
	// --steps 100000 (train.py takes the last --steps): it trains until stopped.
	s := submitDDP(t, uniqueJob("sub-int"), dir, "--flash", filepath.Join(dir, "flash"), "--step-sleep", "0.05", "--steps", "100000")
	waitFor(t, jobTimeout, "training with checkpoints in shared memory", func() bool {
		return s.committed() >= 10 && len(jobArenas(s.job)) == 2 &&
			strings.Contains(s.stdout.String(), "["+s.node(0, 0)+"][default0]:step 10/")
	})
	procs := jobProcesses(s.job)
	agents, workers := 0, 0
	for _, pid := range procs {
		if _, argv, ok := procEnv(pid); ok && slices.Contains(argv, "run") && filepath.Base(argv[0]) == "rover" {
			agents++
		} else if ok && slices.ContainsFunc(argv, func(a string) bool { return strings.HasSuffix(a, "train.py") }) {
			workers++
		}
	}
	if agents != 2 || workers < 4 {
		t.Fatalf("want 2 agents and 4 workers of the job running, found:\n%s", describe(procs))
	}
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := s.wait(t, time.Minute); code != 130 {
		t.Fatalf("rover submit exited %d after SIGINT, want 130", code)
	}
	if left := jobProcesses(s.job); len(left) > 0 {
		t.Errorf("processes of the interrupted job remain:\n%s", describe(left))
	}
	if left := jobArenas(s.job); len(left) > 0 {
		t.Errorf("the interrupted job left shared memory behind: %v", left)
	}
	if !strings.Contains(s.stderr.String(), "rover: stopped: received interrupt") {
		t.Errorf("stderr does not say the job was stopped by the interrupt")
	}
	// The summary tells the truth: the job ended because it was stopped,
	// its nodes are no longer running, and no node was lost or relaunched.
	summary := s.stderr.String()
	if i := strings.LastIndex(summary, "job "+s.job+" failed after"); i < 0 {
		t.Errorf("the summary does not say the job ended")
	} else {
		summary = summary[i:]
		for _, want := range []string{"stopped by its user: received interrupt", "node relaunches 0"} {
			if !strings.Contains(summary, want) {
				t.Errorf("the summary does not say %q:\n%s", want, summary)
			}
		}
		for _, bad := range []string{"Running", "was lost"} {
			if strings.Contains(summary, bad) {
				t.Errorf("the summary of a stopped job says %q:\n%s", bad, summary)
			}
		}
	}
}

// TestSubmitRefusesBadInput: a command line or job spec that cannot run is
// refused with exit code 2 and a message naming the problem, before
// anything starts (the job directory is not even created).
func TestSubmitRefusesBadInput(t *testing.T) {
	specs := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(specs, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const worker = "replicaSpecs:\n  worker:\n    replicas: 2\n%s    template:\n      spec:\n        containers:\n          - command: [python3, train.py]\n%s"
	good := file("good.yaml", fmt.Sprintf(worker, "", ""))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"malformed YAML", []string{file("bad.yaml", "replicaSpecs:\n  worker: [\n")}, "not valid YAML"},
		{"unknown field", []string{file("unknown.yaml", fmt.Sprintf(worker, "    bogusField: 1\n", ""))}, "replicaSpecs.worker.bogusField: unknown field"},
		{"image", []string{file("image.yaml", fmt.Sprintf(worker, "", "            image: pytorch/pytorch:latest\n"))}, "cannot honour replicaSpecs.worker.template.spec.containers[0].image"},
		{"replicas 1e9", []string{file("huge.yaml", strings.Replace(fmt.Sprintf(worker, "", ""), "replicas: 2", "replicas: 1e9", 1))}, "replicaSpecs.worker.replicas: 1000000000 is above the limit of 10000 nodes per group (MaxNodes)"},
		{"replicas 1000 on one machine", []string{file("many.yaml", strings.Replace(fmt.Sprintf(worker, "", ""), "replicas: 2", "replicas: 1000", 1))}, "replicaSpecs.worker.replicas: 1000 nodes is above its limit of 64 nodes per group"},
		{"job file and args", []string{good, "--steps", "3"}, "is a job file: it takes no other arguments"},
		{"min above max", []string{"--nnodes", "3:2", "train.py"}, "--nnodes=3:2: minimum 3 is greater than maximum 2"},
		{"zero nodes", []string{"--nnodes", "0", "train.py"}, "--nnodes=0: the minimum number of nodes must be at least 1"},
		{"rdzv endpoint", []string{"--rdzv-endpoint", "127.0.0.1:29400", "train.py"}, "remove --rdzv-endpoint"},
		{"node rank", []string{"--nnodes", "2", "--node-rank", "0", "train.py"}, "remove --node-rank"},
		{"no script", []string{"--nnodes", "2"}, "no training script given"},
		{"missing script", []string{"--nnodes", "2", "missing.py"}, "the script missing.py: stat missing.py: no such file or directory"},
		{"job dir not empty", []string{"--job-dir", specs, good}, "is not empty"},
		{"unknown flag", []string{"--bogus", "train.py"}, "unknown flag --bogus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobDir := filepath.Join(t.TempDir(), "job")
			cmd := exec.Command(roverBin, append([]string{"submit", "--job-dir", jobDir}, tc.args...)...)
			cmd.Dir = specs
			b, err := cmd.CombinedOutput()
			out, code := string(b), cmd.ProcessState.ExitCode()
			if err != nil && code < 0 {
				t.Fatalf("run rover submit: %v", err)
			}
			if code != 2 {
				t.Errorf("exit code %d, want 2; output:\n%s", code, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("output does not name the problem (%q):\n%s", tc.want, out)
			}
			if _, err := os.Stat(jobDir); err == nil {
				t.Errorf("the job directory was created: something started")
			}
		})
	}
}
