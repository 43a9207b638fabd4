#!/usr/bin/env python3
"""Steady-state cost of flash checkpoint (make bench-ckpt-steady).

Run under `rover run --nproc-per-node 2 --checkpoint-dir DIR`: two workers,
each keeping one core busy with a single-threaded matmul step loop, as the
workers of a CPU DDP job on a 2-core machine do.

1. Blocking: the median time save() of a few-MB state blocks the worker,
   against a plain copy of the same bytes into preallocated tensors (one
   set, and two in turn as the double-buffered arena does), and the
   difference (the target: at most 1 ms).
2. Background persistence: the mean time of the steps that do not save,
   with a save to memory every 2 steps and the agent persisting every 20th
   ("on"), against the same saves with nothing persisted ("off"). The two
   phases alternate in blocks (the ranks start each block together), so
   that load from other processes on the machine falls on both alike; the
   slowdown is on/off - 1 over all blocks, and the median of the per-block
   ratios beside it.
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

from rover.checkpoint import Checkpointer


def median_ns(fn, n):
    times = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mib", type=float, default=4.0, help="state size in MiB of float32 tensors")
    p.add_argument("--tensors", type=int, default=8)
    p.add_argument("--saves", type=int, default=200, help="saves timed for the blocking figure")
    p.add_argument("--blocks", type=int, default=8, help="blocks of each phase (on and off)")
    p.add_argument("--block-steps", type=int, default=40)
    p.add_argument("--matmul", type=int, default=256, help="matrix size of the step's work")
    p.add_argument("--matmuls", type=int, default=4, help="matmuls per step")
    p.add_argument("--json", default=None, help="rank 0 writes the figures as JSON here")
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()

    n = int(args.mib * (1 << 20) / 4 / args.tensors)
    state = {f"layer{i}": torch.randn(n) for i in range(args.tensors)}
    state_bytes = sum(t.numel() * 4 for t in state.values())
    ckpt = Checkpointer()
    ckpt.reserve(state)
    ckpt.save(0, state)

    # 1. Blocking time of a save against a plain copy of the same bytes.
    dst = {k: torch.empty_like(v) for k, v in state.items()}

    def memcpy():
        for k in state:
            dst[k].copy_(state[k])
    memcpy()
    # The arena is double-buffered: a save writes the slot it did not write
    # last, so its destination is twice the state and leaves the cache more
    # often than one hot destination does. The same copy into two
    # destinations in turn is the like-for-like figure.
    dsts = [{k: torch.empty_like(v) for k, v in state.items()} for _ in range(2)]
    turn = [0]

    def memcpy2():
        turn[0] ^= 1
        for k in state:
            dsts[turn[0]][k].copy_(state[k])
    memcpy2()
    memcpy2()
    dist.barrier()
    step = [0]

    def save():
        step[0] += 1
        ckpt.save(step[0], state)
    copy_ns, copy2_ns, save_ns = [], [], []
    for _ in range(4):  # interleaved, so that load falls on all alike
        copy_ns.append(median_ns(memcpy, args.saves // 4))
        copy2_ns.append(median_ns(memcpy2, args.saves // 4))
        save_ns.append(median_ns(save, args.saves // 4))
    copy_ns, copy2_ns, save_ns = statistics.median(copy_ns), statistics.median(copy2_ns), statistics.median(save_ns)
    del dst, dsts

    # 2. Steps that do not save, with persistence in the background on and off.
    a = torch.randn(args.matmul, args.matmul)
    b = torch.randn(args.matmul, args.matmul)

    def work():
        c = a
        for _ in range(args.matmuls):
            c = torch.mm(c, b)
            c.mul_(1e-3)
        return c
    for _ in range(5):
        work()
    times = {"on": [], "off": []}
    ratios = []
    for blk in range(2 * args.blocks):
        phase = "on" if blk % 2 == 0 else "off"
        if blk % 4 >= 2:
            phase = "off" if phase == "on" else "on"  # on,off,off,on,...: no order bias
        dist.barrier()
        block = []
        for i in range(args.block_steps):
            step[0] += 1
            t0 = time.perf_counter_ns()
            work()
            if i % 2 == 1:
                ckpt.save(step[0], state, persist=phase == "on" and i % 20 == 19)
            else:
                block.append(time.perf_counter_ns() - t0)
        times[phase] += block
        if phase == "off" and times["on"]:
            ratios.append(statistics.mean(times["on"][-len(block):]) / statistics.mean(block))
        elif phase == "on" and times["off"]:
            ratios.append(statistics.mean(block) / statistics.mean(times["off"][-len(block):]))
    ckpt.wait()

    mine = {
        "copy_ms": copy_ns / 1e6,
        "copy_two_ms": copy2_ns / 1e6,
        "save_blocking_ms": save_ns / 1e6,
        "step_on_ms": statistics.mean(times["on"]) / 1e6,
        "step_off_ms": statistics.mean(times["off"]) / 1e6,
        "block_ratio_median": statistics.median(ratios),
    }
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    if rank == 0:
        def avg(k):
            return statistics.mean(r[k] for r in every)
        res = {
            "state_bytes": state_bytes,
            "ranks": len(every),
            "copy_ms": round(avg("copy_ms"), 3),
            "save_blocking_ms": round(avg("save_blocking_ms"), 3),
            "save_minus_copy_ms": round(avg("save_blocking_ms") - avg("copy_ms"), 3),
            "copy_two_ms": round(avg("copy_two_ms"), 3),
            "save_minus_copy_two_ms": round(avg("save_blocking_ms") - avg("copy_two_ms"), 3),
            "step_persist_off_ms": round(avg("step_off_ms"), 2),
            "step_persist_on_ms": round(avg("step_on_ms"), 2),
            "persist_slowdown_pct": round(100 * (avg("step_on_ms") / avg("step_off_ms") - 1), 2),
            "persist_slowdown_block_median_pct": round(100 * (avg("block_ratio_median") - 1), 2),
            "per_rank": every,
        }
        print(f"state {state_bytes / (1 << 20):.1f} MiB | copy {res['copy_ms']:.3f} ms | save blocks "
              f"{res['save_blocking_ms']:.3f} ms (copy + {res['save_minus_copy_ms']:.3f} ms; "
              f"copy into two buffers in turn {res['copy_two_ms']:.3f} ms + {res['save_minus_copy_two_ms']:.3f} ms) | steps without a save: "
              f"{res['step_persist_off_ms']:.2f} ms, {res['step_persist_on_ms']:.2f} ms with persistence "
              f"({res['persist_slowdown_pct']:+.2f}%, block median {res['persist_slowdown_block_median_pct']:+.2f}%)",
              flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
