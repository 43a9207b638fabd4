package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fullScript saves while the checkpoint storage is full: wait() must raise,
// naming the cause, while training goes on; once the test frees space (it
// creates argv[2]/freed), the next persisted step commits.
const fullScript = `import os, sys, time, torch, torch.distributed as dist
from rover.checkpoint import Checkpointer
dist.init_process_group("gloo")
rank, out = dist.get_rank(), sys.argv[1]
ckpt = Checkpointer()
state = lambda step: {"w": torch.full((64 * 1024,), float(step)), "step": step}
ckpt.save(1, state(1), persist=True)
try:
    ckpt.wait()
    open(os.path.join(out, "wait-returned-%d" % rank), "w").write("no error")
except Exception as e:
    open(os.path.join(out, "wait-raised-%d" % rank), "w").write(str(e))
for step in range(2, 5):  # training goes on, saving to memory
    ckpt.save(step, state(step))
dist.barrier()
if rank == 0:
    open(os.path.join(out, "full"), "w").write("ready")
while not os.path.exists(os.path.join(out, "freed")):
    time.sleep(0.05)
ckpt.save(5, state(5), persist=True)
assert ckpt.wait() == 5
dist.barrier()
`

// mountTmpfs mounts a tmpfs of size at dir (the tests run as root, as CI
// does) and unmounts it at the end.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a %s tmpfs at %s (the end-to-end tests need root): %v\n%s", size, dir, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
}

// fill writes path until the file system has no space left.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", path, err)
			}
			return
		}
	}
}

// TestCheckpointStorageFull runs a job whose checkpoint storage (a small
// tmpfs) is full: the persistence fails with a clear error, wait() raises
// naming it on every rank, training goes on, nothing of the failed step is
// left in storage; once space is freed the next persisted step commits.
func TestCheckpointStorageFull(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "ckpts")
	mountTmpfs(t, store, "2m")
	filler := filepath.Join(store, "filler")
	fill(t, filler)
	script := filepath.Join(dir, "full.py")
	if err := os.WriteFile(script, []byte(fullScript), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir}
	p := c.start("agent", "run", "--standalone", "--nproc-per-node", "2", "--checkpoint-dir", store, script, dir)
	waitFor(t, jobTimeout, "the workers to report the full storage", func() bool {
		_, err := os.Stat(filepath.Join(dir, "full"))
		return err == nil
	})
	for _, rank := range []string{"0", "1"} {
		b, err := os.ReadFile(filepath.Join(dir, "wait-raised-"+rank))
		if err != nil || !strings.Contains(string(b), "no space left on device") || !strings.Contains(string(b), "no checkpoint step was made durable") {
			t.Errorf("rank %s: wait() with the storage full: %q (%v), want it to raise naming the cause\n%s", rank, b, err, p.out)
		}
	}
	if !strings.Contains(p.out.String(), "no space left on device") {
		t.Errorf("the agent's log does not name the cause:\n%s", p.out)
	}
	// Nothing of the failed step stays behind to hold space.
	if left, _ := filepath.Glob(filepath.Join(store, "step-*", "*")); len(left) > 0 {
		t.Errorf("files of the failed persistence left in storage: %v", left)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "freed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, jobTimeout); code != 0 {
		t.Fatalf("the job exited %d after space was freed:\n%s", code, p.out)
	}
	if b, err := os.ReadFile(filepath.Join(store, "latest")); err != nil || strings.TrimSpace(string(b)) != "5" {
		t.Errorf("latest = %q (%v), want step 5 committed once space was freed\n%s", b, err, p.out)
	}
	steps, _ := filepath.Glob(filepath.Join(store, "step-*"))
	if len(steps) != 1 || filepath.Base(steps[0]) != "step-000000000005" {
		t.Errorf("steps in storage %v, want only the committed step 5", steps)
	}
}

// shmScript saves a state larger than the node's shared memory: save
// raises, and wait() raises too, naming why nothing was made durable.
const shmScript = `import os, sys, torch
from rover.checkpoint import Checkpointer
rank, out = int(os.environ["RANK"]), sys.argv[1]
ckpt = Checkpointer()
try:
    ckpt.save(1, {"w": torch.zeros(4 << 20)}, persist=True)  # 16 MiB
    open(os.path.join(out, "saved-%d" % rank), "w").write("saved")
except Exception as e:
    open(os.path.join(out, "save-raised-%d" % rank), "w").write(str(e))
try:
    ckpt.wait()
    open(os.path.join(out, "wait-returned-%d" % rank), "w").write("no error")
except Exception as e:
    open(os.path.join(out, "wait-raised-%d" % rank), "w").write(str(e))
`

// TestSharedMemoryTooSmall runs a job whose /dev/shm (a 1 MiB tmpfs in a
// mount namespace of its own) cannot hold a snapshot: save raises saying
// so, and wait() does not report success but names the cause.
func TestSharedMemoryTooSmall(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "shm.py")
	if err := os.WriteFile(script, []byte(shmScript), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir}
	p := c.startCmd("agent", "unshare", "-m", "sh", "-c", `mount -t tmpfs -o size=1m tmpfs /dev/shm && exec "$@"`, "sh",
		roverBin, "run", "--standalone", "--checkpoint-dir", filepath.Join(dir, "ckpts"), script, dir)
	if code := p.wait(t, jobTimeout); code != 0 {
		t.Fatalf("the job exited %d:\n%s", code, p.out)
	}
	save, err := os.ReadFile(filepath.Join(dir, "save-raised-0"))
	if err != nil || !strings.Contains(string(save), "shared memory") {
		t.Errorf("save with /dev/shm too small: %q (%v), want it to raise naming the shared memory\n%s", save, err, p.out)
	}
	wait, err := os.ReadFile(filepath.Join(dir, "wait-raised-0"))
	if err != nil || !strings.Contains(string(wait), "no checkpoint step was made durable") || !strings.Contains(string(wait), "shared memory") {
		t.Errorf("wait() after the failed save: %q (%v), want it to raise naming the cause\n%s", wait, err, p.out)
	}
}
