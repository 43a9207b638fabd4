package e2e

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestImpostorRefused: Slurm-style, no master, node ranks 0 and 1 train; a
// third agent on the same host with --node-rank 1 again derives the same
// node id as node 1. The master refuses it while node 1's session is live:
// it exits 3 saying that another live agent holds the node, and the job
// trains on the two genuine nodes (before, both ran group rank 1 and the
// impostor never exited). Kubeflow-style (NODE_RANK) the same.
func TestImpostorRefused(t *testing.T) {
	for _, style := range launchStyles {
		t.Run(style.name, func(t *testing.T) {
			c := noMasterCluster(t, "impostor-"+style.name)
			dir, port := t.TempDir(), freePortPair(t)
			args := append([]string{"--nnodes", style.nodes}, trainArgs(dir, "--step-sleep", "0.05")...)
			a0, a1 := style.start(c, 0, port, args...), style.start(c, 1, port, args...)
			waitExists(t, filepath.Join(dir, "ckpt.pt"), jobTimeout) // both joined and train
			imp := style.start(c, 1, port, args...)
			imp.name = "impostor"
			if code := imp.wait(t, jobTimeout); code != 3 {
				t.Fatalf("the impostor exited %d, want 3:\n%s", code, imp.out)
			}
			if !strings.Contains(imp.out.String(), "is held by another live agent") {
				t.Errorf("the impostor's output does not say why it was refused:\n%s", imp.out)
			}
			waitAll(t, a0, a1)
			if r := readResult(t, filepath.Join(dir, "out.json")); r.Step != 60 || r.WorldSize != 4 {
				t.Errorf("result: step %d world %d; want 60 on a world of 4", r.Step, r.WorldSize)
			}
		})
	}
}
