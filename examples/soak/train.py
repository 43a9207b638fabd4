"""The workload of `rover soak`: a DDP job with a fixed ideal step time.

    rover run --nnodes 2 --nproc-per-node 1 ... examples/soak/train.py \
        --steps 3000 --log steps.log --ckpt flash

Each step trains a small MLP on a synthetic batch (gloo, CPU) and sleeps
out the rest of --step-time, so that a step's ideal wall time is fixed
whatever the machine; a checkpoint comes on top of it, so its cost shows in
the step's time. Two ways to checkpoint:

* ``--ckpt flash``: ``rover.checkpoint`` to the agent's memory every
  --save-every steps, persisted every --persist-every; each step is reported
  to Rover (rover.progress).
* ``--ckpt torchsave``: rank 0 writes a plain ``torch.save`` file every
  --save-every steps (written beside and renamed over --path), and a
  restarted worker resumes from it. No Rover import: this is what a user
  runs under torchrun.

Every rank appends to --log, one line per event with its wall time in Unix
nanoseconds, which `rover soak` computes the goodput from:

    start rank=R pid=P step=S t=NS   ready to train, resuming after step S
    step rank=R pid=P step=S t=NS    step S completed
    step rank=R pid=P step=S t=NS save=NS   ... and its checkpoint save blocked
                                            training this long (nanoseconds)
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--step-time", type=float, default=0.1, help="ideal seconds per step")
    p.add_argument("--log", required=True, help="the step log this rank appends to")
    p.add_argument("--ckpt", choices=["flash", "torchsave"], default="flash")
    p.add_argument("--save-every", type=int, default=2)
    p.add_argument("--persist-every", type=int, default=20, help="with --ckpt flash")
    p.add_argument("--path", default="", help="with --ckpt torchsave: the checkpoint file")
    args = p.parse_args()
    if args.ckpt == "torchsave" and not args.path:
        p.error("--ckpt torchsave needs --path")

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    log = open(args.log, "a", buffering=1)  # one write per line: lines of ranks never interleave

    def line(kind, step, save_ns=None):
        extra = "" if save_ns is None else f" save={save_ns}"
        log.write(f"{kind} rank={rank} pid={os.getpid()} step={step} t={time.time_ns()}{extra}\n")

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1))
    optim = torch.optim.SGD(model.parameters(), lr=0.01)
    start, ckpt, progress = 0, None, None
    if args.ckpt == "flash":
        import rover.progress as progress
        from rover.checkpoint import Checkpointer

        ckpt = Checkpointer(mode="replicated")
        restored = ckpt.load()
        if restored:
            start, saved = restored
            model.load_state_dict(saved["model"])
            optim.load_state_dict(saved["optim"])
    elif os.path.exists(args.path):
        saved = torch.load(args.path)
        model.load_state_dict(saved["model"])
        optim.load_state_dict(saved["optim"])
        start = saved["step"]

    ddp = DDP(model)
    w_true = torch.randn(64, 1, generator=torch.Generator().manual_seed(1234))
    line("start", start)
    for step in range(start + 1, args.steps + 1):
        began = time.monotonic()
        x = torch.randn(32, 64, generator=torch.Generator().manual_seed(step * 1000 + rank))
        loss = nn.functional.mse_loss(ddp(x), x @ w_true)
        optim.zero_grad()
        loss.backward()
        optim.step()
        rest = args.step_time - (time.monotonic() - began)
        if rest > 0:
            time.sleep(rest)
        save_ns = None
        if step % args.save_every == 0:
            save_began = time.monotonic_ns()
            state = {"model": model.state_dict(), "optim": optim.state_dict()}
            if ckpt is not None:
                ckpt.save(step, state, persist=step % args.persist_every == 0)
            else:
                if rank == 0:
                    torch.save(dict(state, step=step), args.path + ".tmp")
                    os.replace(args.path + ".tmp", args.path)
                dist.barrier()  # no rank runs ahead of a checkpoint it may resume from
            save_ns = time.monotonic_ns() - save_began  # checkpoint badput, not step time
        line("step", step, save_ns)
        if progress is not None:
            progress.step(step)
    if ckpt is not None:
        ckpt.wait()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
