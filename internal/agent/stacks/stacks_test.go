package stacks

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestWorkerStacksOfStoppedAndForeign checks the stacks section of a
// stopped worker (reported as stopped, never signalled) and of a worker
// that is not Python (no hook marker: never sent SIGUSR1, whose default
// action would end it), and that a marker of a pid outside the worker's
// process group is ignored.
func TestWorkerStacksOfStoppedAndForeign(t *testing.T) {
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	stopped, foreign := start(), start()
	if err := syscall.Kill(stopped.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The child's stop, as the kernel reports it (WUNTRACED), not a poll.
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(stopped.Process.Pid, &ws, syscall.WUNTRACED, nil); err != nil || !ws.Stopped() {
		t.Fatalf("wait for pid %d to stop: %v (status %v)", stopped.Process.Pid, err, ws)
	}
	if st := procState(stopped.Process.Pid); !st.stopped {
		t.Fatalf("pid %d stopped but /proc says %s", stopped.Process.Pid, st.text)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "stacks.txt")
	// A marker of another process (a reused pid, say): not in the group.
	if err := os.WriteFile(file, fmt.Appendf(nil, "%s%d\n", registeredMarker, os.Getpid()), 0o600); err != nil {
		t.Fatal(err)
	}
	if pids := hookedPids(file, foreign.Process.Pid); len(pids) != 0 {
		t.Fatalf("hooked pids %v of a group they are not in", pids)
	}
	s := workerStacks(context.Background(), Worker{Local: 1, Rank: 3, Pid: stopped.Process.Pid, StacksFile: file})
	if !strings.Contains(s, fmt.Sprintf("== rank 3 (local rank 1) pid %d: T (stopped)", stopped.Process.Pid)) ||
		!strings.Contains(s, "a stopped process cannot run its faulthandler") {
		t.Errorf("stopped worker's section:\n%s", s)
	}
	s = workerStacks(context.Background(), Worker{Pid: foreign.Process.Pid, StacksFile: file})
	if strings.Contains(s, "stopped") || !strings.Contains(s, "no Python stacks by signal") {
		t.Errorf("non-Python worker's section:\n%s", s)
	}
	if procState(foreign.Process.Pid).text == "gone" {
		t.Error("the non-Python worker was ended")
	}
	// Released markers are honoured.
	own := fmt.Sprintf("%s%d\n%s%d\n", registeredMarker, foreign.Process.Pid, releasedMarker, foreign.Process.Pid)
	if err := os.WriteFile(file, []byte(own), 0o600); err != nil {
		t.Fatal(err)
	}
	if pids := hookedPids(file, foreign.Process.Pid); len(pids) != 0 {
		t.Fatalf("hooked pids %v after a release", pids)
	}
}
