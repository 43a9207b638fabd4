"""Rover's node check program: one node's part of one group's check.

The node agent runs it (``python -m rover.nodecheck``) when the job was
started with ``--network-check``; see docs/design/node-check.md. It times a
compute benchmark, then joins the group's process group through the same
stack training uses (torch.distributed, gloo on CPU, nccl on GPUs) and times
an all-reduce. It prints one JSON line: ``{"ok": true, "compute_s": ...,
"collective_s": ...}`` or ``{"ok": false, "stage": ..., "error": ...}``.

Environment (set by the agent): ROVER_NODECHECK_STORE_ADDR and _PORT (the
group leader's TCPStore), _RANK, _WORLD_SIZE, _TIMEOUT (seconds), _NODE_ID,
_COMM_PERF ("1": a larger collective), _BACKEND (optional override).

Test-only: ROVER_NODECHECK_TEST_CRASH, a comma-separated list of node ids
(or "all"), makes the program crash at once on those nodes, as a broken
node's would.
"""

import json
import os
import sys
import time


def _result(**kw):
    print(json.dumps(kw), flush=True)


def main():
    env = os.environ
    node = env.get("ROVER_NODECHECK_NODE_ID", "")
    crash = env.get("ROVER_NODECHECK_TEST_CRASH", "")
    if crash and (crash == "all" or node in crash.split(",")):
        sys.stderr.write("rover node check: crashing as ROVER_NODECHECK_TEST_CRASH asks (test-only)\n")
        sys.stderr.flush()
        os._exit(3)
    rank = int(env["ROVER_NODECHECK_RANK"])
    world = int(env["ROVER_NODECHECK_WORLD_SIZE"])
    timeout = float(env.get("ROVER_NODECHECK_TIMEOUT", "30"))
    comm_perf = env.get("ROVER_NODECHECK_COMM_PERF") == "1"
    stage = "import"
    try:
        from datetime import timedelta

        import torch
        import torch.distributed as dist
    except Exception as e:  # no torch: the check cannot run, which is no pass
        _result(ok=False, stage="import",
                error="python at %s cannot import torch (%s: %s): the compute benchmark and the all-reduce "
                      "could not run; point PYTHON_EXEC at a Python that has torch, or start the job without "
                      "--network-check" % (sys.executable, type(e).__name__, e))
        return 0
    try:
        stage = "compute"
        torch.manual_seed(rank)
        a = torch.randn(256, 256)
        # The best of a few repetitions: a node's speed, not its neighbours'
        # noise (the other nodes' programs start at the same time).
        compute = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            for _ in range(10):
                a = torch.tanh(a @ a)
            compute = min(compute, time.perf_counter() - t)
        collective = 0.0
        backend = env.get("ROVER_NODECHECK_BACKEND") or ("nccl" if torch.cuda.is_available() else "gloo")
        if world > 1:
            stage = "init"
            store = dist.TCPStore(env["ROVER_NODECHECK_STORE_ADDR"], int(env["ROVER_NODECHECK_STORE_PORT"]),
                                  world, rank == 0, timedelta(seconds=timeout))
            dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                    timeout=timedelta(seconds=timeout))
            stage = "collective"
            device = "cuda" if backend == "nccl" else "cpu"
            n = (16 << 20 if comm_perf else 1 << 18)  # floats: 64 MiB or 1 MiB
            x = torch.ones(n, device=device)
            dist.barrier()
            iters = 3
            best = float("inf")
            for _ in range(iters):
                t = time.perf_counter()
                dist.all_reduce(x)
                if device == "cuda":
                    torch.cuda.synchronize()
                best = min(best, time.perf_counter() - t)
            collective = 2 * best  # two all-reduces at the best one's speed
            want = float(world ** iters)
            if float(x[0]) != want:
                raise RuntimeError("all_reduce gave %g, want %g" % (float(x[0]), want))
            dist.destroy_process_group()
    except Exception as e:
        _result(ok=False, stage=stage, error="%s: %s" % (type(e).__name__, e))
        return 1
    _result(ok=True, compute_s=compute, collective_s=collective, backend=backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
