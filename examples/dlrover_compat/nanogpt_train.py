#!/usr/bin/env python3
"""A nanoGPT-style job written only against DLRover's Python API.

A tiny character-level GPT (two causal self-attention blocks) trains on a
synthetic text, with the pieces of DLRover's nanoGPT example:
``ElasticDistributedSampler`` over the text's blocks, an ``ElasticDataLoader``,
``ElasticTrainer.prepare(optimizer)`` and ``with trainer.step():`` around each
step, and ``DdpCheckpointer(save_dir)`` saving to memory every
--save_memory_interval steps and to storage every --save_storage_interval
steps. Its memory saves leave ``"step"`` out, as DLRover's flash-checkpoint
demo does; ``load_checkpoint()`` still answers ``state.get("step", 0)`` with
the step saved:

    dlrover-run --nnodes=1 --nproc_per_node=2 --max_restarts=3 --checkpoint-dir /tmp/ckpt \\
        examples/dlrover_compat/nanogpt_train.py --save_dir /tmp/ckpt --out /tmp/out.json

Nothing here imports ``rover``. The job is deterministic (dropout 0): killed
at any point and resumed from the checkpoint in memory, it ends with the
weights of an uninterrupted run.
"""

import argparse
import json
import math
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import Dataset

from dlrover.trainer.torch.elastic.dataloader import ElasticDataLoader
from dlrover.trainer.torch.elastic.sampler import ElasticDistributedSampler
from dlrover.trainer.torch.elastic.trainer import ElasticTrainer
from dlrover.trainer.torch.flash_checkpoint.ddp import DdpCheckpointer, StorageType


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.qkv, self.proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))
        # Not a buffer: DDP would broadcast it, and gloo has no bool.
        self.mask = torch.tril(torch.ones(block_size, block_size)).bool()

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.n_head)
        att = F.softmax(att.masked_fill(~self.mask[:t, :t], float("-inf")), dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab_size, n_embd), nn.Embedding(block_size, n_embd)
        self.blocks = nn.Sequential(*[Block(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln, self.head = nn.LayerNorm(n_embd), nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        logits = self.head(self.ln(self.blocks(x)))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class CharDataset(Dataset):
    """Every block_size window of a text of tokens, and its next characters."""

    def __init__(self, tokens, block_size):
        self.tokens, self.block_size = tokens, block_size

    def __len__(self):
        return len(self.tokens) - self.block_size

    def __getitem__(self, i):
        chunk = self.tokens[i:i + self.block_size + 1]
        return chunk[:-1], chunk[1:]


def synthetic_text(n, seed):
    """n characters of a small grammar: words of a few letters, spaces, dots."""
    g = torch.Generator().manual_seed(seed)
    words = ["the", "rover", "trains", "again", "from", "memory", "a", "step"]
    out = []
    while len(" ".join(out)) < n:
        out.append(words[int(torch.randint(len(words), (1,), generator=g))])
        if torch.rand(1, generator=g).item() < 0.15:
            out[-1] += "."
    return " ".join(out)[:n]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--save_dir", required=True, help="DdpCheckpointer's directory (the job's --checkpoint-dir)")
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--block_size", type=int, default=16)
    p.add_argument("--n_layer", type=int, default=2)
    p.add_argument("--n_head", type=int, default=2)
    p.add_argument("--n_embd", type=int, default=32)
    p.add_argument("--text_size", type=int, default=400)
    p.add_argument("--max_iters", type=int, default=60)
    p.add_argument("--learning_rate", type=float, default=3e-3)
    p.add_argument("--save_memory_interval", type=int, default=1)
    p.add_argument("--save_storage_interval", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--out", default=None, help="rank 0 writes the final weights here as JSON")
    p.add_argument("--log", default=None, help="every rank appends 'restart=R rank=r start_step=s' when it starts")
    p.add_argument("--progress", default=None, help="rank 0 writes the steps done here")
    return p.parse_args()


def main():
    args = parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    text = synthetic_text(args.text_size, args.seed)
    chars = sorted(set(text))
    tokens = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    data = CharDataset(tokens, args.block_size)
    sampler = ElasticDistributedSampler(dataset=data, shuffle=True, seed=args.seed)
    loader = ElasticDataLoader(data, batch_size=args.batch_size, sampler=sampler)
    torch.manual_seed(args.seed)
    model = DDP(GPT(len(chars), args.block_size, args.n_layer, args.n_head, args.n_embd))
    trainer = ElasticTrainer(model=model, dataloader=loader)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.1, betas=(0.9, 0.95))
    optimizer = trainer.prepare(optimizer)
    checkpointer = DdpCheckpointer(args.save_dir)

    state = checkpointer.load_checkpoint()
    if "model" in state:
        model.load_state_dict(state["model"])
    if "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
    if "sampler" in state:
        loader.sampler.load_state_dict(state["sampler"])
    total_steps = state.get("step", 0)  # not saved: the checkpointer knows it
    if args.log:
        with open(args.log, "a") as f:
            f.write(f"restart={os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')} rank={rank} "
                    f"start_step={total_steps}\n")

    per_epoch = math.ceil(math.ceil(len(data) / world) / args.batch_size)  # an epoch's steps at this world size
    in_epoch = state["sampler"]["completed_num"] // (args.batch_size * world) if "sampler" in state else 0
    epoch = loader.sampler.epoch
    while total_steps < args.max_iters:
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            with trainer.step():
                _, loss = model(x, y)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad()
            total_steps, in_epoch = total_steps + 1, in_epoch + 1
            sd = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                  "sampler": loader.sampler.state_dict(in_epoch, args.batch_size)}
            if in_epoch == per_epoch:  # the epoch is done: resume at the next one's start
                sd["sampler"] = {"epoch": epoch + 1, "completed_num": 0}
            if total_steps % args.save_memory_interval == 0:
                checkpointer.save_checkpoint(total_steps, sd, storage_type=StorageType.MEMORY)
            if total_steps % args.save_storage_interval == 0 or total_steps == args.max_iters:
                checkpointer.save_checkpoint(total_steps, sd, storage_type=StorageType.DISK)
            if rank == 0 and args.progress:
                with open(args.progress, "w") as f:
                    f.write(str(total_steps))
            if total_steps == args.max_iters:
                break
        epoch, in_epoch = epoch + 1, 0
    checkpointer.wait_latest_checkpoint(timeout=300)
    if rank == 0 and args.out:
        out = {"step": total_steps, "world_size": world,
               "restart_count": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
               "weights": {k: v.flatten().tolist() for k, v in model.state_dict().items()}}
        with open(args.out + ".tmp", "w") as f:
            json.dump(out, f)
        os.replace(args.out + ".tmp", args.out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
