#!/usr/bin/env python3
"""Independent workers leasing shards of a dataset through rover (leased mode).

Every worker leases shards from the job master (through its node agent),
"processes" their samples, and reports them done. A fast worker takes more
shards than a slow one; a worker that dies loses nothing: its shards go back
to the queue. Run it with:

    rover run --nproc-per-node 4 examples/elastic_data/leased.py --size 20000 --slow-rank 3

Each worker writes the shards it completed to --out (one JSON line per shard).
"""

import argparse
import json
import os
import time

from rover.data import ShardClient


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
        if client.complete(shard):
            done += 1
            samples += len(idx)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps({"rank": rank, "epoch": shard.epoch, "indices": idx}) + "\n")
    print(f"rank {rank}: {done} shards, {samples} samples in {time.time() - start:.2f}s", flush=True)


if __name__ == "__main__":
    main()
