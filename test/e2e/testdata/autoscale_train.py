#!/usr/bin/env python3
"""DDP with ElasticSampler and flash checkpoints whose step time models a
world-size-dependent cost, for the auto-scaling tests.

Each rank trains its batch of --batch-size samples (a real forward,
backward and gloo all-reduce of a small model), then sleeps --cost seconds
times a factor of the world size that models the job's scaling curve:

  linear      1: every added node adds a node's share of throughput
  saturating  max(1, world / --saturate-at): no gain past --saturate-at nodes

It reports each step with its samples (rover.progress.step), saves the
model and the sampler's position in a flash checkpoint every step, and logs
what it trained (round, step, epoch, indices) to --log for the exactly-once
check. At each epoch's end it stops once --stop-file exists.
"""

import argparse
import datetime
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import rover.progress
from rover.checkpoint import Checkpointer
from rover.data import ElasticSampler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=480, help="samples per epoch")
    p.add_argument("--batch-size", type=int, default=4, help="per rank")
    p.add_argument("--epochs", type=int, default=1000)
    p.add_argument("--cost", type=float, default=0.1, help="seconds of modeled work per step")
    p.add_argument("--curve", choices=["linear", "saturating"], default="linear")
    p.add_argument("--saturate-at", type=int, default=2)
    p.add_argument("--stop-file", required=True)
    p.add_argument("--log", required=True)
    args = p.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    data = torch.randn(args.size, 8)
    model = DDP(nn.Linear(8, 1))
    optim = torch.optim.SGD(model.parameters(), lr=0.01)
    sampler = ElasticSampler("autoscale", size=args.size, batch_size=args.batch_size, shuffle=True, seed=3,
                             epochs=args.epochs)
    ckpt = Checkpointer(mode="replicated")
    step = 0
    restored = ckpt.load()
    if restored:
        step, state = restored
        model.module.load_state_dict(state["model"])
        optim.load_state_dict(state["optim"])
        sampler.load_state_dict(state["data"])
    else:
        sampler.load_state_dict({"epoch": 0, "consumed": 0})
    factor = 1.0 if args.curve == "linear" else max(1.0, world / args.saturate_at)
    round_ = os.environ.get("ROVER_ROUND", "0")
    log = open(os.path.join(args.log, f"train-round{round_}-rank{rank}.jsonl"), "a")
    log.write(json.dumps({"round": int(round_), "start_step": step, "world": world}) + "\n")
    log.flush()
    if rank == 0:
        print(f"round {round_}: world {world}, resuming at step {step}, position {sampler.position}", flush=True)

    stop = torch.zeros(1)
    while sampler.position[0] < args.epochs:
        epoch = sampler.position[0]
        indices = list(iter(sampler))
        if not indices:
            break
        for b in range(len(indices) // args.batch_size):
            batch = indices[b * args.batch_size:(b + 1) * args.batch_size]
            step += 1
            log.write(json.dumps({"step": step, "epoch": epoch, "indices": batch}) + "\n")
            log.flush()
            optim.zero_grad()
            loss = model(data[batch]).pow(2).mean()
            loss.backward()
            optim.step()
            time.sleep(args.cost * factor)
            state = {"model": model.module.state_dict(), "optim": optim.state_dict(), "data": sampler.state_dict(b + 1)}
            ckpt.save(step, state, persist=step % 20 == 0)
            rover.progress.step(step, samples=len(batch))
        stop[0] = 1.0 if rank == 0 and os.path.exists(args.stop_file) else 0.0
        dist.all_reduce(stop)
        if stop[0] > 0:
            break
    ckpt.wait()
    dist.barrier()
    if rank == 0:
        print(f"done at step {step}, world {world}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
