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
    step, got = ckpt.load()  # a rollback: the step saved last, from memory
    assert step == 5 and ckpt.restored_from == "memory" and torch.equal(got["w"], state(5)["w"]), step
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

// TestFlashCheckpointPersists saves with persistence in one job and restores
// from storage in a new one (fresh agent, nothing in memory). The files are
// read back with plain safetensors-format code, and only committed steps
// (manifest + latest) count.
func TestFlashCheckpointPersists(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "ckpts")
	script := filepath.Join(dir, "persist.py")
	err := os.WriteFile(script, []byte(persistScript), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir}
	save := c.start("save", "run", "--standalone", "--nproc-per-node", "2", "--checkpoint-dir", store, "--checkpoint-keep", "2",
		script, "save", store, dir)
	if code := save.wait(t, jobTimeout); code != 0 {
		t.Fatalf("saving job exited %d:\n%s", code, save.out)
	}
	latest, err := os.ReadFile(filepath.Join(store, "latest"))
	if err != nil || strings.TrimSpace(string(latest)) != "6" {
		t.Fatalf("latest = %q (%v), want 6", latest, err)
	}
	// Which of the persisted steps 2 and 4 got committed depends on how fast
	// storage kept up (a persistence superseded in memory is skipped), but no
	// more than keep=2 committed steps remain, 6 among them, and no step
	// directory is left without its manifest.
	steps, _ := filepath.Glob(filepath.Join(store, "step-*"))
	if len(steps) < 1 || len(steps) > 2 || !strings.HasSuffix(steps[len(steps)-1], "step-000000000006") {
		t.Errorf("steps in storage %v, want step 6 and at most one older (keep=2)", steps)
	}
	for _, dir := range steps {
		if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err != nil {
			t.Errorf("%s has no manifest: %v", dir, err)
		}
	}
	load := c.start("load", "run", "--standalone", "--nproc-per-node", "2", "--checkpoint-dir", store, "--checkpoint-keep", "2",
		script, "load", store, dir)
	if code := load.wait(t, jobTimeout); code != 0 {
		t.Fatalf("restoring job exited %d:\n%s", code, load.out)
	}
	for _, rank := range []string{"0", "1"} {
		if b, err := os.ReadFile(filepath.Join(dir, "restored-"+rank)); err != nil || string(b) != "6" {
			t.Errorf("rank %s restored %q (%v), want step 6", rank, b, err)
		}
	}
}

// TestFlashCheckpointPersistedOnFailure: a job that only ever saved to memory
// fails; its agent persists the snapshot the workers held before exiting,
// and a new job restores it from storage.
func TestFlashCheckpointPersistedOnFailure(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "ckpts")
	script := filepath.Join(dir, "persist.py")
	if err := os.WriteFile(script, []byte(persistScript), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir}
	crash := c.start("crash", "run", "--standalone", "--nproc-per-node", "2", "--stop-grace-period", "5s",
		"--checkpoint-dir", store, "--checkpoint-keep", "2", script, "crash", store, dir)
	if code := crash.wait(t, jobTimeout); code != 1 {
		t.Fatalf("the crashing job exited %d, want 1:\n%s", code, crash.out)
	}
	latest, err := os.ReadFile(filepath.Join(store, "latest"))
	if err != nil || strings.TrimSpace(string(latest)) != "5" {
		t.Fatalf("latest = %q (%v), want 5 persisted on failure\n%s", latest, err, crash.out)
	}
	load := c.start("load", "run", "--standalone", "--nproc-per-node", "2", "--checkpoint-dir", store, "--checkpoint-keep", "2",
		script, "load-crashed", store, dir)
	if code := load.wait(t, jobTimeout); code != 0 {
		t.Fatalf("restoring job exited %d:\n%s", code, load.out)
	}
	for _, rank := range []string{"0", "1"} {
		if b, err := os.ReadFile(filepath.Join(dir, "crash-restored-"+rank)); err != nil || string(b) != "5" {
			t.Errorf("rank %s restored %q (%v), want step 5", rank, b, err)
		}
	}
}

// persistScript saves, crashes or restores, by its first argument; the
// second is the checkpoint directory, the third where it writes results.
const persistScript = `import json, os, struct, sys, torch, torch.distributed as dist
from rover.checkpoint import Checkpointer
dist.init_process_group("gloo")
rank, phase, store = dist.get_rank(), sys.argv[1], sys.argv[2]
ckpt = Checkpointer(store)  # the job's --checkpoint-dir, checked
def state(step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return {"w": torch.randn(16, 8, generator=g), "i": torch.arange(step, dtype=torch.int64), "meta": {"step": step}}
if phase == "save":
    for step in range(1, 7):
        ckpt.save(step, state(step), persist=(step % 2 == 0))
    assert ckpt.wait() == 6
    dist.barrier()
elif phase == "crash":
    # Nothing persisted: the agent must persist what memory holds when the
    # workers fail.
    for step in range(1, 6):
        ckpt.save(step, state(step))
    step, got = ckpt.load()  # a rollback: the step saved last, from memory
    assert step == 5 and ckpt.restored_from == "memory" and torch.equal(got["w"], state(5)["w"]), step
    dist.barrier()
    if rank == 1:
        os._exit(3)
    dist.barrier()
elif phase == "load-crashed":
    step, got = ckpt.load()
    assert step == 5 and torch.equal(got["w"], state(5)["w"]), step
    open(os.path.join(sys.argv[3], "crash-restored-%d" % rank), "w").write(str(step))
else:
    step, got = ckpt.load()
    want = state(step)
    assert step == 6 and torch.equal(got["w"], want["w"]) and torch.equal(got["i"], want["i"]) and got["meta"] == {"step": 6}
    # Plain safetensors reading: 8-byte length, JSON header, raw little-endian data.
    path = os.path.join(store, "step-%012d" % 6, "rank-%05d.safetensors" % rank)
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    b, e = header["state.w"]["data_offsets"]
    w = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=torch.float32).reshape(header["state.w"]["shape"])
    assert torch.equal(w, want["w"]) and header["__metadata__"]["rover.step"] == "6"
    open(os.path.join(sys.argv[3], "restored-%d" % rank), "w").write(str(step))
`

// TestFlashExample runs examples/flash_ckpt/train.py as its README says:
// the crash at step 37 resumes from step 36 in memory, and the job ends
// with step 100 committed in storage.
func TestFlashExample(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "flash-demo")
	c := &cluster{t: t, dir: dir}
	p := c.start("agent", "run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
		"--checkpoint-dir", store, "--checkpoint-keep", "2",
		filepath.Join(repoRoot, "examples", "flash_ckpt", "train.py"), "--crash-at", "37")
	if code := p.wait(t, jobTimeout); code != 0 {
		t.Fatalf("agent exited %d:\n%s", code, p.out)
	}
	out := p.out.String()
	for _, want := range []string{"attempt 0: starting at step 0 (restored from nothing)",
		"attempt 1: starting at step 36 (restored from memory)", "done at step 100"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output does not say %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(filepath.Join(store, "latest"))
	if err != nil || strings.TrimSpace(string(b)) != "100" {
		t.Errorf("storage's latest = %q (%v), want step 100", b, err)
	}
}
