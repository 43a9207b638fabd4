package proc

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestStartExit(t *testing.T) {
	tests := []struct {
		name      string
		argv      []string
		want      Exit
		shellCode int
		text      string
	}{
		{"success", []string{"true"}, Exit{Code: 0}, 0, "exit status 0"},
		{"exit 3", []string{"sh", "-c", "exit 3"}, Exit{Code: 3}, 3, "exit status 3"},
		{"self SIGKILL", []string{"sh", "-c", "kill -KILL $$"}, Exit{Code: -1, Signal: syscall.SIGKILL}, 137, "killed by signal 9 (SIGKILL)"},
		{"self SIGTERM", []string{"sh", "-c", "kill -TERM $$"}, Exit{Code: -1, Signal: syscall.SIGTERM}, 143, "killed by signal 15 (SIGTERM)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := time.Now()
			p, err := Start(Spec{Argv: tt.argv})
			if err != nil {
				t.Fatal(err)
			}
			got := waitDone(t, p)
			if got.Time.Before(before) {
				t.Errorf("Exit.Time %v before start %v", got.Time, before)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(Exit{}, "Time")); diff != "" {
				t.Errorf("Exit mismatch (-want +got):\n%s", diff)
			}
			if got.ShellCode() != tt.shellCode {
				t.Errorf("ShellCode() = %d, want %d", got.ShellCode(), tt.shellCode)
			}
			if got.String() != tt.text {
				t.Errorf("String() = %q, want %q", got.String(), tt.text)
			}
			if got.Success() != (tt.shellCode == 0) {
				t.Errorf("Success() = %v", got.Success())
			}
			// Signalling and stopping an exited process are no-ops.
			if err := p.Signal(syscall.SIGTERM); err != nil {
				t.Errorf("Signal after exit: %v", err)
			}
			if diff := cmp.Diff(got, p.Stop(time.Second)); diff != "" {
				t.Errorf("Stop after exit changed Exit (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStartSpec(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	p, err := Start(Spec{
		Argv:   []string{"sh", "-c", `pwd; echo "$ROVER_X" >&2; echo "$PATH_SEEN"`},
		Env:    []string{"ROVER_X=hello", "PATH_SEEN=a", "PATH_SEEN=b", "PATH=/usr/bin:/bin"},
		Dir:    dir,
		Stdout: &stdout,
		Stderr: &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if e := waitDone(t, p); !e.Success() {
		t.Fatalf("exit: %v", e)
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(realDir+"\nb\n", stdout.String()); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("hello\n", stderr.String()); diff != "" {
		t.Errorf("stderr (-want +got):\n%s", diff)
	}
}

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "tool")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		spec     Spec
		notFound bool
	}{
		{"empty argv", Spec{}, false},
		{"missing command", Spec{Argv: []string{"rover-no-such-command"}}, true},
		{"child PATH used", Spec{Argv: []string{"sh"}, Env: []string{"PATH=" + dir}}, true},
		{"relative PATH entries ignored", Spec{Argv: []string{"tool"}, Env: []string{"PATH=.:"}, Dir: dir}, true},
		{"missing path", Spec{Argv: []string{filepath.Join(dir, "missing")}}, false},
		{"bad dir", Spec{Argv: []string{"true"}, Dir: filepath.Join(dir, "missing")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Start(tt.spec)
			if err == nil {
				waitDone(t, p)
				t.Fatalf("Start(%+v) succeeded", tt.spec)
			}
			if got := errors.Is(err, exec.ErrNotFound); got != tt.notFound {
				t.Errorf("errors.Is(%v, exec.ErrNotFound) = %v, want %v", err, got, tt.notFound)
			}
		})
	}

	// The child's PATH finds what the agent's PATH would not.
	p, err := Start(Spec{Argv: []string{"tool"}, Env: []string{"PATH=/nonexistent:" + dir}})
	if err != nil {
		t.Fatal(err)
	}
	if e := waitDone(t, p); !e.Success() {
		t.Errorf("tool via child PATH: %v", e)
	}
}

func TestStopIgnoringTERM(t *testing.T) {
	out := newLineNotifier()
	p, err := Start(Spec{
		Argv:   []string{"sh", "-c", `trap "" TERM; echo ready; sleep 60`},
		Stdout: out,
	})
	if err != nil {
		t.Fatal(err)
	}
	if l := out.next(t); l != "ready" {
		t.Fatalf("got line %q, want ready", l)
	}
	// sleep inherits the ignored SIGTERM, so only SIGKILL ends the group.
	e := p.Stop(200 * time.Millisecond)
	if e.Signal != syscall.SIGKILL {
		t.Errorf("Stop() = %v, want killed by SIGKILL", e)
	}
	if Classify(e) != Killed {
		t.Errorf("Classify(%v) = %v, want %v", e, Classify(e), Killed)
	}
}

func TestStopTERM(t *testing.T) {
	p, err := Start(Spec{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	// The grace is far longer than any test: a SIGKILL here would mean
	// Stop waited it out instead of returning when the child exited.
	e := p.Stop(time.Hour)
	if diff := cmp.Diff(Exit{Code: -1, Signal: syscall.SIGTERM}, e, cmpopts.IgnoreFields(Exit{}, "Time")); diff != "" {
		t.Errorf("Stop() mismatch (-want +got):\n%s", diff)
	}
}

func TestStopConcurrent(t *testing.T) {
	p, err := Start(Spec{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	exits := make([]Exit, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { exits[i] = p.Stop(time.Hour) })
	}
	wg.Wait()
	for i, e := range exits {
		if diff := cmp.Diff(p.Exit(), e); diff != "" {
			t.Errorf("Stop #%d mismatch (-want +got):\n%s", i, diff)
		}
	}
	if p.Exit().Signal != syscall.SIGTERM {
		t.Errorf("Exit() = %v, want killed by SIGTERM", p.Exit())
	}
}

func TestGroupKilledAfterLeaderExits(t *testing.T) {
	out := newLineNotifier()
	// The grandchild keeps the stdout pipe open: Done can only close
	// because the group is killed once the leader exits.
	p, err := Start(Spec{
		Argv:   []string{"sh", "-c", `sleep 60 & echo $!; wait`},
		Stdout: out,
	})
	if err != nil {
		t.Fatal(err)
	}
	grandchild, err := strconv.Atoi(out.next(t))
	if err != nil {
		t.Fatal(err)
	}
	// Kill only the leader.
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if e := waitDone(t, p); e.Signal != syscall.SIGKILL {
		t.Errorf("Exit() = %v, want killed by SIGKILL", e)
	}
	waitGone(t, grandchild)
}

func TestStopKillsGroup(t *testing.T) {
	out := newLineNotifier()
	p, err := Start(Spec{
		Argv:   []string{"sh", "-c", `sleep 60 & echo $!; wait`},
		Stdout: out,
	})
	if err != nil {
		t.Fatal(err)
	}
	grandchild, err := strconv.Atoi(out.next(t))
	if err != nil {
		t.Fatal(err)
	}
	p.Stop(time.Hour)
	waitGone(t, grandchild)
}

func TestPdeathsig(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(exe, "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"=pdeathsig")
	var stderr bytes.Buffer
	helper.Stderr = &stderr
	out, err := helper.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper: err %v, want killed by SIGKILL; stderr:\n%s", err, stderr.String())
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	waitGone(t, pid)
}

// TestParentDeathSignal: a child that asks for SIGTERM on its parent's
// death gets SIGTERM, and can clean up, when the parent is killed.
func TestParentDeathSignal(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	outFile := filepath.Join(t.TempDir(), "signal")
	helper := exec.Command(exe, "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"=pdeathsig-term", "PDEATHSIG_OUT="+outFile)
	out, err := helper.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper: err %v, want killed by SIGKILL", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	waitGone(t, pid)
	got, err := os.ReadFile(outFile)
	if err != nil || strings.TrimSpace(string(got)) != "TERM" {
		t.Fatalf("the child recorded %q (%v), want TERM: it did not get SIGTERM when its parent died", got, err)
	}
}
