package proc

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// TestKillTagged: the children of a killed process, one in its group and
// one in a session of its own, survive it; KillTagged finds both by the
// tag they inherited and kills them.
func TestKillTagged(t *testing.T) {
	tag := "ROVER_PROC_TEST_TAG=" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cmd := exec.Command("sh", "-c", `setsid sleep 600 & sleep 600 & echo ready; wait`)
	cmd.Env = append(os.Environ(), tag)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { KillTagged(tag) })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the shell said %q (%v), want ready", line, err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	waitTagged(t, tag, func(n int) bool { return n == 2 }, "both sleeps outliving their killed parent")
	if n := KillTagged(tag); n != 2 {
		t.Errorf("KillTagged signalled %d processes, want 2", n)
	}
	waitTagged(t, tag, func(n int) bool { return n == 0 }, "no tagged process left")
	if n := KillTagged(tag); n != 0 {
		t.Errorf("KillTagged with nothing left signalled %d", n)
	}
}

// waitTagged polls until the number of processes with tag satisfies ok.
func waitTagged(t *testing.T, tag string, ok func(int) bool, what string) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for {
		n := len(TaggedPids([]byte(tag)))
		if ok(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %d tagged processes after %v", what, n, guard)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
