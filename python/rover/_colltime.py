"""Per-rank collective timing, installed into every worker by Rover's
startup hook (``_sitecustomize.py``), with no change to the script.

When ``torch.distributed`` is imported, its collectives (all_reduce,
all_gather, all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor,
broadcast, barrier, reduce, gather, scatter, all_to_all, all_to_all_single)
are wrapped, and so is DDP's bucketed all-reduce (``_ddptiming.py``): a
communication hook the script registers is timed, and a DDP with none gets
Rover's, which does what DDP's built-in one does (each gradient scaled by
1/world size, then summed) so that results do not change, once its steps
are long enough that the Python hook costs under 1% of one. Object
collectives count as the collectives they run.

What is kept is cheap and aggregate, never one record per call:

* the seconds during which at least one collective of this process was in
  flight (issued and not completed), a monotone total: the progress
  reporter takes its difference over each step, so a rank's step splits
  into time in collectives (mostly waiting for the last peer to arrive)
  and compute between them;
* the number of collectives issued;
* the newest collective issued: its op, bytes, process group, sequence
  number in that group, and whether it completed. After a hang, the ranks
  that wait are in one collective and a rank that never arrived is not;
* the newest DDP forward call: the DDP step the rank is in, and whether
  its gradient buckets are timed. Where they are not, a rank that never
  began the step the others are in is still found.

Where collectives run on a GPU, a CudaTimer also times, with CUDA events,
the kernels of the synchronous collectives and of the matrix multiplies
(torch.matmul, mm, bmm, addmm, baddbmm and nn.functional.linear), with
their floating-point operations: the GPU's matmul throughput.

Everything reaches the agent with the progress reports (``progress.py``).
Set ``ROVER_COLLECTIVE_TIMING=0`` to leave torch untouched, ``always`` to
time stock DDP's buckets whatever it costs. Every error of the
installation is swallowed: timing must never break a worker.
docs/design/collective-timing.md has the design.
"""

import atexit
import os
import sys
import threading
import time
import weakref

__all__ = ["clock", "install", "CudaTimer"]

# Collectives wrapped in torch.distributed, by name.
OPS = ("all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "reduce_scatter",
       "reduce_scatter_tensor", "_reduce_scatter_base", "broadcast", "barrier", "reduce", "gather",
       "scatter", "all_to_all", "all_to_all_single")

_C10D = "torch.distributed.distributed_c10d"
_DDP = "torch.nn.parallel.distributed"


class Collective:
    """One collective of this process, while it runs and after."""

    __slots__ = ("op", "nbytes", "group", "seq", "done")

    def __init__(self, op, nbytes, group, seq):
        self.op, self.nbytes, self.group, self.seq, self.done = op, nbytes, group, seq, False

    def report(self):
        """The collective as ReportProgress's JSON carries it."""
        return {"op": self.op, "bytes": str(self.nbytes), "group": self.group, "seq": str(self.seq),
                "done": self.done}


class Clock:
    """Times the collectives of one process: see the module's comment."""

    def __init__(self, now=time.monotonic):
        self._now = now
        self._lock = threading.Lock()
        self._inflight = 0
        self._since = 0.0  # when the in-flight count last rose from zero
        self._total = 0.0  # closed seconds with a collective in flight
        self.count = 0  # collectives issued
        self._seq = {}  # newest sequence number by group
        self.newest = None  # the newest Collective issued
        self.changed = False  # the newest collective changed since the last take
        self.ddp = None  # the newest DDP forward call: (its group, forward calls, buckets timed)
        self.ddp_changed = False  # ddp changed since the last take
        self.cuda = None  # a CudaTimer once a collective ran on a GPU (_cuda_timer)

    def begin(self, op, nbytes, group):
        """Records that a collective was issued; returns it for end()."""
        with self._lock:
            seq = self._seq.get(group, 0) + 1
            self._seq[group] = seq
            c = Collective(op, nbytes, group, seq)
            if self._inflight == 0:
                self._since = self._now()
            self._inflight += 1
            self.count += 1
            self.newest, self.changed = c, True
        return c

    def end(self, c):
        """Records that collective c (from begin) completed; once only."""
        with self._lock:
            if c.done:
                return
            c.done = True
            self._inflight -= 1
            if self._inflight == 0:
                self._total += self._now() - self._since
            if c is self.newest:
                self.changed = True

    def seconds(self):
        """Seconds so far with at least one collective in flight."""
        with self._lock:
            if self._inflight:
                return self._total + self._now() - self._since
            return self._total

    def ddp_step(self, group, forwards, timed):
        """Records a DDP forward call: the rank is in its model's step
        number forwards (_ddptiming.py). No lock: one assignment."""
        self.ddp, self.ddp_changed = (group, forwards, timed), True

    def take_ddp(self):
        """The newest DDP step's report when it changed since the last
        take, else None."""
        if not self.ddp_changed or self.ddp is None:
            return None
        self.ddp_changed = False
        group, forwards, timed = self.ddp
        return {"group": group, "forwards": str(forwards), "bucketsTimed": timed}

    def take_newest(self):
        """The newest collective's report when it changed since the last
        take, else None."""
        with self._lock:
            if not self.changed or self.newest is None:
                return None
            self.changed = False
            return self.newest.report()


class CudaTimer:
    """Times GPU work with CUDA events, as xpu_timer does: the kernels of
    the collectives whose tensors are on a GPU, and matrix multiplies (with
    their floating-point operations, for the GPU's matmul throughput).

    Each timed operation records a start and an end event on the current
    stream around its launch; nothing waits for the GPU: take() sums the
    pairs whose end event has completed (event.query()) and keeps the
    others for later. At most MAX_PENDING pairs wait; operations beyond
    are not timed (counted in dropped). cuda is torch.cuda, or a fake with
    its Event class in tests.
    """

    MAX_PENDING = 1024

    def __init__(self, cuda):
        self._cuda = cuda
        self._lock = threading.Lock()
        self._pending = []  # (kind, start, end, flops), oldest first
        self.collective_seconds = 0.0  # completed kernels, not taken yet
        self.matmul_seconds = 0.0
        self.matmul_flops = 0
        self.dropped = 0

    def start(self):
        """Records a start event; None when too many pairs wait."""
        if len(self._pending) >= self.MAX_PENDING:
            self.dropped += 1
            return None
        try:
            ev = self._cuda.Event(enable_timing=True)
            ev.record()
        except Exception:  # e.g. during stream capture: not timed, never broken
            self.dropped += 1
            return None
        return ev

    def stop(self, kind, start, flops=0):
        """Records the end event of start's operation: kind is
        "collective" or "matmul"; flops counts a matmul's operations."""
        if start is None:
            return
        try:
            end = self._cuda.Event(enable_timing=True)
            end.record()
        except Exception:
            self.dropped += 1
            return
        with self._lock:
            self._pending.append((kind, start, end, flops))

    def take(self):
        """Sums the completed pairs and returns, since the last take, the
        seconds of collective kernels, of matmul kernels and the matmuls'
        floating-point operations."""
        with self._lock:
            waiting = []
            for kind, start, end, flops in self._pending:
                try:
                    if not end.query():
                        waiting.append((kind, start, end, flops))
                        continue
                    seconds = start.elapsed_time(end) / 1000.0  # milliseconds
                except Exception:
                    continue  # an event of a failed stream: not timed
                if kind == "matmul":
                    self.matmul_seconds += seconds
                    self.matmul_flops += flops
                else:
                    self.collective_seconds += seconds
            self._pending = waiting
            out = (self.collective_seconds, self.matmul_seconds, self.matmul_flops)
            self.collective_seconds, self.matmul_seconds, self.matmul_flops = 0.0, 0.0, 0
            return out


def _matmul_flops(name, args):
    """Floating-point operations of a matmul call (2 per multiply-add):
    matmul/mm/bmm(a, b), addmm/baddbmm(c, a, b), linear(x, w)."""
    try:
        if name in ("addmm", "baddbmm"):
            a, b = args[1], args[2]
            return 2 * a.numel() * b.shape[-1]
        a, b = args[0], args[1]
        if name == "linear":
            return 2 * a.numel() * b.shape[0]
        return 2 * a.numel() * (b.shape[-1] if b.dim() > 1 else 1)
    except Exception:
        return 0


def _wrap_matmul(name, fn):
    def timed(*args, **kwargs):
        timer = clock.cuda
        if timer is None or not _on_gpu(args[1] if name in ("addmm", "baddbmm") and len(args) > 1 else
                                        (args[0] if args else None)):
            return fn(*args, **kwargs)
        start = timer.start()
        out = fn(*args, **kwargs)
        timer.stop("matmul", start, _matmul_flops(name, args))
        return out

    timed.__name__, timed.__qualname__, timed.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    timed.__wrapped__ = fn
    return timed


# Matmuls timed on GPUs, by module: nn.Linear runs functional.linear.
MATMULS = (("torch", ("matmul", "mm", "bmm", "addmm", "baddbmm")),
           ("torch.nn.functional", ("linear",)))


def _cuda_timer(torch):
    """Starts GPU timing, once, when a collective first runs on a GPU:
    the CUDA timer, and the matmuls wrapped. None if that fails."""
    if clock.cuda is not None:
        return clock.cuda
    try:
        timer = CudaTimer(torch.cuda)
    except Exception:
        return None
    clock.cuda = timer
    for mod_name, names in MATMULS:
        mod = sys.modules.get(mod_name)
        for name in names:
            fn = getattr(mod, name, None) if mod is not None else None
            if fn is not None and getattr(fn, "__wrapped__", None) is None:
                setattr(mod, name, _wrap_matmul(name, fn))
    return clock.cuda


clock = Clock()

_local = threading.local()  # depth: inside a timed DDP hook, collectives are its parts


def _nbytes(x):
    """Bytes of the tensors in x (a tensor or a list of them); 0 unknown."""
    try:
        if isinstance(x, (list, tuple)):
            return sum(_nbytes(t) for t in x)
        return x.numel() * x.element_size()
    except Exception:
        return 0


def _on_gpu(x):
    try:
        if isinstance(x, (list, tuple)):
            return bool(x) and _on_gpu(x[0])
        return x.is_cuda
    except Exception:
        return False


_groups = {}  # id(process group) -> its name


def _group_name(c10d, group):
    """A name every rank gives the same group: "world", or its ranks."""
    if group is None or group is getattr(c10d, "GroupMember").WORLD:
        return "world"
    key = id(group)
    name = _groups.get(key)
    if name is None:
        try:
            ranks = c10d._pg_group_ranks[group]
            name = "ranks " + ",".join(str(r) for r in sorted(ranks))
        except Exception:
            name = "group %d" % len(_groups)
        _groups[key] = name
    return name


def _group_arg(fn_name, args, kwargs):
    if "group" in kwargs:
        return kwargs["group"]
    # Positional group: all_reduce(t, op, group), broadcast(t, src, group), ...
    pos = {"all_reduce": 2, "broadcast": 2, "reduce": 3, "all_gather": 2, "all_gather_into_tensor": 2,
           "_all_gather_base": 2, "reduce_scatter": 3, "reduce_scatter_tensor": 3, "_reduce_scatter_base": 3,
           "barrier": 0, "gather": 3, "scatter": 3, "all_to_all": 2, "all_to_all_single": 4}.get(fn_name)
    if pos is not None and len(args) > pos:
        return args[pos]
    return None


def _wrap_collective(c10d, name, fn):
    def timed(*args, **kwargs):
        if getattr(_local, "depth", 0):
            return fn(*args, **kwargs)
        tensors = args[0] if args and name != "barrier" else None
        c = clock.begin(name, _nbytes(tensors) if tensors is not None else 0,
                        _group_name(c10d, _group_arg(name, args, kwargs)))
        # A synchronous collective on a GPU: its kernel, between events on the
        # current stream (which waits for the collective's stream).
        timer = _cuda_timer(sys.modules["torch"]) if not kwargs.get("async_op", False) and _on_gpu(tensors) else None
        start = timer.start() if timer is not None else None
        try:
            work = fn(*args, **kwargs)
        except BaseException:
            clock.end(c)
            raise
        if work is None or not kwargs.get("async_op", False):
            if timer is not None:
                timer.stop("collective", start)
            clock.end(c)
            return work
        try:
            work.get_future().then(_Done(c, _NONE))
        except Exception:  # a backend without futures: count the issue only
            clock.end(c)
        return work

    timed.__name__, timed.__qualname__, timed.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    timed.__wrapped__ = fn
    return timed


def _patch_c10d(c10d):
    dist = sys.modules.get("torch.distributed")
    for name in OPS:
        fn = getattr(c10d, name, None)
        if fn is None or getattr(fn, "__wrapped__", None) is not None:
            continue
        timed = _wrap_collective(c10d, name, fn)
        setattr(c10d, name, timed)
        if dist is not None and getattr(dist, name, None) is fn:
            setattr(dist, name, timed)


# What a _Done callback returns: nothing, its future's value, or the first
# tensor of it (an all_reduce's list of one, which a DDP hook returns).
_NONE, _ALL, _FIRST = 0, 1, 2

# The callbacks that ran, which torch's communication thread that ran them
# has yet to let go of: it takes the GIL to do so, and a thread that takes
# the GIL while the interpreter finalizes is ended mid-unwind, which aborts
# the process (exit 134) after the script ended well. _drain_callbacks
# waits for them at exit.
_releasing = weakref.WeakSet()


class _Done:
    """The completion callback of a timed collective's future: ends it on
    the clock. An object (not a closure) so that nothing refers back to it
    and it is freed as soon as torch lets go of it."""

    __slots__ = ("c", "returns", "__weakref__")

    def __init__(self, c, returns):
        self.c, self.returns = c, returns

    def __call__(self, f):
        clock.end(self.c)
        _releasing.add(self)
        if self.returns == _ALL:
            return f.value()
        if self.returns == _FIRST:
            return f.value()[0]
        return None


def _drain_callbacks(limit=1.0):
    """At exit, before the interpreter finalizes: waits, with the GIL
    free, until torch's threads have let go of every callback that ran
    (microseconds once they get the GIL), at most limit seconds.
    Callbacks of collectives that never completed are not waited for."""
    deadline = time.monotonic() + limit
    while len(_releasing) and time.monotonic() < deadline:
        time.sleep(0.001)


def _patch_ddp(ddp_mod):
    """Times DDP's gradient buckets (_ddptiming.py)."""
    import torch.distributed.distributed_c10d as c10d

    from . import _ddptiming

    _ddptiming.patch(ddp_mod, c10d, _mode, _hook_seconds)


class _Finder:
    """A meta-path finder that patches torch's modules as they load."""

    _patches = {_C10D: _patch_c10d, _DDP: _patch_ddp}

    def find_spec(self, name, path=None, target=None):
        patch = self._patches.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        class Loader:
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                exec_module(module)
                try:
                    patch(module)
                except Exception:
                    pass

        spec.loader = Loader()
        return spec


# How stock DDP's buckets are timed (_ddptiming.py): "adaptive" or "always".
_mode = "adaptive"

# The cost of Rover's hook per DDP bucket per step that the adaptive rule
# assumes, from ROVER_COLLECTIVE_TIMING_HOOK_US; None: _ddptiming's default.
_hook_seconds = None

# ROVER_COLLECTIVE_TIMING's values: what each means.
MODES = {"0": None, "1": "adaptive", "": "adaptive", "always": "always"}


def install():
    """Times torch's collectives once torch.distributed loads (at once if
    it has), as ROVER_COLLECTIVE_TIMING says: 0 off (a no-op), 1 or unset
    the default (stock DDP's buckets timed where that costs under 1% of a
    step), always (stock DDP's buckets timed whatever it costs).
    ROVER_COLLECTIVE_TIMING_HOOK_US replaces the hook's cost per bucket per
    step that the default assumes (_ddptiming.HOOK_SECONDS_PER_BUCKET), for
    a host where it was measured. rover run refuses other values; here they
    count as the default, with a warning."""
    global _mode, _hook_seconds
    value = os.environ.get("ROVER_COLLECTIVE_TIMING", "")
    if value not in MODES:
        sys.stderr.write("rover: ROVER_COLLECTIVE_TIMING=%r: want 0 (off), 1 (the default: stock DDP's buckets timed "
                         "where that costs under 1%% of a step) or always; using 1\n" % value)
        value = "1"
    if MODES[value] is None:
        return
    _mode = MODES[value]
    us = os.environ.get("ROVER_COLLECTIVE_TIMING_HOOK_US", "")
    if us:
        try:
            seconds = float(us) * 1e-6
            if not 0 <= seconds <= 1e3:
                raise ValueError(us)
            _hook_seconds = seconds
        except ValueError:
            sys.stderr.write("rover: ROVER_COLLECTIVE_TIMING_HOOK_US=%r: want microseconds, 0 to 1e9; using the default\n" % us)
    atexit.register(_drain_callbacks)
    if _C10D in sys.modules:
        _patch_c10d(sys.modules[_C10D])
        if _DDP in sys.modules:
            _patch_ddp(sys.modules[_DDP])
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
