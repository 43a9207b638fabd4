"""Flash checkpoint with DDP: save to memory every step, persist every N.

    rover run --standalone --nproc-per-node 2 --max-restarts 1 \
        examples/flash_ckpt/train.py --dir /tmp/flash-demo --crash-at 37

Every step's state goes to the node agent's shared memory (a copy, then
training goes on); every --persist-every steps the agent also writes it to
--dir in the background. With --crash-at, rank 1 dies once at that step:
the agent restarts the workers and they resume from the last step in
memory, not from the older one in storage. Run it again with the same --dir
and it resumes from storage (a new job has nothing in memory).
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from rover.checkpoint import Checkpointer


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--persist-every", type=int, default=10)
    p.add_argument("--crash-at", type=int, default=0, help="rank 1 exits at this step in the first attempt")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    optim = torch.optim.SGD(model.parameters(), lr=0.05)

    # DDP: every rank holds the same state. Persisted checkpoints go to the
    # job's storage: rover run --checkpoint-dir.
    ckpt = Checkpointer(mode="replicated")
    start = 0
    restored = ckpt.load()
    if restored:
        start, saved = restored
        model.load_state_dict(saved["model"])
        optim.load_state_dict(saved["optim"])
    if rank == 0:
        print(f"world {world}, attempt {restart}: starting at step {start} "
              f"(restored from {ckpt.restored_from or 'nothing'})", flush=True)

    ddp = DDP(model)
    gen = torch.Generator().manual_seed(1234)
    w_true = torch.randn(32, 1, generator=gen)
    for step in range(start + 1, args.steps + 1):
        if restart == 0 and step == args.crash_at and rank == 1:
            print(f"rank 1: crashing at step {step}", file=sys.stderr, flush=True)
            os._exit(1)
        g = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randn(16, 32, generator=g)
        loss = nn.functional.mse_loss(ddp(x), x @ w_true)
        optim.zero_grad()
        loss.backward()
        optim.step()
        # The blocking part is a copy into shared memory; persistence runs in
        # the agent, in the background.
        ckpt.save(step, {"model": model.state_dict(), "optim": optim.state_dict()},
                  persist=step % args.persist_every == 0)
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    ckpt.wait()  # what was persisted is durable before the job ends
    if rank == 0:
        print(f"done at step {args.steps}; persisted checkpoints in {ckpt.url}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
