#!/usr/bin/env python3
"""Flash-checkpoint benchmark (make bench-ckpt): blocking time of a save to
memory against a plain tensor copy and torch.save with fsync, and restore
from memory against torch.load. Run under `rover run` (one worker)."""

import argparse
import json
import os
import statistics
import tempfile
import time

import torch

from rover.checkpoint import Checkpointer


def timed(fn, repeat=1):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gib", type=float, default=1.0, help="state size in GiB of float32 tensors")
    p.add_argument("--tensors", type=int, default=16)
    p.add_argument("--dir", default=None, help="where torch.save writes (default: a temporary directory on disk)")
    p.add_argument("--json", default=None, help="write the figures as JSON here")
    args = p.parse_args()
    torch.set_num_threads(1)

    n = int(args.gib * (1 << 30) / 4 / args.tensors)
    state = {f"layer{i}": torch.randn(n) for i in range(args.tensors)}
    state_bytes = sum(t.numel() * 4 for t in state.values())
    print(f"state: {args.tensors} float32 tensors, {state_bytes / (1 << 30):.2f} GiB", flush=True)

    # The physical limit: copying the same bytes into preallocated tensors.
    dst = {k: torch.empty_like(v) for k, v in state.items()}
    for k in state:
        dst[k].copy_(state[k])  # touch the destination first

    def memcpy():
        for k in state:
            dst[k].copy_(state[k])
    memcpy_s = timed(memcpy, 3)
    del dst

    ckpt = Checkpointer()
    reserve_s = timed(lambda: ckpt.reserve(state))
    # In training a save follows an optimizer step, which has just written
    # every parameter. Read the state once the same way: during the long
    # reserve this VM's host may have paged the idle state out, and reading
    # it back then costs more than the save itself (docs/benchmarks.md).
    for v in state.values():
        v.view(-1)[::1024].sum()
    first_save_s = timed(lambda: ckpt.save(1, state))
    steps = iter(range(2, 100))
    save_s = timed(lambda: ckpt.save(next(steps), state), 5)

    # Restore into the model's existing tensors (as load_state_dict does),
    # and into new tensors (as torch.load does).
    target = {k: torch.zeros_like(v) for k, v in state.items()}
    restore_memory_s = timed(lambda: ckpt.load(into=target), 3)
    assert all(torch.equal(target[k], state[k]) for k in state), "restore from memory differs"
    del target
    restored = {}

    def restore_new():
        restored["r"] = ckpt.load()
    restore_new_s = timed(restore_new, 1)
    step, got = restored.pop("r")
    assert all(torch.equal(got[k], state[k]) for k in state), "restore from memory differs"
    del got

    d = args.dir or tempfile.mkdtemp(prefix="rover-bench-", dir=os.environ.get("ROVER_BENCH_DIR", "/var/tmp"))
    path = os.path.join(d, "state.pt")

    def torch_save():
        with open(path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
    torch_save_s = timed(torch_save, 2)
    torch_load_s = timed(lambda: torch.load(path), 2)
    os.remove(path)

    res = {
        "state_bytes": state_bytes,
        "memcpy_s": round(memcpy_s, 4),
        "reserve_s": round(reserve_s, 4),
        "first_save_blocking_s": round(first_save_s, 4),
        "save_blocking_s": round(save_s, 4),
        "torch_save_fsync_s": round(torch_save_s, 4),
        "restore_memory_s": round(restore_memory_s, 4),
        "torch_load_s": round(torch_load_s, 4),
        "restore_memory_new_tensors_s": round(restore_new_s, 4),
        "save_vs_memcpy": round(save_s / memcpy_s, 2),
        "torch_save_vs_save": round(torch_save_s / save_s, 1),
        "first_vs_steady": round(first_save_s / save_s, 2),
        "restore_vs_memcpy": round(restore_memory_s / memcpy_s, 2),
    }
    print(f"plain copy {memcpy_s:.3f}s | arena reserve {reserve_s:.3f}s (once, ahead of training) | "
          f"first save {first_save_s:.3f}s | save {save_s:.3f}s ({res['save_vs_memcpy']}x copy) | "
          f"torch.save+fsync {torch_save_s:.3f}s ({res['torch_save_vs_save']}x save) | "
          f"restore from memory {restore_memory_s:.3f}s ({res['restore_vs_memcpy']}x copy; "
          f"{restore_new_s:.3f}s into new tensors) | torch.load {torch_load_s:.3f}s",
          flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f)


if __name__ == "__main__":
    main()
