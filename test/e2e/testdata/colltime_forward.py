"""What collective timing adds to each forward call of a stock DDP model
whose gradient buckets it leaves untimed (the adaptive rule's bookkeeping:
two clock reads, a ring of step times, the DDP step for the progress
reports), against the bare call, on a fake DDP (no torch): the best of 7
runs of 200,000 calls each. Run by BenchmarkCollectiveTimingForward
(test/e2e/colltime_bench_test.go) as

    ROVER_PYTHON=<rover's python dir> python3 colltime_forward.py
"""

import os
import sys
import timeit
import types

sys.path.insert(0, os.environ["ROVER_PYTHON"])
from rover import _ddptiming  # noqa: E402

WORLD = object()
c10d = types.SimpleNamespace(GroupMember=types.SimpleNamespace(WORLD=WORLD), get_backend=lambda group=None: "gloo",
                             get_world_size=lambda group=None: 2, all_reduce=lambda *a, **k: None)


class DDP:
    process_group = WORLD

    def register_comm_hook(self, state, hook):
        raise AssertionError("the rule registered its hook for calls microseconds apart")

    def _register_builtin_comm_hook(self, kind):
        pass

    def forward(self, x):
        return x

    def _get_ddp_logging_data(self):
        return {"bucket_sizes": "1"}


bare, plain = DDP.forward, DDP()
_ddptiming.patch(types.SimpleNamespace(DistributedDataParallel=DDP), c10d, "adaptive")
timed = DDP()
n = 200000


def best(f):
    return min(timeit.repeat(f, number=n, repeat=7)) / n * 1e6


t_bare, t_timed = best(lambda: bare(plain, 1)), best(lambda: timed.forward(1))
print("forward: %.3f us per call with the rule, %.3f us bare: %.3f us of bookkeeping" % (t_timed, t_bare, t_timed - t_bare))
