package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// memoryOnlyScript saves steps 1 to 5 to memory only (never persist=True),
// then marks the first argument's directory and trains on until stopped.
// The second argument, when given, is the Checkpointer's location.
const memoryOnlyScript = `import os, sys, time, torch, torch.distributed as dist
from rover.checkpoint import Checkpointer
dist.init_process_group("gloo")
rank = dist.get_rank()
ckpt = Checkpointer(sys.argv[2]) if len(sys.argv) > 2 else Checkpointer()
for step in range(1, 6):
    ckpt.save(step, {"w": torch.full((4, 4), float(step + rank)), "step": step})
dist.barrier()
open(os.path.join(sys.argv[1], "saved-%d" % rank), "w").write("5")
while True:  # training on, until the agent is stopped
    time.sleep(0.05)
`

// TestFlashCheckpointPersistedOnSIGTERM stops a job whose script only ever
// saved to memory with SIGTERM to `rover run`: before it exits the agent
// persists the step its workers hold, and the master commits it (latest).
func TestFlashCheckpointPersistedOnSIGTERM(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			store := filepath.Join(dir, "ckpts")
			script := filepath.Join(dir, "memory.py")
			if err := os.WriteFile(script, []byte(memoryOnlyScript), 0o644); err != nil {
				t.Fatal(err)
			}
			c := &cluster{t: t, dir: dir}
			p := c.start("agent", "run", "--nproc-per-node", "2", "--stop-grace-period", "5s",
				"--checkpoint-dir", store, script, dir)
			for _, rank := range []string{"0", "1"} {
				waitExists(t, filepath.Join(dir, "saved-"+rank), jobTimeout)
			}
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			p.wait(t, jobTimeout)
			latest, err := os.ReadFile(filepath.Join(store, "latest"))
			if err != nil || strings.TrimSpace(string(latest)) != "5" {
				t.Fatalf("latest = %q (%v), want step 5 persisted when the agent stopped:\n%s", latest, err, p.out)
			}
			if out := p.out.String(); strings.Contains(out, "could not persist") {
				t.Errorf("the agent could not persist the step in memory:\n%s", out)
			}
		})
	}
}
