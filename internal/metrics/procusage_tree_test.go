package metrics

import (
	"os/exec"
	"testing"

	"github.com/roverml/rover/internal/k8stest"
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
	// The child exists and has memory (it exec'd). Debian's kernels list
	// children (CONFIG_PROC_CHILDREN); one that does not fails here.
	k8stest.WaitFor(t, "the shell's child in /proc/PID/task/TID/children, with memory", func() bool {
		k := procChildren(pid)
		if len(k) == 0 {
			return false
		}
		u, ok := readProcUsage(k[0])
		return ok && u.rssBytes > 0
	})
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
