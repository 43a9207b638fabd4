package python

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The tests in this file run the dlrover compatibility package
// (python/dlrover) with real torch, outside any rover job: the checkpointer
// then persists to a directory itself, as rover.checkpoint does without an
// agent. test/e2e's TestDLRoverAPIScriptResumesFromMemory runs it under
// `rover run`.

// TestExtractHasDLRover: the binary carries the dlrover package, __init__.py
// files included (a directory pattern in go:embed would drop them).
func TestExtractHasDLRover(t *testing.T) {
	dir, err := Extract(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{
		"rover/__init__.py", "rover/checkpoint.py",
		"dlrover/__init__.py", "dlrover/trainer/__init__.py", "dlrover/trainer/torch/__init__.py",
		"dlrover/trainer/torch/elastic/__init__.py", "dlrover/trainer/torch/elastic/sampler.py",
		"dlrover/trainer/torch/elastic_sampler.py",
		"dlrover/trainer/torch/flash_checkpoint/__init__.py", "dlrover/trainer/torch/flash_checkpoint/checkpointer.py",
		"dlrover/trainer/torch/flash_checkpoint/ddp.py", "dlrover/trainer/torch/flash_checkpoint/fsdp.py",
		"dlrover/trainer/torch/elastic/trainer.py", "dlrover/trainer/torch/elastic/dataloader.py",
		"dlrover/python/__init__.py", "dlrover/python/common/__init__.py", "dlrover/python/common/storage.py",
	} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("extracted package lacks %s: %v", f, err)
		}
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "dlrover", "*", "__pycache__"))
	if len(matches) > 0 {
		t.Errorf("extracted %v", matches)
	}
}

// TestElasticDistributedSampler checks DLRover's sampler semantics: with
// nothing loaded it yields what torch's DistributedSampler yields; after
// load_state_dict it goes on with the samples after completed_num, split
// anew over the world size of now (4 ranks, then 2 and 3): every sample of
// the epoch exactly once when the epoch divides evenly, and padded or cut as
// DistributedSampler does otherwise.
func TestElasticDistributedSampler(t *testing.T) {
	script := `
import sys
sys.path.insert(0, ".")
import torch
from torch.utils.data import DistributedSampler
from dlrover.trainer.torch.elastic.sampler import ElasticDistributedSampler
from dlrover.trainer.torch.elastic_sampler import ElasticDistributedSampler as Old
assert Old is ElasticDistributedSampler and issubclass(ElasticDistributedSampler, DistributedSampler)

data = list(range(96))
for shuffle in (False, True):
    for drop_last in (False, True):
        for n in (96, 97, 101):
            for r in range(4):
                a = ElasticDistributedSampler(list(range(n)), num_replicas=4, rank=r, shuffle=shuffle, seed=3, drop_last=drop_last)
                b = DistributedSampler(list(range(n)), num_replicas=4, rank=r, shuffle=shuffle, seed=3, drop_last=drop_last)
                a.set_epoch(2); b.set_epoch(2)
                assert list(a) == list(b) and len(a) == len(b), (shuffle, drop_last, n, r)

# 96 samples, 4 ranks of batch 4: 3 steps, then resume on 2 and on 3 ranks.
B = 4
first = [ElasticDistributedSampler(data, num_replicas=4, rank=r, seed=5) for r in range(4)]
for s in first:
    s.set_epoch(1)
seen = [i for s in first for i in list(s)[:3 * B]]
state = first[0].state_dict(3, B)
assert state == {"completed_num": 48, "epoch": 1}, state
for world in (2, 3):
    rest = []
    for r in range(world):
        s = ElasticDistributedSampler(data, num_replicas=world, rank=r, seed=5)
        s.load_state_dict(state)
        assert s.epoch == 1 and len(s) == 48 // world, (world, len(s))
        got = list(s)
        assert len(got) == len(s)
        rest += got
    assert sorted(seen + rest) == data, world
# The order is the epoch's: what rank r trains after the resume is the
# epoch order's samples 48.. taken every world-th from the r-th.
order = torch.randperm(96, generator=torch.Generator().manual_seed(5 + 1)).tolist()
s = ElasticDistributedSampler(data, num_replicas=2, rank=1, seed=5)
s.load_state_dict(state)
assert list(s) == order[48:][1::2]
# Another epoch starts at its beginning; completed_num beyond the dataset
# (a global step, as DLRover's examples pass) is taken modulo its size.
s.set_epoch(2)
assert len(list(s)) == 48
s.load_state_dict({"epoch": 4, "completed_num": 96 * 3 + 8})
assert len(s) == 44 and list(s) == torch.randperm(96, generator=torch.Generator().manual_seed(9)).tolist()[8:][1::2]
# Without a process group, rank 0 of 1.
assert len(ElasticDistributedSampler(data)) == 96
print("ok")
`
	if out := runPython(t, script, nil); string(out) != "ok\n" {
		t.Fatalf("python: %s", out)
	}
}

// TestDdpCheckpointerWithoutAgent: MEMORY saves stay in the process, DISK
// saves commit Rover's layout to checkpoint_dir, a new checkpointer loads
// the committed step, and load_checkpoint returns {} when there is nothing.
// Bad arguments are refused saying what to do.
func TestDdpCheckpointerWithoutAgent(t *testing.T) {
	dir := t.TempDir()
	script := `
import os, sys
sys.path.insert(0, ".")
import torch
from dlrover.trainer.torch.flash_checkpoint.ddp import DdpCheckpointer, StorageType
from dlrover.trainer.torch.flash_checkpoint.checkpointer import StorageType as ST, Checkpointer
assert ST is StorageType and issubclass(DdpCheckpointer, Checkpointer)
d = sys.argv[1]

c = DdpCheckpointer(d)
assert c.load_checkpoint() == {} and c.loaded_step is None
assert c.wait_latest_checkpoint(timeout=10) is None
m = torch.nn.Linear(4, 3)
o = torch.optim.Adam(m.parameters())
m(torch.ones(2, 4)).sum().backward()
o.step()
def state(step):
    return {"model": m.state_dict(), "optimizer": o.state_dict(), "step": step, "sampler": {"completed_num": 8, "epoch": 0}}
c.save_checkpoint(5, state(5), os.path.join(d, "checkpoint-5.pt"), storage_type=StorageType.MEMORY)
assert not os.path.exists(os.path.join(d, "latest")) and not os.path.exists(os.path.join(d, "checkpoint-5.pt"))
got = c.load_checkpoint()
assert c.loaded_step == 5 and got["step"] == 5 and torch.equal(got["model"]["weight"], m.weight.detach())
c.save_checkpoint(6, state(6), storage_type=StorageType.DISK)
assert c.wait_latest_checkpoint(timeout=60) == 6
assert open(os.path.join(d, "latest")).read().strip() == "6", os.listdir(d)
assert os.path.exists(os.path.join(d, "step-000000000006", "rank-00000.safetensors"))

fresh = DdpCheckpointer(d)
got = fresh.load_checkpoint()
assert fresh.loaded_step == 6 and got["step"] == 6 and got["sampler"] == {"completed_num": 8, "epoch": 0}
m2 = torch.nn.Linear(4, 3)
o2 = torch.optim.Adam(m2.parameters())
m2.load_state_dict(got["model"])
o2.load_state_dict(got["optimizer"])
assert torch.equal(m2.bias, m.bias) and torch.equal(o2.state_dict()["state"][0]["exp_avg"], o.state_dict()["state"][0]["exp_avg"])

def refused(fn, *words):
    try:
        fn()
    except ValueError as e:
        for w in words:
            assert w in str(e), (w, str(e))
        return
    raise SystemExit("not refused: " + " ".join(words))
refused(lambda: c.save_checkpoint(7, state(7), storage_type="disk"), "StorageType.MEMORY or StorageType.DISK")
refused(lambda: DdpCheckpointer(d, storage=object()), "rover run --checkpoint-dir", "leave storage out")
refused(lambda: DdpCheckpointer(d, deletion_strategy=object()), "--checkpoint-keep", "leave deletion_strategy out")
refused(lambda: DdpCheckpointer(""), "checkpoint_dir is empty")
refused(lambda: DdpCheckpointer("s3://bucket/run"), "needs ` + "`rover run`" + `")
print("ok")
`
	if out := runPython(t, script, nil, dir); string(out) != "ok\n" {
		t.Fatalf("python: %s", out)
	}
}

// TestDdpCheckpointerReadsDLRoverFiles: checkpoints that DLRover wrote
// (dlrover_latest.txt and <step>/rank_<r>.pt, torch.save files) load when
// the job's storage holds no Rover checkpoint, or by resume_path; a file
// that would run code when unpickled is refused and runs nothing.
func TestDdpCheckpointerReadsDLRoverFiles(t *testing.T) {
	dir := t.TempDir()
	script := `
import os, sys
sys.path.insert(0, ".")
import torch
from dlrover.trainer.torch.flash_checkpoint.ddp import DdpCheckpointer, StorageType
d, scratch = sys.argv[1], sys.argv[2]
m = torch.nn.Linear(4, 3)
state = {"model": m.state_dict(), "step": 7, "lr": 0.1}
os.makedirs(os.path.join(d, "7"))
torch.save(state, os.path.join(d, "7", "rank_0.pt"))
open(os.path.join(d, "dlrover_latest.txt"), "w").write("7")

c = DdpCheckpointer(d)
got = c.load_checkpoint()
assert c.loaded_step == 7 and got["step"] == 7 and got["lr"] == 0.1
assert torch.equal(got["model"]["weight"], m.weight.detach())
# A step saved with Rover wins over DLRover's files.
c.save_checkpoint(9, {"step": 9}, storage_type=StorageType.DISK)
assert DdpCheckpointer(d).load_checkpoint() == {"step": 9}

# resume_path: a .pt file (also one wrapped as DLRover's engine wraps it), or a directory.
torch.save({"model_states": {"step": 3}}, os.path.join(scratch, "checkpoint-3.pt"))
assert c.load_checkpoint(resume_path=os.path.join(scratch, "checkpoint-3.pt")) == {"step": 3}
assert c.load_checkpoint(resume_path=os.path.join(d, "7"))["step"] == 7
assert c.load_checkpoint(resume_path=d)["step"] == 7 and c.loaded_step == 7

class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + os.path.join(scratch, "pwned"),))
torch.save({"model": Evil()}, os.path.join(scratch, "evil.pt"))
try:
    c.load_checkpoint(resume_path=os.path.join(scratch, "evil.pt"))
    raise SystemExit("a pickle with code loaded")
except ValueError as e:
    assert "cannot read" in str(e) and "weights_only=False" in str(e), str(e)
assert not os.path.exists(os.path.join(scratch, "pwned"))
try:
    c.load_checkpoint(resume_path=os.path.join(scratch, "nothing"))
    raise SystemExit("a missing resume_path loaded")
except FileNotFoundError as e:
    assert "does not exist" in str(e)
print("ok")
`
	if out := runPython(t, script, nil, dir, t.TempDir()); string(out) != "ok\n" {
		t.Fatalf("python: %s", out)
	}
}

// TestFsdpShardCheckpointerNeedsFSDP: where torch.distributed.fsdp cannot
// be imported (Debian's torch 1.13 on Python 3.11), the constructors of
// FsdpShardCheckpointer and FsdpFullCheckpointer say so and what to use;
// where it can, the checkpointer is made.
func TestFsdpShardCheckpointerNeedsFSDP(t *testing.T) {
	script := `
import sys
sys.path.insert(0, ".")
from dlrover.trainer.torch.flash_checkpoint.fsdp import FsdpFullCheckpointer, FsdpShardCheckpointer, StorageType
def imports(*names):
    try:
        for n in names:
            __import__(n)
        return True
    except Exception:
        return False
for cls, has in ((FsdpShardCheckpointer, imports("torch.distributed.fsdp")),
                 (FsdpFullCheckpointer, imports("torch.distributed.fsdp", "torch.distributed.fsdp.api") and
                  hasattr(sys.modules["torch.distributed.fsdp.api"], "FullOptimStateDictConfig"))):
    try:
        cls(sys.argv[1])
        assert has, "made without FSDP"
        out = "ok: fsdp"
    except RuntimeError as e:
        assert not has, e
        for w in (cls.__name__ + " needs torch.distributed.fsdp", "cannot import", "2.0 or later", "DdpCheckpointer"):
            assert w in str(e), (w, str(e))
        out = "ok: no fsdp"
print(out)
`
	out := string(runPython(t, script, nil, t.TempDir()))
	if !strings.HasPrefix(out, "ok: ") {
		t.Fatalf("python: %s", out)
	}
	t.Logf("this torch: %s", strings.TrimSpace(out))
}

// TestDLRoverModulesNotProvided: DLRover modules Rover does not provide
// fail at import, naming what to use instead.
func TestDLRoverModulesNotProvided(t *testing.T) {
	script := `
import importlib, importlib.util, sys
sys.path.insert(0, ".")
for name, pkg, lib in (("flash_checkpoint.deepspeed", "deepspeed", "DeepSpeed"),
                       ("flash_checkpoint.megatron", "megatron", "Megatron-LM"),
                       ("flash_checkpoint.megatron_dist_ckpt", "megatron", "Megatron-LM"),
                       ("flash_checkpoint.hf_trainer", "transformers", "transformers")):
    try:
        importlib.import_module("dlrover.trainer.torch." + name)
        raise SystemExit(name + " imported")
    except ImportError as e:
        assert "not provided by Rover" in str(e) and "migrating-from-dlrover.md" in str(e), str(e)
        assert "rover.checkpoint.Checkpointer" in str(e), str(e)
        installed = importlib.util.find_spec(pkg) is not None
        assert (lib + " is not installed") in str(e) or installed, str(e)
# What DLRover's examples import is there.
from dlrover.trainer.torch.elastic.trainer import ElasticTrainer
from dlrover.trainer.torch.elastic.dataloader import ElasticDataLoader
from dlrover.trainer.torch.flash_checkpoint.fsdp import FsdpFullCheckpointer, FsdpShardCheckpointer
from dlrover.python.common.storage import KeepLatestStepStrategy, KeepStepIntervalStrategy, CheckpointDeletionStrategy
print("ok")
`
	if out := runPython(t, script, nil); string(out) != "ok\n" {
		t.Fatalf("python: %s", out)
	}
}
