package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	roverv1 "github.com/roverml/rover/api/rover/v1"
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
	if err := os.WriteFile(file, fmt.Appendf(nil, "%s%d\n", stacksRegistered, os.Getpid()), 0o600); err != nil {
		t.Fatal(err)
	}
	if pids := hookedPids(file, foreign.Process.Pid); len(pids) != 0 {
		t.Fatalf("hooked pids %v of a group they are not in", pids)
	}
	s := workerStacks(context.Background(), workerRef{Local: 1, Rank: 3, Pid: stopped.Process.Pid, StacksFile: file})
	if !strings.Contains(s, fmt.Sprintf("== rank 3 (local rank 1) pid %d: T (stopped)", stopped.Process.Pid)) ||
		!strings.Contains(s, "a stopped process cannot run its faulthandler") {
		t.Errorf("stopped worker's section:\n%s", s)
	}
	s = workerStacks(context.Background(), workerRef{Pid: foreign.Process.Pid, StacksFile: file})
	if strings.Contains(s, "stopped") || !strings.Contains(s, "no Python stacks by signal") {
		t.Errorf("non-Python worker's section:\n%s", s)
	}
	if procState(foreign.Process.Pid).text == "gone" {
		t.Error("the non-Python worker was ended")
	}
	// Released markers are honoured.
	own := fmt.Sprintf("%s%d\n%s%d\n", stacksRegistered, foreign.Process.Pid, stacksReleased, foreign.Process.Pid)
	if err := os.WriteFile(file, []byte(own), 0o600); err != nil {
		t.Fatal(err)
	}
	if pids := hookedPids(file, foreign.Process.Pid); len(pids) != 0 {
		t.Fatalf("hooked pids %v after a release", pids)
	}
}

// TestProgressBook checks the sums between takes, a new round's reset,
// validation, and device samples from a fake monitor.
func TestProgressBook(t *testing.T) {
	b := newProgressBook()
	if b.take() != nil {
		t.Fatal("an empty book has something to send")
	}
	b.add(1, &roverv1.WorkerProgress{LocalRank: 0, Step: 5, Steps: 2, WallSeconds: 1, CpuSeconds: 0.5})
	b.add(1, &roverv1.WorkerProgress{LocalRank: 0, Step: 7, Steps: 2, WallSeconds: 1, CpuSeconds: 0.5})
	b.add(2, &roverv1.WorkerProgress{LocalRank: 1, Step: 1, Steps: 1, WallSeconds: 3, CpuSeconds: 1})
	b.add(2, &roverv1.WorkerProgress{LocalRank: 0, Step: 2, Steps: 1, WallSeconds: 1, CpuSeconds: 1})
	np := b.take()
	if np.GetRound() != 2 || len(np.GetWorkers()) != 2 {
		t.Fatalf("take: %v, want round 2's two workers", np)
	}
	b.add(3, &roverv1.WorkerProgress{LocalRank: 0, Step: 5, Steps: 2, WallSeconds: 1})
	b.add(3, &roverv1.WorkerProgress{LocalRank: 0, Step: 7, Steps: 3, WallSeconds: 2})
	if w := b.take().GetWorkers(); len(w) != 1 || w[0].GetStep() != 7 || w[0].GetSteps() != 5 || w[0].GetWallSeconds() != 3 {
		t.Fatalf("sums: %v", w)
	}
	b.devices = fakeDevices{{Index: 0, Utilization: 0, Xids: []int{79}}}
	if d := b.take().GetDevices(); len(d) != 1 || d[0].GetXids()[0] != 79 {
		t.Fatalf("devices: %v", d)
	}
	for _, bad := range []*roverv1.WorkerProgress{nil, {LocalRank: 2}, {Step: -1}, {WallSeconds: -1}} {
		if checkProgress(bad, 2) == nil {
			t.Errorf("%v passed the checks", bad)
		}
	}
}

type fakeDevices []DeviceSample

func (f fakeDevices) Sample() ([]DeviceSample, error) { return f, nil }

var _ DeviceMonitor = fakeDevices(nil)
