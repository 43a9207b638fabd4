#!/usr/bin/env python3
"""Flash-checkpoint benchmark without `rover run` (docs/benchmarks.md): the
pure-Python CRC32C, a save to process memory, a synchronous persisted save
(write, CRC32C, fsync, commit) and a load from storage, for a state of
float32 tensors. Run it directly, not under `rover run`:

    PYTHONPATH=python python3 examples/flash_ckpt/bench_direct.py --gib 1
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time

import torch

from rover import under_rover
from rover._crc32c import crc32c
from rover.checkpoint import Checkpointer


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn, repeat):
    """Median wall and CPU seconds of fn over repeat runs, after one run to
    warm up (this VM charges the first touch of fresh memory)."""
    fn()
    walls, cpus = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), cpu()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(cpu() - c)
    return statistics.median(walls), statistics.median(cpus)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gib", type=float, default=1.0, help="state size in GiB of float32 tensors")
    p.add_argument("--tensors", type=int, default=16)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dir", default=None, help="checkpoint directory (default: a temporary one on disk)")
    p.add_argument("--json", default=None, help="write the figures as JSON here")
    args = p.parse_args()
    if under_rover():
        sys.exit("bench_direct.py measures checkpoints without the agent: run it without `rover run`")
    torch.set_num_threads(1)
    n = int(args.gib * (1 << 30) / 4 / args.tensors)
    state = {f"layer{i}": torch.randn(n) for i in range(args.tensors)}
    size = sum(t.numel() * 4 for t in state.values())
    d = args.dir or tempfile.mkdtemp(prefix="rover-bench-direct-", dir=os.environ.get("ROVER_BENCH_DIR", "/var/tmp"))
    try:
        ckpt = Checkpointer(d, keep=1)
        ckpt.reserve(state)
        steps = iter(range(1 << 30))
        save_s, save_cpu = timed(lambda: ckpt.save(next(steps), state), args.repeat)
        persist_s, persist_cpu = timed(lambda: ckpt.save(next(steps), state, persist=True), args.repeat)
        snapshot = memoryview(ckpt._direct.buf)[:ckpt._direct.mem_len]
        crc_s, crc_cpu = timed(lambda: crc32c(snapshot), args.repeat)
        snapshot.release()
        fresh = Checkpointer(d)  # nothing in memory: loads from storage
        load_s, load_cpu = timed(fresh.load, args.repeat)
        step, got = fresh.load()
        assert all(torch.equal(got[k], state[k]) for k in state), "the state loaded differs"
    finally:
        if not args.dir:
            shutil.rmtree(d, ignore_errors=True)
    figures = {
        "state_bytes": size,
        "save_memory_s": round(save_s, 3),
        "save_persist_s": round(persist_s, 3), "save_persist_cpu_s": round(persist_cpu, 3),
        "crc32c_s": round(crc_s, 3), "crc32c_cpu_s": round(crc_cpu, 3),
        "crc32c_mb_per_cpu_s": round(size / crc_cpu / 1e6),
        "load_storage_s": round(load_s, 3), "load_storage_cpu_s": round(load_cpu, 3),
    }
    print(json.dumps(figures))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f)


if __name__ == "__main__":
    main()
