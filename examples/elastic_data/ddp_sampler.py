#!/usr/bin/env python3
"""DDP with ElasticSampler and flash checkpoint: exactly once per epoch.

Every rank trains the slice of each global batch that ElasticSampler gives it;
the sampler's position is saved with the model in every flash checkpoint
(memory every step, storage every --persist-every steps). After a crash, a
lost node or a new one, the workers resume from the newest checkpoint every
rank can load and continue with exactly the samples not trained yet, whatever
the world size is now. With --log DIR every rank appends what it trained
(round, step, epoch, indices) so a test can check exactly-once.

With --global-batch-size G the global batch stays G whatever the world size:
each rank trains its share of it (ElasticBatchSampler), and the loss is
weighed so that the averaged gradient is the mean over the G samples.

    rover run --nproc-per-node 2 --checkpoint-dir /tmp/flash --checkpoint-keep 2 examples/elastic_data/ddp_sampler.py
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

from rover.checkpoint import Checkpointer
from rover.data import ElasticBatchSampler, ElasticSampler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=600, help="samples per epoch")
    p.add_argument("--batch-size", type=int, default=4, help="per rank, fixed (the global batch is world * this)")
    p.add_argument("--global-batch-size", type=int, default=0,
                   help="the global batch, fixed across world sizes (instead of --batch-size)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--persist-every", type=int, default=5)
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--log", default=None, help="directory for the per-rank training logs")
    p.add_argument("--out", default=None, help="rank 0 writes the final step and weights here (JSON)")
    args = p.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    data = torch.randn(args.size, 8)
    model = DDP(nn.Linear(8, 1))
    optim = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.global_batch_size:
        sampler = ElasticSampler("ddp-sampler", size=args.size, global_batch_size=args.global_batch_size,
                                 shuffle=True, seed=5, epochs=args.epochs)
    else:
        sampler = ElasticSampler("ddp-sampler", size=args.size, batch_size=args.batch_size, shuffle=True, seed=5,
                                 epochs=args.epochs)
    ckpt = Checkpointer(mode="replicated")  # persists to the job's --checkpoint-dir
    step = 0
    restored = ckpt.load()
    if restored:
        step, state = restored
        model.module.load_state_dict(state["model"])
        optim.load_state_dict(state["optim"])
        sampler.load_state_dict(state["data"])
    else:
        sampler.load_state_dict({"epoch": 0, "consumed": 0})  # no checkpoint: model and data start over
    round_ = os.environ.get("ROVER_ROUND", "0")
    log = open(os.path.join(args.log, f"train-round{round_}-rank{rank}.jsonl"), "a") if args.log else None
    if log:
        log.write(json.dumps({"round": int(round_), "start_step": step, "world": world,
                              "global_batch": sampler.global_batch_size}) + "\n")
        log.flush()
    if rank == 0:
        print(f"round {round_}: world {world}, resuming at step {step}, position {sampler.position}", flush=True)

    while sampler.position[0] < args.epochs:
        epoch = sampler.position[0]
        batches = list(ElasticBatchSampler(sampler))  # this rank's batch of each step left in the epoch
        if not batches:
            break
        for b, batch in enumerate(batches):
            step += 1
            if log:
                # Logged before the gradient all-reduce: once any rank has
                # finished (and saved) this step, every rank has logged it,
                # even one that is killed right after the all-reduce.
                log.write(json.dumps({"step": step, "epoch": epoch, "indices": batch}) + "\n")
                log.flush()
            optim.zero_grad()
            if args.global_batch_size:
                # The sum of the per-sample losses times world/global batch:
                # DDP's average over the ranks is the mean over the global
                # batch, also when the ranks' shares differ by one.
                loss = model(data[batch]).pow(2).sum() * sampler.loss_scale
            else:
                loss = model(data[batch]).pow(2).mean()
            loss.backward()
            optim.step()
            state = {"model": model.module.state_dict(), "optim": optim.state_dict(), "data": sampler.state_dict(b + 1)}
            ckpt.save(step, state, persist=step % args.persist_every == 0)
            if args.step_sleep:
                time.sleep(args.step_sleep)
    ckpt.wait()
    dist.barrier()
    if rank == 0:
        print(f"done at step {step}", flush=True)
        if args.out:
            weights = {k: v.flatten().tolist() for k, v in model.module.state_dict().items()}
            with open(args.out, "w") as f:
                json.dump({"step": step, "world_size": world, "weights": weights}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
