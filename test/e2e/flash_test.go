package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFlashCheckpointInMemory saves a torch state to the agent's memory at
// every step, crashes one worker after step 5, and checks that after the
// restart every rank restores step 5 from memory with the exact tensors.
func TestFlashCheckpointInMemory(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "flash.py")
	err := os.WriteFile(script, []byte(`import os, sys, torch, torch.distributed as dist
from rover.checkpoint import Checkpointer
dist.init_process_group("gloo")
rank, restart = dist.get_rank(), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
ckpt = Checkpointer()
restored = ckpt.load()
def state(step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return {"w": torch.randn(64, 32, generator=g), "h": torch.randn(8, generator=g).half(),
            "nested": [torch.arange(step + 3), {"lr": 0.1 * step, "name": "adam"}], "step": step}
if restart == 0:
    assert restored is None, restored
    for step in range(1, 6):
        ckpt.save(step, state(step))
    dist.barrier()
    if rank == 1:
        sys.exit(3)
    dist.barrier()  # the peer's exit fails this, as a real job would fail
else:
    step, got = restored
    want = state(5)
    assert step == 5 and got["step"] == 5, step
    assert torch.equal(got["w"], want["w"]) and torch.equal(got["h"], want["h"])
    assert torch.equal(got["nested"][0], want["nested"][0]) and got["nested"][1] == want["nested"][1]
    open(os.path.join(sys.argv[1], "restored-%d" % rank), "w").write(str(step))
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir}
	p := c.start("agent", "run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
		"--stop-grace-period", "5s", script, dir)
	if code := p.wait(t, jobTimeout); code != 0 {
		t.Fatalf("agent exited %d:\n%s", code, p.out)
	}
	for _, rank := range []string{"0", "1"} {
		b, err := os.ReadFile(filepath.Join(dir, "restored-"+rank))
		if err != nil || strings.TrimSpace(string(b)) != "5" {
			t.Errorf("rank %s restored %q (%v), want step 5\n%s", rank, b, err, p.out)
		}
	}
	_ = time.Second
}
