#!/usr/bin/env python3
"""An MNIST-style CNN job written only against DLRover's Python API.

The loop has the shape of DLRover's MNIST example: ``ElasticDistributedSampler``
and ``ElasticDataLoader`` feed a DDP CNN; ``ElasticTrainer`` wraps the
optimizer and scheduler (``prepare``) and every micro-batch runs in ``with
trainer.step(fix_total_batch_size=True)``, so that with WORKER_NUM nodes at
most the global batch stays that of the largest world; ``DdpCheckpointer(dir,
replica_count=1)`` saves to memory after every optimizer step
(``StorageType.MEMORY``) and to storage every --disk-every steps and at the
end. The data are synthetic 12x12 images whose class is where their bright
square is, so it runs anywhere (no torchvision, no download):

    dlrover-run --nnodes=1 --nproc_per_node=2 --max_restarts=3 --checkpoint-dir /tmp/ckpt \\
        examples/dlrover_compat/mnist_train.py --checkpoint-dir /tmp/ckpt --out /tmp/out.json

Nothing here imports ``rover``. The job is deterministic: killed at any point
and resumed from the checkpoint in memory, it ends with the weights of an
uninterrupted run.
"""

import argparse
import json
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import TensorDataset

from dlrover.trainer.torch.elastic.dataloader import ElasticDataLoader
from dlrover.trainer.torch.elastic.sampler import ElasticDistributedSampler
from dlrover.trainer.torch.elastic.trainer import ElasticTrainer
from dlrover.trainer.torch.flash_checkpoint.checkpointer import StorageType
from dlrover.trainer.torch.flash_checkpoint.ddp import DdpCheckpointer


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return F.log_softmax(self.fc(torch.flatten(x, 1)), dim=1)


def synthetic_mnist(n, seed):
    """n noisy 1x12x12 images; class c has a bright 3x3 square at cell c of
    a 4x3 grid (cells 10 and 11 unused)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = 0.3 * torch.rand(n, 1, 12, 12, generator=g)
    for i, c in enumerate(labels.tolist()):
        r, col = divmod(c, 3)
        images[i, 0, r * 3:r * 3 + 3, col * 4:col * 4 + 3] += 1.0
    return TensorDataset(images, labels)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint-dir", required=True, help="DdpCheckpointer's directory (the job's --checkpoint-dir)")
    p.add_argument("--samples", type=int, default=384)
    p.add_argument("--batch-size", type=int, default=8, help="micro-batch of a rank")
    p.add_argument("--num-epochs", type=int, default=2)
    p.add_argument("--disk-every", type=int, default=1000, help="StorageType.DISK every N optimizer steps")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", default=None, help="rank 0 writes the final weights here as JSON")
    p.add_argument("--log", default=None, help="every rank appends 'restart=R rank=r start_step=s' when it starts")
    p.add_argument("--progress", default=None, help="rank 0 writes the optimizer steps done here")
    return p.parse_args()


def main():
    args = parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    data = synthetic_mnist(args.samples, args.seed)
    sampler = ElasticDistributedSampler(dataset=data, shuffle=True, seed=args.seed)
    loader = ElasticDataLoader(dataset=data, batch_size=args.batch_size, sampler=sampler)
    model = DDP(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    checkpointer = DdpCheckpointer(args.checkpoint_dir, replica_count=1)

    state = checkpointer.load_checkpoint()
    if "model" in state:
        model.load_state_dict(state["model"])
    if "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
    if "scheduler" in state:
        scheduler.load_state_dict(state["scheduler"])
    if "sampler" in state:
        loader.sampler.load_state_dict(state["sampler"])
    step = state.get("step", 0)
    if args.log:
        with open(args.log, "a") as f:
            f.write(f"restart={os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')} rank={rank} start_step={step}\n")

    trainer = ElasticTrainer(model, dataloader=loader)
    optimizer, scheduler = trainer.prepare(optimizer, scheduler)
    world = dist.get_world_size()
    micro = state["sampler"]["completed_num"] // (args.batch_size * world) if "sampler" in state else 0
    for epoch in range(loader.sampler.epoch, args.num_epochs):
        loader.sampler.set_epoch(epoch)
        with trainer.epoch(epoch):
            for data_, target in loader:
                with trainer.step(fix_total_batch_size=True):
                    loss = F.nll_loss(model(data_), target)
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                micro += 1
                if not trainer.gradient_state.sync_gradients:
                    continue  # accumulating: save at optimizer steps only
                step += 1
                sd = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                      "scheduler": scheduler.state_dict(),
                      "sampler": loader.sampler.state_dict(micro, loader.batch_size)}
                checkpointer.save_checkpoint(step, sd, storage_type=StorageType.MEMORY)
                if step % args.disk_every == 0:
                    checkpointer.save_checkpoint(step, sd)
                if rank == 0 and args.progress:
                    with open(args.progress, "w") as f:
                        f.write(str(step))
        # The epoch's last save has the whole epoch trained: resumed from
        # it, the epoch yields nothing and this step happens then.
        micro = 0
        scheduler.step()
    sd = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
          "scheduler": scheduler.state_dict(), "sampler": {"epoch": args.num_epochs, "completed_num": 0}}
    checkpointer.save_checkpoint(step, sd, storage_type=StorageType.DISK)
    checkpointer.wait_latest_checkpoint(timeout=300)
    if rank == 0 and args.out:
        out = {"step": step, "world_size": world, "accumulation": trainer.gradient_accumulation_steps,
               "restart_count": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
               "weights": {k: v.flatten().tolist() for k, v in model.state_dict().items()}}
        with open(args.out + ".tmp", "w") as f:
            json.dump(out, f)
        os.replace(args.out + ".tmp", args.out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
