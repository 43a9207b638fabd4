"""Collective timing of DistributedDataParallel's gradient buckets, for
``_colltime.py`` (which patches torch and calls ``patch`` here when
``torch.nn.parallel.distributed`` loads).

A communication hook the script registers is wrapped: its bucket's
reduction, from the hook's call to its future's completion, is one
collective ("all_reduce (DDP bucket)"). That costs nothing measurable.

Stock DDP (no hook) reduces its buckets in C++. Timing them needs a
Python hook of Rover's in its place, which does what DDP's built-in one
does (each gradient scaled by 1/world size, then summed) so that results
do not change, but whose mere presence costs about HOOK_SECONDS_PER_BUCKET
per bucket per step (DDP hands each bucket to Python and its completion
takes the GIL): 13% of a 1.2 ms step, 0.3% of a 50 ms one. So the hook is
registered only where it costs under BUDGET of a step. Each DDP forward
call reads the monotonic and the process's CPU clock; the step is the
lesser of the wall-clock and the CPU seconds between two forward calls
(the hook's cost is CPU time: a process short of CPU, on an oversubscribed
or throttled host, pays it stretched as much as its steps, so a step long
only in wall-clock time does not make it cheap). Once most of the last
WINDOW steps (so their median) are at least the hook's cost per step over
BUDGET, the hook is registered (at a forward call, between two backward
passes; from then on, for good). A job whose steps are short never pays
for it; one whose steps grow long (a larger model, a slower processor) is
timed from then on.

``ROVER_COLLECTIVE_TIMING=always`` registers the hook at the first forward
call whatever it costs; ``ROVER_COLLECTIVE_TIMING_HOOK_US`` replaces the
cost per bucket the rule assumes (microseconds), for a host where it was
measured. While the buckets are untimed, each forward call
still records where the rank stands: the number of forward calls of its
DDP model (the DDP step it is in), which the progress reports carry, so a
hang's location can name the ranks that never began the step the others
are in. docs/design/collective-timing.md has the design.
"""

import sys
import time

from . import _colltime

__all__ = ["HOOK_SECONDS_PER_BUCKET", "BUDGET", "WINDOW", "StepMeter", "patch"]

# What Rover's Python all-reduce hook costs stock DDP per gradient bucket
# per step, measured on the DDP example (docs/benchmarks.md, "Collective
# timing's cost": +150 us per step with one bucket, on a loaded 2-core
# machine; a faster host pays less, so the rule errs towards not timing).
HOOK_SECONDS_PER_BUCKET = 150e-6

# The most of a step the hook may cost.
BUDGET = 0.01

# The step intervals the rule looks at: the newest WINDOW.
WINDOW = 16

_DDP_OP = "all_reduce (DDP bucket)"

# The clocks the forward calls read (tests replace them).
_now, _cpu = time.monotonic, time.process_time


class StepMeter:
    """Decides when stock DDP's buckets get timed: see the module's comment.

    forward(now, cpu) is called at each DDP forward call, with the
    monotonic time and the process's CPU time; it returns True, once, when
    the timed hook should be registered: when more than half of the last
    WINDOW steps (the lesser of the wall-clock and CPU seconds between two
    forward calls) are at least the threshold, the hook's cost per step
    (per_bucket times the buckets DDP has) over budget. buckets is called
    for the number of buckets only then (it may change: DDP rebuilds them
    after its first step), and the steps are counted again against its
    answer. O(1) per call otherwise: one step in a ring and a count of the
    long ones.
    """

    __slots__ = ("per_bucket", "budget", "buckets", "threshold", "_ring", "_i", "_long", "_wall", "_cpu")

    def __init__(self, buckets, per_bucket=None, budget=None):
        self.per_bucket = HOOK_SECONDS_PER_BUCKET if per_bucket is None else per_bucket
        self.budget = BUDGET if budget is None else budget
        self.buckets = buckets
        self.threshold = self._threshold()
        self._ring = [-1.0] * WINDOW  # -1: no step yet, never long
        self._i = 0
        self._long = 0  # steps in the ring at least the threshold
        self._wall = self._cpu = None  # at the previous call

    def _threshold(self):
        try:
            n = max(int(self.buckets()), 1)
        except Exception:
            n = 1
        return self.per_bucket * n / self.budget

    def forward(self, now, cpu):
        wall, self._wall, last_cpu, self._cpu = self._wall, now, self._cpu, cpu
        if wall is None:
            return False
        dt, i, t = min(now - wall, cpu - last_cpu), self._i, self.threshold
        old = self._ring[i]
        self._ring[i] = dt
        self._i = i + 1 if i + 1 < WINDOW else 0
        self._long += (dt >= t) - (old >= t)
        if 2 * self._long <= WINDOW:
            return False
        t = self._threshold()  # the buckets DDP has now
        if t != self.threshold:
            self.threshold = t
            self._long = sum(1 for x in self._ring if x >= t)
            if 2 * self._long <= WINDOW:
                return False
        return True

    def median(self):
        """The median of the steps in the ring (None before any)."""
        xs = sorted(x for x in self._ring if x >= 0)
        return xs[len(xs) // 2] if xs else None


def bucket_count(ddp):
    """The gradient buckets of DDP model ddp: as its reducer reports them
    (after the rebuild that follows the first step, when it happened), else
    estimated from the parameters' bytes and DDP's bucket caps."""
    try:
        data = ddp._get_ddp_logging_data()
        sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes")
        n = len(str(sizes).replace(",", " ").split()) if sizes else 0
        if n > 0:
            return n
    except Exception:
        pass
    return estimate_buckets(ddp)


def estimate_buckets(ddp):
    """DDP's buckets from the bytes of the parameters that take gradients:
    a first bucket of up to 1 MiB, then buckets of up to bucket_bytes_cap
    (25 MiB by default)."""
    try:
        nbytes = sum(p.numel() * p.element_size() for p in ddp.module.parameters() if p.requires_grad)
        dist = sys.modules.get("torch.distributed")
        first = int(getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", 1 << 20))
        cap = int(getattr(ddp, "bucket_bytes_cap", 25 << 20)) or (25 << 20)
    except Exception:
        return 1
    if nbytes <= first:
        return 1
    return 1 + -(-(nbytes - first) // cap)


class _State:
    """Collective timing's state of one DDP model, in its __dict__."""

    __slots__ = ("group", "forwards", "timed", "decided", "meter", "registered_at")

    def __init__(self, group):
        self.group = group
        self.forwards = 0  # forward calls: the DDP step this rank is in
        self.timed = False  # the buckets are timed
        self.decided = False  # how the buckets are reduced is settled (but for meter)
        self.meter = None  # a StepMeter while the rule decides
        self.registered_at = 0  # the forward call at which Rover's hook was registered

    def __reduce__(self):
        # A pickled DDP (torch.save of the module) carries no meter (which
        # refers back to the model) and decides afresh where it is loaded.
        return (_State, (self.group,))


def _state(ddp, c10d):
    st = ddp.__dict__.get("_rover_ddp")
    if st is None:
        try:
            name = _colltime._group_name(c10d, getattr(ddp, "process_group", None))
        except Exception:
            name = "world"
        st = ddp.__dict__["_rover_ddp"] = _State(name)
    return st


def _timed_hook(c10d, hook):
    """Wraps a DDP communication hook: the bucket's reduction, from the
    hook's call to its future's completion, is one collective."""
    clock, local = _colltime.clock, _colltime._local

    def rover_timed_hook(state, bucket):
        group = state if state is not None and hasattr(state, "size") else None
        buf = bucket.buffer()
        c = clock.begin(_DDP_OP, _colltime._nbytes(buf), _colltime._group_name(c10d, group))
        if clock.cuda is None and _colltime._on_gpu(buf):
            _colltime._cuda_timer(sys.modules["torch"])  # the model's matmuls are timed from now on
        local.depth = getattr(local, "depth", 0) + 1
        try:
            fut = hook(state, bucket)
        except BaseException:
            clock.end(c)
            raise
        finally:
            local.depth -= 1

        return fut.then(_colltime._Done(c, _colltime._ALL))

    rover_timed_hook.__wrapped__ = hook
    return rover_timed_hook


def _timed_default_hook(c10d):
    """DDP's built-in reduction as one timed hook: the bucket scaled by
    1/world size (as DDP scales it), summed by the process group's own
    all_reduce (not the timed wrapper of c10d's), and timed from the call to
    the sum's completion with a single callback, which is what the hook's
    cost on every step comes to."""
    all_reduce = getattr(c10d.all_reduce, "__wrapped__", c10d.all_reduce)
    clock = _colltime.clock
    world_of = {}  # id(group) -> (world size, group name)

    def rover_timed_allreduce_hook(group, bucket):
        key = id(group)
        known = world_of.get(key)
        if known is None:
            known = world_of[key] = (c10d.get_world_size(group), _colltime._group_name(c10d, group))
        world, name = known
        buf = bucket.buffer()
        c = clock.begin(_DDP_OP, buf.numel() * buf.element_size(), name)
        if clock.cuda is None and buf.is_cuda:
            _colltime._cuda_timer(sys.modules["torch"])  # the model's matmuls are timed from now on
        try:
            buf.mul_(1.0 / world)
            fut = all_reduce(buf, group=group, async_op=True).get_future()
        except BaseException:
            clock.end(c)
            raise

        return fut.then(_colltime._Done(c, _colltime._FIRST))

    return rover_timed_allreduce_hook


def patch(ddp_mod, c10d, mode, per_bucket=None):
    """Patches DistributedDataParallel of module ddp_mod: a script's hooks
    are timed, and stock DDP gets Rover's timed hook as mode says:
    "always" at the first forward call, "adaptive" when StepMeter says,
    with per_bucket as the hook's cost (None: HOOK_SECONDS_PER_BUCKET)."""
    DDP = ddp_mod.DistributedDataParallel
    if getattr(DDP, "_rover_timed", False):
        return
    register, builtin, ddp_forward = DDP.register_comm_hook, DDP._register_builtin_comm_hook, DDP.forward
    clock = _colltime.clock

    def register_comm_hook(self, state, hook):
        st = _state(self, c10d)
        out = register(self, state, _timed_hook(c10d, hook))
        st.decided, st.meter, st.timed = True, None, True
        return out

    def _register_builtin_comm_hook(self, comm_hook_type):
        st = _state(self, c10d)
        out = builtin(self, comm_hook_type)
        st.decided, st.meter, st.timed = True, None, False  # a C++ hook: not timed
        return out

    def register_timed_default(self, st):
        """Registers Rover's hook in stock DDP's place; on failure (another
        torch, a hook registered meanwhile) DDP goes on untimed."""
        st.meter = None
        try:
            register(self, self.process_group, _timed_default_hook(c10d))
        except Exception:
            return
        st.timed, st.registered_at = True, st.forwards

    def decide(self, st):
        """At the first forward call of a DDP without a hook."""
        st.decided = True
        try:
            if c10d.get_backend(self.process_group) not in ("gloo", "nccl"):
                return  # Rover's hook reduces with these only
        except Exception:
            return
        if mode == "always":
            register_timed_default(self, st)
        else:
            st.meter = StepMeter(lambda: bucket_count(self), per_bucket)
            st.meter.forward(_now(), _cpu())

    def forward(self, *args, **kwargs):
        st = self.__dict__.get("_rover_ddp") or _state(self, c10d)
        st.forwards += 1
        if st.meter is not None:
            if st.meter.forward(_now(), _cpu()):
                register_timed_default(self, st)
        elif not st.decided:
            decide(self, st)
        clock.ddp_step(st.group, st.forwards, st.timed)
        return ddp_forward(self, *args, **kwargs)

    for f, orig in ((register_comm_hook, register), (_register_builtin_comm_hook, builtin), (forward, ddp_forward)):
        f.__doc__, f.__wrapped__ = orig.__doc__, orig
    DDP.register_comm_hook, DDP._register_builtin_comm_hook, DDP.forward = (
        register_comm_hook, _register_builtin_comm_hook, forward)
    DDP._rover_timed = True
