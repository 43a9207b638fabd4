package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// declaredScript is the checkpoint contract as documented since flash
// checkpoint first shipped: the script names its directory and retention,
// Checkpointer(dir, keep=3), and the launcher names none. It persists
// steps 1 to 7 (each durable before the next), saves step 8 to memory
// only, and rank 1 is SIGKILLed; after the restart every rank must resume
// from step 8 in memory. Its arguments: the results directory, the store.
const declaredScript = `import os, signal, sys, torch, torch.distributed as dist
from rover.checkpoint import Checkpointer
dist.init_process_group("gloo")
rank, restart = dist.get_rank(), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
out, store = sys.argv[1], sys.argv[2]
ckpt = Checkpointer(store, keep=3)
assert ckpt.url == store and ckpt.keep == 3, (ckpt.url, ckpt.keep)
def state(step):
    return {"w": torch.full((8,), float(100 * step + rank)), "step": step}
restored = ckpt.load()
if restart == 0:
    assert restored is None, restored
    for step in range(1, 8):
        ckpt.save(step, state(step), persist=True)
        assert ckpt.wait() == step
    ckpt.save(8, state(8))  # memory only
    dist.barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()  # the peer's death fails this, as a real job would fail
else:
    step, got = restored
    assert step == 8 and ckpt.restored_from == "memory" and torch.equal(got["w"], state(8)["w"]), (step, ckpt.restored_from)
    open(os.path.join(out, "restored-%d" % rank), "w").write(str(step))
`

// TestCheckpointDirDeclaredByScript runs declaredScript under plain `rover
// run --nproc-per-node 2`, with no --checkpoint-dir: the script's
// Checkpointer(dir, keep=3) is the job's storage. Steps persist and
// commit there, keep=3 holds, the killed worker's job resumes from memory,
// and the step held only in memory is persisted when the workers failed.
func TestCheckpointDirDeclaredByScript(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "ckpts")
	script := filepath.Join(dir, "declared.py")
	if err := os.WriteFile(script, []byte(declaredScript), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir}
	p := c.start("agent", "run", "--nproc-per-node", "2", "--max-restarts", "1", "--stop-grace-period", "5s", script, dir, store)
	if code := p.wait(t, jobTimeout); code != 0 {
		t.Fatalf("agent exited %d:\n%s", code, p.out)
	}
	for _, rank := range []string{"0", "1"} {
		if b, err := os.ReadFile(filepath.Join(dir, "restored-"+rank)); err != nil || string(b) != "8" {
			t.Errorf("rank %s restored %q (%v), want step 8 from memory", rank, b, err)
		}
	}
	latest, err := os.ReadFile(filepath.Join(store, "latest"))
	if err != nil || strings.TrimSpace(string(latest)) != "8" {
		t.Fatalf("latest = %q (%v), want 8 (persisted from memory when the workers failed)", latest, err)
	}
	steps, _ := filepath.Glob(filepath.Join(store, "step-*"))
	for i := range steps {
		steps[i] = filepath.Base(steps[i])
	}
	if want := []string{"step-000000000006", "step-000000000007", "step-000000000008"}; !slices.Equal(steps, want) {
		t.Errorf("steps in storage %v, want %v (keep=3)", steps, want)
	}
}

// twoNodeDeclareScript declares the job's storage on each of two nodes
// (one rank each), persists step 1, then tries another location and
// another keep, which must both be refused, naming what the job has and
// what was asked.
const twoNodeDeclareScript = `import os, sys, torch, torch.distributed as dist
from rover.checkpoint import Checkpointer
dist.init_process_group("gloo")
rank = dist.get_rank()
out, store, other = sys.argv[1], sys.argv[2], sys.argv[3]
ckpt = Checkpointer(store, keep=2)
ckpt.save(1, {"w": torch.full((4,), float(rank))}, persist=True)
assert ckpt.wait() == 1
refusals = []
for args in [(other,), (store, 5)]:
    try:
        Checkpointer(*args)
        refusals.append("accepted %r" % (args,))
    except ValueError as e:
        refusals.append(str(e))
dist.barrier()
open(os.path.join(out, "refused-%d" % rank), "w").write("\n".join(refusals))
`

// TestCheckpointDirDeclaredOnTwoNodes: two agents of a `rover master` job,
// none with --checkpoint-dir, whose script declares the same storage on
// both nodes: the step commits there; a declaration of another location
// or keep is refused on either node with a message naming both.
func TestCheckpointDirDeclaredOnTwoNodes(t *testing.T) {
	c := newCluster(t, "declare")
	store, other := filepath.Join(c.dir, "ckpts"), filepath.Join(c.dir, "elsewhere")
	script := filepath.Join(c.dir, "declare.py")
	if err := os.WriteFile(script, []byte(twoNodeDeclareScript), 0o644); err != nil {
		t.Fatal(err)
	}
	var agents []*process
	for i, id := range []string{"node0", "node1"} {
		agents = append(agents, c.agent(id, "--nnodes", "2", "--node-rank", []string{"0", "1"}[i], "--nproc-per-node", "1",
			script, c.dir, store, other))
	}
	for _, a := range agents {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}
	if latest, err := os.ReadFile(filepath.Join(store, "latest")); err != nil || strings.TrimSpace(string(latest)) != "1" {
		t.Fatalf("latest = %q (%v), want 1 in the declared storage", latest, err)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("the refused location %s was created (%v)", other, err)
	}
	for _, rank := range []string{"0", "1"} {
		b, err := os.ReadFile(filepath.Join(c.dir, "refused-"+rank))
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Split(string(b), "\n")
		if len(got) != 2 || !strings.Contains(got[0], other) || !strings.Contains(got[0], "checkpoints go to "+store) {
			t.Errorf("rank %s: another location: %q, want a refusal naming %s and the job's %s", rank, got[0], other, store)
		}
		if len(got) != 2 || !strings.Contains(got[1], "keep 5") || !strings.Contains(got[1], "the job keeps 2") {
			t.Errorf("rank %s: another keep: %q, want a refusal naming keep 5 and the job's 2", rank, got)
		}
	}
}
