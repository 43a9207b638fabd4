#!/usr/bin/env python3
"""Deterministic DistributedDataParallel training (gloo on CPU) for Rover.

A small MLP (32 -> 64 -> 64 -> 1) learns a fixed nonlinear regression target
from synthetic data. The script is written to be launched by ``rover run`` (or
torchrun): it reads the torchrun environment contract (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, ...) and joins the
process group with ``dist.init_process_group("gloo")`` (env://). Run without
RANK in the environment it trains as a single process on 127.0.0.1.

Determinism: for a fixed world size, the final weights are the same whether
the job runs straight through or crashes and resumes from its checkpoint:

* the model is initialised from ``torch.manual_seed(seed)`` on every rank;
* the batch of rank r at step s comes from a generator seeded with
  ``seed * 1_000_003 + s * 1009 + r``, so it depends only on (seed, step, rank)
  and never on what ran before;
* plain SGD (no momentum); the optimizer state is checkpointed anyway;
* gradients are averaged with a fixed summation order (a DDP comm hook that
  all-gathers each bucket and sums it in rank order). DDP's default all-reduce
  is deterministic for a given bucket layout, but DDP rebuilds its buckets after
  the first iteration of every process start, and with more than 2 ranks gloo's
  sum order depends on where a gradient sits in its bucket: a run resumed at
  step s+1 would use the "first iteration" layout at step s+1 and drift from an
  uninterrupted run by a few ulps (seen: 1e-5 relative with 4 ranks). Pass
  --allreduce ddp for DDP's stock all-reduce;
* rank 0 writes the checkpoint atomically every --ckpt-every steps and all ranks
  wait on a barrier after it, so nobody runs ahead of an unwritten checkpoint.

Steps are numbered 1..--steps; "step s" is the s-th optimizer update, and a
checkpoint saved "at step s" holds the weights after s updates.

See README.md in this directory for how to run it and how crash injection works.
"""

import time

PROCESS_START = time.time()  # before torch is imported: for --log-times

import argparse
import datetime
import fcntl
import json
import os
import socket
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

IMPORTED = time.time()  # after torch is imported: for --log-times

IN_DIM = 32
HIDDEN = 64

# Environment variables dumped by --env-dump: every variable whose name starts
# with one of these prefixes (the torchrun contract plus a few useful extras).
ENV_PREFIXES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_",
    "OMP_NUM_THREADS",
    "PYTHONPATH",
    "PYTHONUNBUFFERED",
    "TORCH_",
    "NCCL_",
    "GLOO_",
    "CUDA_VISIBLE_DEVICES",
    "ROVER_",
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Deterministic DDP (gloo, CPU) regression example for rover run."
    )
    p.add_argument("--steps", type=int, default=200, help="total optimizer steps (default 200)")
    p.add_argument("--batch-size", type=int, default=16, help="samples per rank per step (default 16)")
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (default 0.01)")
    p.add_argument("--seed", type=int, default=1234, help="seed for model init and data (default 1234)")
    p.add_argument("--ckpt", default="./ddp_ckpt.pt",
                   help="checkpoint file, loaded at start if it exists (default ./ddp_ckpt.pt; '' disables)")
    p.add_argument("--flash", action="store_true",
                   help="use Rover's flash checkpoint instead of --ckpt: save to memory every step, persist to "
                        "the job's checkpoint storage (rover run --checkpoint-dir) every --ckpt-every steps, "
                        "resume from memory after a restart")
    p.add_argument("--flash-mode", choices=("replicated", "sharded"), default="replicated",
                   help="with --flash: 'replicated' (every rank holds the whole state; the node keeps one copy) or "
                        "'sharded' (every rank saves only its own slice of the parameters, as FSDP would; a restore "
                        "gathers the slices from every rank) (default replicated)")
    p.add_argument("--flash-every", type=int, default=1,
                   help="with --flash, save to memory every K steps instead of every step (default 1)")
    p.add_argument("--ckpt-every", type=int, default=10,
                   help="rank 0 saves the checkpoint every K steps and at the last step (default 10)")
    p.add_argument("--out", default=None,
                   help="rank 0 writes the final weights here as JSON (default: not written)")
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds to sleep in every step, to make runs long enough to kill (default 0)")
    p.add_argument("--first-step-sleep", type=float, default=0.0,
                   help="seconds to sleep before the first batch of the job's first start (restart count 0): "
                        "a long first step, which Rover's hang detection must not call a hang (default 0)")
    p.add_argument("--crash-at-step", type=int, default=-1,
                   help="crash just before step S runs, i.e. after S-1 completed steps (default -1: never)")
    p.add_argument("--crash-rank", type=int, default=0, help="global rank that crashes (default 0)")
    p.add_argument("--spin-at-step", type=int, default=-1,
                   help="test only: at this step, before its forward pass, --spin-rank loops forever in Python "
                        "(a hang in user code: its peers wait in their next collective; -1 never)")
    p.add_argument("--spin-rank", type=int, default=0, help="global rank that spins (default 0)")
    p.add_argument("--crash-marker", default=None,
                   help="crash only if this file does not exist; it is created just before the crash, "
                        "so the crash happens once per marker (default: crash every time)")
    p.add_argument("--hold-at-step", type=int, default=-1,
                   help="test only: before step S, every rank waits until --hold-file exists "
                        "(a job that cannot end before a test has acted; -1 never)")
    p.add_argument("--hold-file", default=None, help="the file --hold-at-step waits for")
    p.add_argument("--crash-exit-code", type=int, default=1,
                   help="1: raise RuntimeError (recorded in TORCHELASTIC_ERROR_FILE by @record); "
                        "other values: os._exit(code) with no traceback (default 1)")
    p.add_argument("--env-dump", default=None,
                   help="directory; each rank writes env-rank<RANK>-restart<RESTART_COUNT>.json")
    p.add_argument("--log-world", default=None,
                   help="file; each rank appends 'restart=R world=W rank=r start_step=s source=S' on every "
                        "start (S: memory, storage or none, with --flash)")
    p.add_argument("--log-saves", default=None,
                   help="file; with --flash, each rank appends 'restart=R rank=r pid=P step=s' after every save")
    p.add_argument("--log-times", default=None,
                   help="file; each rank appends 'event=E restart=R rank=r step=s t=UNIX_TIME' for E in "
                        "start (the process began), imported (torch is imported), joined (the process group formed), resumed (the "
                        "checkpoint is loaded) and trained (the first step after it is done)")
    p.add_argument("--allreduce", choices=("ordered", "ddp"), default="ordered",
                   help="gradient averaging: 'ordered' (all-gather + sum in rank order, bitwise "
                        "reproducible across restarts) or 'ddp' (stock DDP all-reduce) (default ordered)")
    p.add_argument("--pg-timeout", type=float, default=300.0,
                   help="process-group timeout in seconds for collectives and rendezvous (default 300)")
    return p.parse_args(argv)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(IN_DIM, HIDDEN),
            nn.Tanh(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.Tanh(),
            nn.Linear(HIDDEN, 1),
        )

    def forward(self, x):
        return self.net(x)


def teacher(seed):
    """Fixed target function y = sin(x @ a) . b, the same for every rank and step."""
    g = torch.Generator().manual_seed(seed * 7 + 5)
    a = torch.randn(IN_DIM, 8, generator=g) / (IN_DIM ** 0.5)
    b = torch.randn(8, 1, generator=g) / (8 ** 0.5)
    return a, b


def make_batch(seed, step, rank, batch_size, target):
    """Batch of `rank` at `step`: a function of (seed, step, rank) only.

    The global data of a step is therefore fixed by (step, world size), whatever
    happened earlier in the job (restarts included)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    x = torch.randn(batch_size, IN_DIM, generator=g)
    a, b = target
    y = torch.sin(x @ a) @ b + 0.01 * torch.randn(batch_size, 1, generator=g)
    return x, y


def ordered_allreduce_hook(process_group, bucket):
    """DDP comm hook: average a gradient bucket with a fixed summation order.

    Each rank all-gathers the bucket and adds the copies in rank order, so every
    element is summed as ((g0 + g1) + g2) + ... whatever its offset in the bucket.
    This keeps results bitwise identical when DDP's bucket layout changes (it
    does, after the first iteration of every start). Costs world_size x the
    memory of a bucket: fine for this small model."""
    group = process_group if process_group is not None else dist.group.WORLD
    world = dist.get_world_size(group)
    buf = bucket.buffer()
    parts = [torch.empty_like(buf) for _ in range(world)]
    work = dist.all_gather(parts, buf, group=group, async_op=True)

    def reduce(fut):
        fut.value()  # re-raises if the all-gather failed (e.g. a peer died)
        total = parts[0].clone()
        for part in parts[1:]:
            total.add_(part)
        return total.div_(world)

    return work.get_future().then(reduce)


def shard_size(n, world):
    """Elements of each rank's slice of n parameters (the last may be short)."""
    return (n + world - 1) // world


def param_shard(model, rank, world):
    """This rank's slice of the model's flattened parameters: what it saves in
    sharded mode (no other rank saves it)."""
    vec = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    per = shard_size(vec.numel(), world)
    return vec[min(rank * per, vec.numel()):min((rank + 1) * per, vec.numel())].clone()


def load_shards(model, shard, world):
    """Rebuilds every parameter from the slices the ranks restored: each rank
    contributes its own (all-gathered, padded to one size)."""
    n = sum(p.numel() for p in model.parameters())
    per = shard_size(n, world)
    padded = torch.zeros(per, dtype=shard.dtype)
    padded[:shard.numel()] = shard
    parts = [torch.empty(per, dtype=shard.dtype) for _ in range(world)]
    dist.all_gather(parts, padded)
    torch.nn.utils.vector_to_parameters(torch.cat(parts)[:n], model.parameters())


def env_snapshot():
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}


def atomic_write_bytes(path, write_fn):
    """Write a file atomically: temp file in the same directory, flush, fsync, os.replace."""
    path = os.path.abspath(path)
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            write_fn(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def atomic_write_json(path, obj):
    atomic_write_bytes(path, lambda f: f.write((json.dumps(obj, indent=None) + "\n").encode()))


def append_line(path, line):
    """Append one line with a single O_APPEND write, under an exclusive flock."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            os.write(fd, (line.rstrip("\n") + "\n").encode())
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def save_checkpoint(path, step, model, optim, world_size, seed):
    state = {
        "step": step,
        "model": model.state_dict(),
        "optim": optim.state_dict(),
        "world_size": world_size,
        "seed": seed,
    }
    atomic_write_bytes(path, lambda f: torch.save(state, f))


def slow_down():
    """Test only: on the node whose GROUP_RANK is $DDP_EXAMPLE_SLOW_GROUP_RANK,
    burn $DDP_EXAMPLE_SLOW_SECONDS of CPU in every step, as a slower machine
    would: the straggler Rover's master must name."""
    node = os.environ.get("DDP_EXAMPLE_SLOW_GROUP_RANK")
    if node is None or node != os.environ.get("GROUP_RANK"):
        return
    end = time.perf_counter() + float(os.environ.get("DDP_EXAMPLE_SLOW_SECONDS", "0.05"))
    while time.perf_counter() < end:
        pass


def spin():
    """Test only: loops forever, as a bug in user code would."""
    while True:
        pass


def maybe_crash(args, step, rank):
    if args.crash_at_step < 0 or step != args.crash_at_step or rank != args.crash_rank:
        return
    if args.crash_marker:
        if os.path.exists(args.crash_marker):
            return
        marker_dir = os.path.dirname(os.path.abspath(args.crash_marker))
        os.makedirs(marker_dir, exist_ok=True)
        with open(args.crash_marker, "w") as f:
            f.write(f"crashed at step {step} on rank {rank} pid {os.getpid()}\n")
            f.flush()
            os.fsync(f.fileno())
    sys.stdout.flush()
    print(f"[rank {rank}] injecting crash at step {step} (exit code {args.crash_exit_code})",
          file=sys.stderr, flush=True)
    if args.crash_exit_code == 1:
        raise RuntimeError(f"injected crash at step {step} on rank {rank}")
    os._exit(args.crash_exit_code)


def maybe_hold(args, step):
    """Waits before step --hold-at-step until --hold-file exists (test only)."""
    if step != args.hold_at_step or not args.hold_file:
        return
    while not os.path.exists(args.hold_file):
        time.sleep(0.05)


def setup_standalone_env():
    """Allow `python3 train.py` without a launcher: a one-process group on localhost."""
    if "RANK" in os.environ:
        return
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])


@record
def main(argv=None):
    args = parse_args(argv)
    setup_standalone_env()
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

    if args.env_dump:
        info = env_snapshot()
        info["pid"] = os.getpid()
        info["hostname"] = socket.gethostname()
        atomic_write_json(os.path.join(args.env_dump, f"env-rank{rank}-restart{restart}.json"), info)

    def log_time(event, step=0, t=None):
        if args.log_times:
            append_line(args.log_times, f"event={event} restart={restart} rank={rank} step={step} "
                                        f"t={time.time() if t is None else t:.6f}")

    log_time("start", t=PROCESS_START)
    log_time("imported", t=IMPORTED)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout))
    assert dist.get_rank() == rank and dist.get_world_size() == world_size
    log_time("joined")

    torch.manual_seed(args.seed)
    model = MLP()
    optim = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.0)

    # Every rank loads the checkpoint if it can see it. Rank 0 is authoritative:
    # its step is broadcast, and DDP's constructor broadcasts rank 0's weights,
    # so a rank that cannot see the file (no shared filesystem) still resumes
    # consistently.
    start_step = 0
    flash, source = None, ""
    if args.flash:
        from rover.checkpoint import Checkpointer

        args.ckpt = ""
        flash = Checkpointer(mode=args.flash_mode)
        restored = flash.load()  # the newest step every rank holds in memory, else storage
        source = flash.restored_from or "none"
        if restored and args.flash_mode == "replicated":
            start_step, state = restored
            model.load_state_dict(state["model"])
            optim.load_state_dict(state["optim"])
        if args.flash_mode == "sharded":
            # Every rank must hold its slice of the same step: the master
            # agreed on one for all ranks, from memory or storage.
            step_here = restored[0] if restored else -1
            lo, hi = torch.tensor([step_here]), torch.tensor([step_here])
            dist.all_reduce(lo, op=dist.ReduceOp.MIN)
            dist.all_reduce(hi, op=dist.ReduceOp.MAX)
            if int(lo.item()) != int(hi.item()):
                raise RuntimeError(f"ranks restored different steps ({int(lo.item())} to {int(hi.item())}): "
                                   "a sharded checkpoint needs every rank's slice of one step")
            if restored:
                start_step, state = restored
                load_shards(model, state["shard"], world_size)
    if args.ckpt and os.path.exists(args.ckpt):
        ckpt = torch.load(args.ckpt, map_location="cpu")
        model.load_state_dict(ckpt["model"])
        optim.load_state_dict(ckpt["optim"])
        start_step = int(ckpt["step"])
    step_t = torch.tensor([start_step], dtype=torch.int64)
    dist.broadcast(step_t, src=0)
    if int(step_t.item()) != start_step:
        mine = f"checkpoint at step {start_step}" if start_step else "no checkpoint"
        print(f"[rank {rank}] {mine} here, rank 0 resumes from step {int(step_t.item())}: "
              f"following rank 0 (its weights come with DDP's initial broadcast)",
              file=sys.stderr, flush=True)
        start_step = int(step_t.item())
        if start_step == 0:  # rank 0 starts fresh: so do we
            torch.manual_seed(args.seed)
            model = MLP()
            optim = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.0)

    ddp = DDP(model)  # broadcasts rank 0's parameters and buffers to all ranks
    if args.allreduce == "ordered":
        ddp.register_comm_hook(None, ordered_allreduce_hook)

    if args.log_world:
        append_line(args.log_world, f"restart={restart} world={world_size} rank={rank} start_step={start_step}"
                    + (f" source={source}" if source else ""))
    if rank == 0:
        how = f"resuming from step {start_step}" if start_step else "starting fresh"
        print(f"rank 0: world {world_size} restart {restart}: {how} (ckpt {flash.url if flash else args.ckpt or 'disabled'})",
              flush=True)

    log_time("resumed", start_step)
    target = teacher(args.seed)
    loss_fn = nn.MSELoss()
    t0 = time.time()
    step = start_step
    if args.first_step_sleep > 0 and restart == 0:
        time.sleep(args.first_step_sleep)
    for step in range(start_step + 1, args.steps + 1):
        maybe_crash(args, step, rank)
        maybe_hold(args, step)
        if step == args.spin_at_step and rank == args.spin_rank and restart == 0:
            log_time("spin", step)
            spin()
        slow_down()
        x, y = make_batch(args.seed, step, rank, args.batch_size, target)
        optim.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()  # DDP all-reduces (averages) the gradients here
        optim.step()
        if step == start_step + 1:
            log_time("trained", step)

        if step % 10 == 0 or step == args.steps:
            mean_loss = loss.detach().clone()
            dist.all_reduce(mean_loss)
            mean_loss /= world_size
            if rank == 0:
                print(f"step {step}/{args.steps} loss {mean_loss.item():.4f} "
                      f"world {world_size} restart {restart}", flush=True)

        if flash is not None and (step % max(args.flash_every, 1) == 0 or step == args.steps):
            # SGD without momentum keeps no optimizer state: in sharded mode
            # the parameters' slice is all a rank needs to save.
            state = ({"shard": param_shard(model, rank, world_size)} if args.flash_mode == "sharded"
                     else {"model": model.state_dict(), "optim": optim.state_dict()})
            flash.save(step, state, persist=args.ckpt_every > 0 and step % args.ckpt_every == 0)
            if args.log_saves:
                append_line(args.log_saves, f"restart={restart} rank={rank} pid={os.getpid()} step={step}")
        if args.ckpt and args.ckpt_every > 0 and (step % args.ckpt_every == 0 or step == args.steps):
            if rank == 0:
                save_checkpoint(args.ckpt, step, model, optim, world_size, args.seed)
            dist.barrier()  # nobody runs ahead of a checkpoint that is not written yet

        if args.step_sleep > 0:
            time.sleep(args.step_sleep)

    final_step = max(step, start_step)
    if flash is not None:
        flash.wait()  # what was persisted is durable before the job ends
    dist.barrier()
    if rank == 0:
        elapsed = time.time() - t0
        print(f"done: {final_step - start_step} steps in {elapsed:.2f}s (world {world_size})", flush=True)
        if args.out:
            weights = {name: t.detach().flatten().tolist() for name, t in model.state_dict().items()}
            atomic_write_json(args.out, {
                "step": final_step,
                "world_size": world_size,
                "restart_count": restart,
                "weights": weights,
            })
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:
        if isinstance(e, SystemExit) and e.code in (None, 0):
            raise
        # @record has already written TORCHELASTIC_ERROR_FILE. Leave without
        # running interpreter teardown: after a peer has died, torch 1.13's gloo
        # threads can throw from their destructors (gloo::IoException ->
        # std::terminate -> SIGABRT) or block, so a clean exit code 1 is not
        # guaranteed otherwise.
        if not isinstance(e, SystemExit):
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        code = e.code if isinstance(e, SystemExit) and isinstance(e.code, int) else 1
        os._exit(code)
