package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// failScript fails on its first attempt with a Python exception.
const failScript = `import os
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    raise ValueError("no restarts for this one")

main()
`

// TestNoRestartsFailsAtOnce runs a one-node job with --max-restarts 0
// whose worker fails: the job fails (exit 1) after a single start, the
// diagnosis says the restart budget is spent (not that the workers restart
// in place), and the failure is reported before the job's end.
func TestNoRestartsFailsAtOnce(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "fail.py")
	if err := os.WriteFile(script, []byte(failScript), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir}
	p := c.start("agent", "run", "--standalone", "--max-restarts", "0", script)
	if code := p.wait(t, jobTimeout); code != 1 {
		t.Fatalf("the job exited %d, want 1 (failed):\n%s", code, p.out)
	}
	out := p.out.String()
	if n := strings.Count(out, "starting workers"); n != 1 {
		t.Errorf("the workers were started %d times, want 1:\n%s", n, out)
	}
	want := "the restart budget (--max-restarts=0) is spent, so the job fails instead of restarting the workers"
	if !strings.Contains(out, want) {
		t.Errorf("the output does not say %q:\n%s", want, out)
	}
	if strings.Contains(out, "restarting the workers in place") {
		t.Errorf("the diagnosis says the workers restart, with no restarts left:\n%s", out)
	}
	// The job's events in order: started, the worker failed, the failure
	// report (root cause and diagnosis), the job failed.
	last := -1
	for _, ev := range []string{"starting workers", "worker failed", "Root Cause", "the restart budget (--max-restarts=0) is spent", "job failed"} {
		i := strings.Index(out, ev)
		if i < 0 || i < last {
			t.Fatalf("event %q is missing or out of order (want started, failed, reported, job failed):\n%s", ev, out)
		}
		last = i
	}
}

// TestStartFailureIsNotRestarted runs one-node jobs whose worker cannot be
// started (a program that does not exist; a file that is not executable),
// with restarts to spare: the start is tried once, not restarted, and the
// job fails (exit 1) with the reason and the diagnosis shown to the user.
func TestStartFailureIsNotRestarted(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, program, why string
		code               string
	}{
		{"missing program", filepath.Join(dir, "no-such-program"), "no such file or directory", "exited with status 127"},
		{"not executable", notExec, "permission denied", "exited with status 126"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &cluster{t: t, dir: dir}
			p := c.start("agent", "run", "--standalone", "--max-restarts", "3", "--no-python", tt.program)
			if code := p.wait(t, jobTimeout); code != 1 {
				t.Fatalf("the job exited %d, want 1 (failed):\n%s", code, p.out)
			}
			out := p.out.String()
			if n := strings.Count(out, "could not start workers"); n != 1 {
				t.Errorf("the workers were started %d times, want 1: a start that fails fails the same way again:\n%s", n, out)
			}
			for _, want := range []string{tt.why, tt.code, "start-failure", "starting the workers again would fail the same way",
				"job failed: "} {
				if !strings.Contains(out, want) {
					t.Errorf("the output does not say %q:\n%s", want, out)
				}
			}
		})
	}
}
