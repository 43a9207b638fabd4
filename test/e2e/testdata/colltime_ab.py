"""Collective timing's cost measured inside one job: each of the two ranks
(gloo, CPU) trains two copies of the DDP example's model side by side, one
with the collective timing hook and one without, alternating their steps
so that the machine's load falls on both alike, and rank 0 prints the
median step time of each. Run by BenchmarkCollectiveTimingInProcess
(test/e2e/colltime_bench_test.go) as

    ROVER_PYTHON=<rover's python dir> RANK=r PORT=p STEPS=n ALLREDUCE=ordered|ddp \
        [ROVER_COLLECTIVE_TIMING=1|always] [HIDDEN=64] [BATCH=16] python3 colltime_ab.py

"ordered": both copies use the example's all-gather communication hook,
and the hook wraps one of them; "ddp": one copy keeps DDP's C++ reducer,
the other is stock DDP under collective timing, which gives it the hook's
Python equivalent of DDP's reducer as ROVER_COLLECTIVE_TIMING says: with 1
(the default) only once its steps are long enough for the hook to cost
under 1% of one (so never with the example's tiny steps), with always at
its first step. HIDDEN and BATCH set the width of the model's hidden
layers and the samples per step (the example's: 64 and 16), for longer
steps and more gradient buckets.
"""

import importlib.util
import os
import statistics
import sys
import time
import types

sys.path.insert(0, os.environ["ROVER_PYTHON"])
import rover._colltime as colltime  # noqa: E402
import rover._ddptiming as ddptiming  # noqa: E402

colltime.install()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("train", os.path.join(here, "..", "..", "..", "examples", "ddp", "train.py"))
train = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train)

rank, steps, mode = int(os.environ["RANK"]), int(os.environ.get("STEPS", "2000")), os.environ.get("ALLREDUCE", "ordered")
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % os.environ["PORT"], rank=rank, world_size=2)


hidden, batch = int(os.environ.get("HIDDEN", train.HIDDEN)), int(os.environ.get("BATCH", "16"))


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(train.IN_DIM, hidden), nn.Tanh(), nn.Linear(hidden, hidden),
                         nn.Tanh(), nn.Linear(hidden, 1))


plain, timed = DDP(model()), DDP(model())
untimed_register = DDP.register_comm_hook.__wrapped__
if mode == "ordered":
    untimed_register(plain, None, train.ordered_allreduce_hook)
    timed.register_comm_hook(None, train.ordered_allreduce_hook)
plain.forward = types.MethodType(DDP.forward.__wrapped__, plain)  # untouched by collective timing
times = {"plain": [], "timed": []}
cpu = {"plain": [], "timed": []}  # the process's CPU seconds per step: less disturbed by other load
x, y = torch.randn(batch, train.IN_DIM), torch.randn(batch, 1)
for i in range(steps):
    pair = (("plain", plain), ("timed", timed))
    for name, m in pair if i % 2 else pair[::-1]:
        t, c = time.perf_counter(), time.process_time()
        m.zero_grad(set_to_none=True)
        ((m(x) - y) ** 2).mean().backward()
        times[name].append(time.perf_counter() - t)
        cpu[name].append(time.process_time() - c)
if rank == 0:
    skip = min(100, steps // 10)  # the first steps build DDP's buckets
    off, on = statistics.median(times["plain"][skip:]), statistics.median(times["timed"][skip:])
    st = timed.__dict__.get("_rover_ddp")
    print("in-process: %d steps, --allreduce %s: %.1f us per step with the hook, %.1f us without" % (steps, mode, on * 1e6, off * 1e6),
          flush=True)
    coff, con = statistics.median(cpu["plain"][skip:]), statistics.median(cpu["timed"][skip:])
    print("in-process CPU: %.1f us per step with the hook, %.1f us without" % (con * 1e6, coff * 1e6), flush=True)
    print("in-process: %d gradient buckets, buckets timed %s, Rover's hook registered at step %d (0: never)" % (
        ddptiming.bucket_count(timed), st.timed if st else False, st.registered_at if st else 0), flush=True)
dist.barrier()  # neither rank leaves while the other still runs
dist.destroy_process_group()
