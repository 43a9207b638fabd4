package python

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProgressReports runs rover.progress with a fake clock and a fake
// agent call: a no-op outside rover run; inside, steps are timed (wall and
// CPU), summed and sent at most once a second, with the wall-clock time of
// the newest step; a better source (explicit
// step > checkpoint save > sampler batch) silences the others.
func TestProgressReports(t *testing.T) {
	dir := t.TempDir()
	if _, err := Extract(dir); err != nil {
		t.Fatal(err)
	}
	script := `
import json, os, sys
import rover.progress as p
p.step(1)  # outside rover run: nothing
assert p._reporter is None
os.environ["ROVER_AGENT_SOCKET"] = "/nonexistent"
sent = []
p._agent.call = lambda method, req, timeout=None: sent.append((method, req["progress"]))
flushes = []
p._schedule = lambda delay, fn: flushes.append(round(delay, 6))
now = [100.0]
p.time.monotonic = lambda: now[0]
p.time.process_time = lambda: now[0] / 10
p.time.time_ns = lambda: round(now[0] * 1000) * 1000000
for s in range(8):          # a step every 0.3 s
    p._next(p.SAMPLER)
    now[0] += 0.3
p.step(50)                  # an explicit step: the sampler is ignored from now on
p._next(p.SAMPLER)
now[0] += 2
p.step(51)
print(json.dumps([(m, {k: round(v, 6) if isinstance(v, float) else v for k, v in r.items()}) for m, r in sent]))
print(json.dumps(flushes))
`
	cmd := exec.Command("python3", "-c", script)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "LOCAL_RANK=1", "RANK=3")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	got := strings.TrimSpace(string(out))
	// Sent: step 0 at once; step 4 after 4 steps of 0.3 s (1.2 s >= 1 s);
	// then step 50 (a new source, nothing timed yet); step 51 after 2 s.
	// Each carries the wall-clock time its step was reached.
	want := `[["ReportProgress", {"localRank": 1, "rank": 3, "step": "0", "steps": "0", "wallSeconds": 0.0, "cpuSeconds": 0.0, "stepUnixNanos": "100000000000"}], ` +
		`["ReportProgress", {"localRank": 1, "rank": 3, "step": "4", "steps": "4", "wallSeconds": 1.2, "cpuSeconds": 0.12, "stepUnixNanos": "101200000000"}], ` +
		`["ReportProgress", {"localRank": 1, "rank": 3, "step": "50", "steps": "0", "wallSeconds": 0.0, "cpuSeconds": 0.0, "stepUnixNanos": "102400000000"}], ` +
		`["ReportProgress", {"localRank": 1, "rank": 3, "step": "51", "steps": "1", "wallSeconds": 2.0, "cpuSeconds": 0.2, "stepUnixNanos": "104400000000"}]]`
	// A flush is scheduled when a step is not sent at once (step 1, 0.7 s
	// before the next report is due), one at a time: the stub never runs
	// it, so none is scheduled after.
	wantFlushes := `[0.7]`
	if lines := strings.Split(got, "\n"); len(lines) != 2 || lines[0] != want || lines[1] != wantFlushes {
		t.Errorf("reports and flushes:\n got %s\nwant %s\n%s", got, want, wantFlushes)
	}
}

// TestProgressFlush runs rover.progress with the real clock and timer: a
// worker that completes 15 steps within its first second and then makes no
// further call still gets step 15 to its agent, by the reporter's timer,
// so a job that blocks early is seen to have progressed (and can hang).
func TestProgressFlush(t *testing.T) {
	dir := t.TempDir()
	if _, err := Extract(dir); err != nil {
		t.Fatal(err)
	}
	script := `
import json, os, threading
os.environ["ROVER_AGENT_SOCKET"] = "/nonexistent"
import rover.progress as p
got = threading.Event()
sent = []
def call(method, req, timeout=None):
    sent.append(req["progress"])
    if req["progress"]["step"] == "15":
        got.set()
p._agent.call = call
for s in range(1, 16):
    p.step(s)
assert got.wait(60), sent
print(json.dumps([(r["step"], r["steps"]) for r in sent]))
`
	cmd := exec.Command("python3", "-c", script)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "LOCAL_RANK=0", "RANK=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	// Step 1 at once; the 14 steps after it by the flush.
	if got, want := strings.TrimSpace(string(out)), `[["1", "0"], ["15", "14"]]`; got != want {
		t.Errorf("reports (step, steps): got %s, want %s", got, want)
	}
}

// TestStacksHook runs Python with the extracted startup hook: SIGUSR1
// writes every thread's stack to $ROVER_STACKS_FILE, even in an endless
// loop; a program that installs its own SIGUSR1 handler gets the signal
// and the hook says it released it; a user's own sitecustomize.py still
// runs; without $ROVER_STACKS_FILE the hook does nothing.
func TestStacksHook(t *testing.T) {
	dir := t.TempDir()
	if _, err := Extract(dir); err != nil {
		t.Fatal(err)
	}
	user := t.TempDir()
	if err := os.WriteFile(filepath.Join(user, "sitecustomize.py"), []byte("import builtins\nbuiltins.USER_HOOK = True\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(t *testing.T, stacks, code string) (*exec.Cmd, *bufio.Reader) {
		t.Helper()
		cmd := exec.Command("python3", "-u", "-c", code)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+dir+string(os.PathListSeparator)+user)
		if stacks != "" {
			cmd.Env = append(cmd.Env, "ROVER_STACKS_FILE="+stacks)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		r := bufio.NewReader(out)
		line, err := r.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "ready" {
			t.Fatalf("python did not start: %q %v", line, err)
		}
		return cmd, r
	}
	t.Run("endless loop", func(t *testing.T) {
		stacks := filepath.Join(t.TempDir(), "stacks.txt")
		cmd, _ := start(t, stacks, "import builtins\nassert builtins.USER_HOOK\nprint('ready')\ndef spin():\n    while True:\n        pass\nspin()\n")
		b, _ := os.ReadFile(stacks)
		if !strings.Contains(string(b), "rover-stacks: registered pid=") {
			t.Fatalf("no registration marker: %q", b)
		}
		// faulthandler writes from its signal handler, while the loop runs
		// (signalled until the dump shows the loop: it may not have begun).
		deadline := time.After(time.Minute)
		resend := time.NewTicker(50 * time.Millisecond) // paces the signals, one per dump
		defer resend.Stop()
		for !strings.Contains(string(b), " in spin\n") {
			if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
			select {
			case <-deadline:
				t.Fatalf("no stack of the loop within a minute: %q", b)
			case <-resend.C:
			}
			b, _ = os.ReadFile(stacks)
		}
	})
	t.Run("the program's own SIGUSR1 handler", func(t *testing.T) {
		stacks := filepath.Join(t.TempDir(), "stacks.txt")
		cmd, r := start(t, stacks, "import signal, sys, time\nsignal.signal(signal.SIGUSR1, lambda *a: print('mine', flush=True))\nprint('ready')\nwhile True:\n    time.sleep(0.01)\n")
		b, _ := os.ReadFile(stacks)
		if !strings.Contains(string(b), "rover-stacks: released pid=") {
			t.Fatalf("no release marker: %q", b)
		}
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		if line, err := r.ReadString('\n'); err != nil || strings.TrimSpace(line) != "mine" {
			t.Fatalf("the program's handler did not run: %q %v", line, err)
		}
	})
	t.Run("not under rover", func(t *testing.T) {
		start(t, "", "import signal, builtins\nassert builtins.USER_HOOK\nassert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL\nprint('ready')\n")
	})
}
