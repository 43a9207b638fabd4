#!/usr/bin/env python3
"""Independent workers leasing shards of a dataset through rover (leased mode).

Every worker leases shards from the job master (through its node agent),
"processes" their samples, and reports them done. A fast worker takes more
shards than a slow one; a worker that dies loses nothing: its shards go back
to the queue. Run it with:

    rover run --nproc-per-node 4 examples/elastic_data/leased.py --size 20000 --slow-rank 3

Each worker writes the shards it completed to --out (JSON lines): before it
reports a shard done, a "pending" line; then the shard's line, or a "refused"
line when the lease had gone to another worker.
"""

import argparse
import json
import os
import time

from rover.data import ShardClient


def record(path, line):
    """Appends one JSON line to path (if set)."""
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=10_000, help="samples per epoch")
    p.add_argument("--shard-size", type=int, default=100, help="samples per shard")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--per-sample", type=float, default=0.0001, help="seconds of work per sample")
    p.add_argument("--slow-rank", type=int, default=-1, help="this RANK works 5x slower")
    p.add_argument("--out", default=None, help="append completed shards here (JSON lines)")
    args = p.parse_args()

    rank = int(os.environ.get("RANK", "0"))
    per_sample = args.per_sample * (5 if rank == args.slow_rank else 1)
    client = ShardClient("leased-example", size=args.size, shard_size=args.shard_size,
                         epochs=args.epochs, shuffle=True, seed=1)
    done = samples = 0
    start = time.time()
    for shard in client:
        idx = shard.indices()
        time.sleep(per_sample * len(idx))  # the work
        # A process can die after the master took its completion but before
        # it hears so (SIGKILLed, or stopped by a restart of the workers).
        # So the output is announced first, then confirmed or withdrawn: a
        # "pending" line left without its outcome is a shard that may or
        # may not have been completed; the master knows which.
        record(args.out, {"pid": os.getpid(), "lease": shard.lease_id, "epoch": shard.epoch,
                          "indices": idx, "pending": True})
        if client.complete(shard):
            done += 1
            samples += len(idx)
            record(args.out, {"pid": os.getpid(), "lease": shard.lease_id, "rank": rank, "epoch": shard.epoch,
                              "indices": idx})
        else:
            record(args.out, {"pid": os.getpid(), "lease": shard.lease_id, "refused": True})
    print(f"rank {rank}: {done} shards, {samples} samples in {time.time() - start:.2f}s", flush=True)


if __name__ == "__main__":
    main()
