package metrics

import (
	"os/exec"
	"testing"
	"time"
)

// TestTreeUsageCountsChildren: a worker's usage includes its children's
// (a shell and the sleep it waits for).
func TestTreeUsageCountsChildren(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 60 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	deadline := time.Now().Add(30 * time.Second)
	running := func() bool { // the child exists and has memory (it exec'd)
		k := procChildren(pid)
		if len(k) == 0 {
			return false
		}
		u, ok := readProcUsage(k[0])
		return ok && u.rssBytes > 0
	}
	for !running() {
		if time.Now().After(deadline) {
			t.Skip("no child with memory in /proc/PID/task/TID/children: the kernel lacks CONFIG_PROC_CHILDREN")
		}
		time.Sleep(10 * time.Millisecond) // poll for the child, with a deadline
	}
	kids := procChildren(pid)
	own, ok := readProcUsage(pid)
	child, ok2 := readProcUsage(kids[0])
	rss, _, ok3 := TreeUsage(pid)
	if !ok || !ok2 || !ok3 || child.rssBytes <= 0 || rss < own.rssBytes+child.rssBytes/2 {
		t.Fatalf("tree %d bytes, shell %d, child %v %d: want the tree to hold both", rss, own.rssBytes, kids, child.rssBytes)
	}
	if _, _, ok := TreeUsage(1 << 30); ok {
		t.Error("TreeUsage of a pid that does not exist: ok")
	}
}
