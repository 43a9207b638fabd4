#!/usr/bin/env python3
"""A DDP job written only against DLRover's documented Python API.

It uses DLRover's flash checkpoint (``DdpCheckpointer``: ``StorageType.MEMORY``
every step, ``StorageType.DISK`` every --disk-every steps, loaded with
``load_checkpoint()`` at start) and DLRover's ``ElasticDistributedSampler``,
and runs unchanged under ``rover run`` or ``dlrover-run`` (gloo, CPU):

    rover run --nproc-per-node 2 --max-restarts 1 --checkpoint-dir /tmp/ckpt \\
        examples/dlrover_compat/train.py --checkpoint-dir /tmp/ckpt --out /tmp/out.json

Nothing here imports ``rover``. The job is deterministic: the final weights
are the same whether it runs straight through or a worker crashes
(--crash-at-step) and the job resumes from the checkpoint in memory.
"""

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

from dlrover.trainer.torch.elastic.sampler import ElasticDistributedSampler
from dlrover.trainer.torch.flash_checkpoint.ddp import DdpCheckpointer, StorageType


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint-dir", required=True, help="DdpCheckpointer's directory (the job's --checkpoint-dir)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--samples", type=int, default=256, help="dataset size")
    p.add_argument("--batch-size", type=int, default=8, help="samples per rank per step")
    p.add_argument("--disk-every", type=int, default=10, help="persist with StorageType.DISK every N steps")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", default=None, help="rank 0 writes the final weights here as JSON")
    p.add_argument("--log", default=None, help="every rank appends 'restart=R rank=r start_step=s' when it starts")
    p.add_argument("--crash-at-step", type=int, default=-1, help="crash just before step S (default: never)")
    p.add_argument("--crash-rank", type=int, default=1)
    p.add_argument("--crash-marker", default=None, help="crash only while this file does not exist; it is created")
    return p.parse_args()


def dataset(seed, n):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    w = torch.randn(16, 1, generator=g)
    return TensorDataset(x, torch.sin(x @ w))


def maybe_crash(args, step, rank):
    if step != args.crash_at_step or rank != args.crash_rank:
        return
    if args.crash_marker:
        if os.path.exists(args.crash_marker):
            return
        open(args.crash_marker, "w").write(f"crashed before step {step} on rank {rank}\n")
    print(f"[rank {rank}] injected crash before step {step}", file=sys.stderr, flush=True)
    os._exit(1)


def main():
    args = parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    data = dataset(args.seed, args.samples)
    sampler = ElasticDistributedSampler(data, shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    checkpointer = DdpCheckpointer(args.checkpoint_dir)

    step, in_epoch = 0, 0
    state = checkpointer.load_checkpoint()
    if state:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        sampler.load_state_dict(state["sampler"])
        step = state["step"]
        in_epoch = state["sampler"]["completed_num"] // (args.batch_size * world)
    if args.log:
        with open(args.log, "a") as f:
            f.write(f"restart={os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')} rank={rank} start_step={step}\n")
    ddp = DDP(model)
    for epoch in range(sampler.epoch, args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            maybe_crash(args, step + 1, rank)
            optimizer.zero_grad()
            nn.functional.mse_loss(ddp(x), y).backward()
            optimizer.step()
            step, in_epoch = step + 1, in_epoch + 1
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                     "sampler": sampler.state_dict(in_epoch, args.batch_size)}
            path = os.path.join(args.checkpoint_dir, f"checkpoint-{step}.pt")
            checkpointer.save_checkpoint(step, state, path, storage_type=StorageType.MEMORY)
            if step % args.disk_every == 0:
                checkpointer.save_checkpoint(step, state, path, storage_type=StorageType.DISK)
        in_epoch = 0
    checkpointer.save_checkpoint(step, state, storage_type=StorageType.DISK)
    checkpointer.wait_latest_checkpoint(timeout=300)
    if rank == 0 and args.out:
        out = {"step": step, "world_size": world,
               "restart_count": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
               "weights": {k: v.flatten().tolist() for k, v in model.state_dict().items()}}
        with open(args.out + ".tmp", "w") as f:
            json.dump(out, f)
        os.replace(args.out + ".tmp", args.out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
