package python

import (
	"path/filepath"
	"testing"
)

// The tests in this file run DLRover's ElasticDataLoader and ElasticTrainer
// (python/dlrover/trainer/torch/elastic) with real torch, outside any rover
// job; test/e2e's TestDLRoverExamples runs them under dlrover-run.

// TestElasticDataLoader: the batch size changes by update_batch_size(n) and
// by the config file, whose version must grow to be applied again; the
// batches drawn and loader.batch_size follow; bad files are ignored and
// bad sizes refused, saying what to change.
func TestElasticDataLoader(t *testing.T) {
	dir := t.TempDir()
	script := `
import json, os, sys
sys.path.insert(0, ".")
import torch
from torch.utils.data import DataLoader, TensorDataset
from dlrover.trainer.torch.elastic.dataloader import ElasticDataLoader
from dlrover.trainer.torch.elastic.sampler import ElasticDistributedSampler

d = sys.argv[1]
data = TensorDataset(torch.arange(20))
cfg = os.path.join(d, "paral.json")
def write(version, batch_size):
    with open(cfg, "w") as f:
        json.dump({"dataloader": {"version": version, "batch_size": batch_size}}, f)
    st = os.stat(cfg)  # a later write of the same size within the clock's resolution must still count
    os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns + version * 1000))

# No file: the batch size given. DLRover's default path comes from the environment.
l = ElasticDataLoader(data, batch_size=4)
assert isinstance(l, DataLoader) and l.get_batch_size() == 4 and l.config_file == os.environ["DLROVER_PARAL_CONFIG_PATH"]
assert [len(b[0]) for b in l] == [4] * 5
l.update_batch_size(8)
assert l.get_batch_size() == 8 and l.batch_size == 8 and [len(b[0]) for b in l] == [8, 8, 4] and len(l) == 3

# The config file sets it when its version grows; the same version again does nothing.
write(1, 5)
l = ElasticDataLoader(data, batch_size=4, config_file=cfg, sampler=ElasticDistributedSampler(data, shuffle=False))
assert l.get_batch_size() == 5 and l.batch_size == 5, l.get_batch_size()
l.update_batch_size(2)
write(1, 10)
l.update_batch_size()
assert l.get_batch_size() == 2, "an old version was applied again"
write(2, 10)
l.update_batch_size()
assert l.get_batch_size() == 10
# Mid-epoch: the next batch drawn has the new size.
it = iter(l)
first = next(it)[0].tolist()
l.update_batch_size(3)
assert first == list(range(10)) and next(it)[0].tolist() == [10, 11, 12]

# A broken file is ignored (and logged); the batch size stays.
open(cfg, "w").write("{not json")
l.update_batch_size()
assert l.get_batch_size() == 3

def refused(fn, *words):
    try:
        fn()
    except ValueError as e:
        for w in words:
            assert w in str(e), (w, str(e))
        return
    raise SystemExit("not refused: " + " ".join(words))
refused(lambda: l.update_batch_size(-1), "batch_size must be 1 or more")
refused(lambda: ElasticDataLoader(data, batch_size=None).update_batch_size(4), "batch_size=None", "give the loader a batch_size")
print("ok")
`
	env := []string{"DLROVER_PARAL_CONFIG_PATH=" + filepath.Join(dir, "absent.json")}
	if out := runPython(t, script, env, dir); string(out) != "ok\n" {
		t.Fatalf("python: %s", out)
	}
}

// TestElasticTrainerAccumulates runs ElasticTrainer on a DDP model of two
// real gloo ranks whose largest world is 3 nodes of 1 (WORKER_NUM=3): both
// ranks accumulate ceil(3/2) = 2 micro-batches (DLRover's would give rank 0
// two and rank 1 one, and the ranks' allreduces would no longer pair up),
// the optimizer steps on every second call only, and the weights end equal
// on both ranks and to a hand-computed reference: each step's gradient is
// the ranks' mean of the sum over their two micro-batches.
func TestElasticTrainerAccumulates(t *testing.T) {
	script := `
import os, sys, tempfile
sys.path.insert(0, ".")
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from dlrover.trainer.torch.elastic.trainer import ElasticTrainer

LR, MICRO, STEPS = 0.1, 2, 2
def batches(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(3, 4, generator=g), torch.randn(3, 1, generator=g)) for _ in range(MICRO * STEPS)]

def model0():
    torch.manual_seed(7)
    return torch.nn.Linear(4, 1)

def worker(rank, init, out):
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="1")
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    model = DDP(model0())
    base = torch.optim.SGD(model.parameters(), lr=LR)
    sched = torch.optim.lr_scheduler.StepLR(base, step_size=1, gamma=1.0)
    trainer = ElasticTrainer(model)
    optimizer, scheduler = trainer.prepare(base, sched)
    assert trainer.gradient_accumulation_steps == 2, trainer.gradient_accumulation_steps
    assert isinstance(optimizer, torch.optim.Optimizer) and optimizer.param_groups is base.param_groups
    before = [p.detach().clone() for p in model.parameters()]
    for i, (x, y) in enumerate(batches(rank)):
        with trainer.step(fix_total_batch_size=True):
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
        moved = any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
        assert moved == (i % 2 == 1), (rank, i, moved)  # steps on every second call only
        before = [p.detach().clone() for p in model.parameters()]
    assert trainer.num_steps == STEPS
    scheduler.step()
    assert scheduler.get_last_lr() == [LR]
    with trainer.epoch(1):
        assert trainer.num_steps == 0
    torch.save([p.detach() for p in model.parameters()], out + str(rank))
    dist.destroy_process_group()

if __name__ == "__main__":
    os.environ["WORKER_NUM"] = "3"
    d = tempfile.mkdtemp()
    out = os.path.join(d, "w")
    mp.start_processes(worker, args=("file://" + os.path.join(d, "store"), out), nprocs=2, start_method="fork")
    w0, w1 = torch.load(out + "0"), torch.load(out + "1")
    assert all(torch.equal(a, b) for a, b in zip(w0, w1)), "ranks differ"
    ref = model0()
    data = [batches(0), batches(1)]
    for s in range(STEPS):
        grads = []
        for rank in range(2):
            ref.zero_grad()
            for x, y in data[rank][s * MICRO:(s + 1) * MICRO]:
                torch.nn.functional.mse_loss(ref(x), y).backward()
            grads.append([p.grad.clone() for p in ref.parameters()])
        with torch.no_grad():
            for i, p in enumerate(ref.parameters()):
                p -= LR * (grads[0][i] + grads[1][i]) / 2
    for a, b in zip(w0, ref.parameters()):
        assert torch.allclose(a, b, atol=1e-6), (a, b)
    print("ok")
`
	if out := runPython(t, script, nil); string(out) != "ok\n" {
		t.Fatalf("python: %s", out)
	}
}

// TestElasticTrainerAccumulationSteps: the largest world comes from
// WORKER_NUM, else ROVER_MAX_NODES (rover run's --nnodes MAX), else this
// world's node count, times LOCAL_WORLD_SIZE; every rank gets the same
// ceil(largest / now), never 0; step() without fix_total_batch_size
// steps every time; a bad WORKER_NUM is refused naming it.
func TestElasticTrainerAccumulationSteps(t *testing.T) {
	script := `
import os, sys
sys.path.insert(0, ".")
import torch
from dlrover.trainer.torch.elastic.trainer import ElasticTrainer

def gas(world, local, **env):
    for k in ("WORKER_NUM", "ROVER_MAX_NODES", "GROUP_WORLD_SIZE"):
        os.environ.pop(k, None)
    os.environ.update({k: str(v) for k, v in env.items()}, WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(local))
    t = ElasticTrainer(torch.nn.Linear(2, 1))
    t.prepare(torch.optim.SGD(t.model.parameters(), lr=0.1))
    return t.gradient_accumulation_steps

assert gas(4, 2, WORKER_NUM=4) == 2            # 8 ranks at most, 4 now
assert gas(4, 2, WORKER_NUM=4, ROVER_MAX_NODES=2) == 2
assert gas(4, 2, ROVER_MAX_NODES=4) == 2
assert gas(6, 2, ROVER_MAX_NODES=4) == 2        # 8 / 6: every rank 2 (DLRover: 1 or 2 by rank)
assert gas(4, 2, GROUP_WORLD_SIZE=2) == 1       # DLRover: WORKER_NUM=1 -> 2 / 4 = 0
assert gas(1, 1) == 1 and gas(8, 2, WORKER_NUM=2) == 1
try:
    gas(2, 1, WORKER_NUM="two")
    raise SystemExit("a bad WORKER_NUM was taken")
except ValueError as e:
    assert "WORKER_NUM='two'" in str(e), e

os.environ.update(WORKER_NUM="4", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
m = torch.nn.Linear(2, 1)
t = ElasticTrainer(m, dataloader=[1, 2])  # not an ElasticDataLoader: a warning only
opt = t.prepare(torch.optim.SGD(m.parameters(), lr=0.1))
assert t.gradient_accumulation_steps == 4
for i in range(3):
    w = m.weight.detach().clone()
    with t.step():
        m(torch.ones(1, 2)).sum().backward()
        opt.step()
        opt.zero_grad()
    assert not torch.equal(w, m.weight), i
assert t.num_steps == 3
t.reset()
assert t.num_steps == 0
print("ok")
`
	if out := runPython(t, script, []string{"PYTHONWARNINGS=ignore"}); string(out) != "ok\n" {
		t.Fatalf("python: %s", out)
	}
}
