"""Runtime progress reports: what Rover's straggler and hang detection see.

A worker started by ``rover run`` reports its steps to its node agent, which
sends them to the job master on its heartbeats. Nothing is needed in the
script when it uses ``rover.data.ElasticSampler`` (each batch is a step) or
``rover.checkpoint.Checkpointer`` (each save is a step); any other script
adds one line to its training loop::

    import rover.progress
    for step in range(start, steps):
        ...
        rover.progress.step(step, samples=len(batch))

``samples`` (optional) is how many training samples this worker trained in
that step; the master sums its ranks' into the job's throughput in samples
per second, which the auto-scaler compares across world sizes. A script
that iterates ``rover.data.ElasticSampler`` reports its batches' samples
without a call (also when the steps come from ``step()`` without
``samples`` or from checkpoint saves).

Outside ``rover run`` every call is a no-op (but a bad ``samples`` still
raises). Reports are cheap: the step and
its wall-clock and CPU time are recorded in process, and sent to the agent
at most about once a second, never once per step, with the wall-clock time
the newest step completed (the master's goodput accounting times steps by
it). A step not sent at once is flushed by a timer within a second, even
when no further call comes: a worker that made progress and then blocks
is seen to have made it, so its hang is detected. The sources rank
``step()`` > checkpoint saves > sampler batches: once a process used a
higher one, the lower ones are ignored, so a step is never counted twice.
Each step is also written into the worker's step slot, a small file of the
agent's runtime directory mapped into memory (a memory write, no system
call): the agent reads it once the worker exited, so the master learns the
last steps of a worker killed before it could report them (see
internal/agent/stepslot.go for the layout). Standard library only. docs/design/hang-and-stragglers.md has the design.
"""

import mmap
import os
import struct
import threading
import time

from . import _agent, _colltime

__all__ = ["step"]

# Seconds between two reports of one worker to its agent.
_INTERVAL = 1.0

# Sources of progress, by rank (a higher one silences lower ones).
SAMPLER, CHECKPOINT, EXPLICIT = 1, 2, 3

_lock = threading.Lock()
_reporter = None
_forked = False  # this process is a fork of a worker (a data loader's)


class _Reporter:
    def __init__(self):
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.rank = int(os.environ.get("RANK", "-1"))
        self.source = 0
        self.step = None
        self.at = None  # monotonic, CPU and collective times, and collectives, at the newest step
        self.at_ns = 0  # its wall-clock time (Unix nanoseconds)
        self.steps, self.wall, self.cpu = 0, 0.0, 0.0
        self.comm, self.collectives = 0.0, 0  # in the steps completed since the last report
        # Samples of the steps recorded since the last report: given to
        # step() (explicit), and the sampler's batches (used when no step()
        # call gave any, so that nothing is counted twice).
        self.samples, self.sampler_samples = 0, 0
        self.explicit_samples = False  # step() gave samples: the sampler's are not used
        self.samples_step = None  # the newest step whose samples were counted
        self.sent_at = None
        self.failures = 0
        self.pending = False  # a recorded step is not sent yet
        self.flushing = False  # a flush is scheduled
        self.slot = _open_slot(self.local_rank)
        self.slot_seq = 0

    def record(self, step, source, samples=None):
        if source == SAMPLER:
            if samples:
                self.sampler_samples += samples
        elif samples and step != self.samples_step and source >= self.source:
            self.samples += samples  # a repeated call for the same step counts once
            self.samples_step, self.explicit_samples = step, True
        if source < self.source:
            return
        if source > self.source:  # a better source: start its timing afresh
            self.source, self.step, self.at = source, None, None
            self.steps, self.wall, self.cpu = 0, 0.0, 0.0
            self.comm, self.collectives = 0.0, 0
        if step == self.step:
            return
        now, cpu = time.monotonic(), time.process_time()
        comm, count = _colltime.clock.seconds(), _colltime.clock.count
        if self.at is not None:  # the previous step is complete
            self.steps += 1
            self.wall += now - self.at[0]
            self.cpu += cpu - self.at[1]
            self.comm += comm - self.at[2]
            self.collectives += count - self.at[3]
        self.step, self.at = step, (now, cpu, comm, count)
        self.at_ns = time.time_ns()  # when it completed, in the agent's clock
        if self.slot is not None:
            self.write_slot()
        if self.sent_at is None or now - self.sent_at >= _INTERVAL:
            self.send(now)
        else:
            self.pending = True
            if not self.flushing:
                self.flushing = True
                _schedule(self.sent_at + _INTERVAL - now, _flush)

    def write_slot(self):
        """Writes the step into the record after the one written last: a
        kill in the middle leaves the other one whole (the step before)."""
        self.slot_seq += 1
        seq, off = self.slot_seq, (self.slot_seq % 2) * _SLOT_RECORD
        try:
            _SLOT_WORD.pack_into(self.slot, off, seq)
            _SLOT_WORD.pack_into(self.slot, off + 8, max(int(self.step), 0))
            _SLOT_WORD.pack_into(self.slot, off + 16, self.at_ns)
            _SLOT_WORD.pack_into(self.slot, off + 24, seq)
        except (ValueError, struct.error):  # a step beyond 64 bits, or the map closed
            pass

    def send(self, now):
        if self.failures >= 3:
            return  # the agent does not take reports (an older agent): stop asking
        req = {"progress": {"localRank": self.local_rank, "rank": self.rank, "step": str(self.step),
                            "steps": str(self.steps), "wallSeconds": self.wall, "cpuSeconds": self.cpu,
                            "stepUnixNanos": str(self.at_ns)}}
        samples = self.samples if self.explicit_samples else self.sampler_samples
        if samples:
            req["progress"]["samples"] = str(samples)
        ddp = _colltime.clock.ddp
        if self.collectives and (ddp is None or ddp[2]):  # collective timing (_colltime.py)
            # Not where DDP's gradient buckets are untimed: their waits
            # would count as compute, and the split would be false.
            req["progress"]["commSeconds"] = self.comm
            req["progress"]["collectives"] = str(self.collectives)
        if _colltime.clock.cuda is not None:  # GPU kernels timed with CUDA events
            coll, mm, flops = _colltime.clock.cuda.take()
            req["progress"]["gpuCollectiveSeconds"] = coll
            req["progress"]["matmulSeconds"] = mm
            req["progress"]["matmulFlops"] = str(flops)
        newest = _colltime.clock.take_newest()
        if newest is not None:
            req["progress"]["collective"] = newest
        ddp = _colltime.clock.take_ddp()
        if ddp is not None:  # the DDP step this rank is in
            req["progress"]["ddpStep"] = ddp
        try:
            _agent.call("ReportProgress", req, timeout=5.0)
            self.failures = 0
        except _agent.AgentError:
            self.failures += 1
        self.sent_at = now
        self.pending = False
        self.steps, self.wall, self.cpu = 0, 0.0, 0.0
        self.comm, self.collectives = 0.0, 0
        self.samples, self.sampler_samples = 0, 0


# The step slot (internal/agent/stepslot.go): two records of four
# little-endian 64-bit words (sequence, step, wall time, sequence).
_SLOT_RECORD, _SLOT_SIZE = 32, 64
_SLOT_WORD = struct.Struct("<Q")


def _open_slot(local_rank):
    """Maps this worker's step slot, which its agent created in its runtime
    directory (the directory of ROVER_AGENT_SOCKET); None without one (an
    older agent, or no agent)."""
    sock = os.environ.get("ROVER_AGENT_SOCKET", "")
    if not sock or _forked:
        return None
    path = os.path.join(os.path.dirname(sock), "steps", str(local_rank))
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if os.fstat(fd).st_size != _SLOT_SIZE:
            return None
        return mmap.mmap(fd, _SLOT_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def _schedule(delay, fn):
    """Calls fn in delay seconds on a daemon thread (tests replace it)."""
    t = threading.Timer(max(delay, 0.0), fn)
    t.daemon = True
    t.start()


def _flush():
    """The reporter's timer, once a second from the first unsent step on:
    sends the newest step if it is not sent yet, or the newest collective
    or DDP step if it changed (where a hang sits: the step does not move
    then)."""
    with _lock:
        r = _reporter
        if r is None:
            return
        if r.pending or _colltime.clock.changed or _colltime.clock.ddp_changed:
            r.send(time.monotonic())
        _schedule(_INTERVAL, _flush)


def _after_fork():
    """A forked child (a data loader worker) starts without the parent's
    reporter: its timer thread did not survive the fork. Nor does it write
    the step slot: that is the worker's."""
    global _lock, _reporter, _forked
    _lock, _reporter, _forked = threading.Lock(), None, True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _record(step_, source, samples=None):
    global _reporter
    if not _agent.under_rover():
        return
    with _lock:
        if _reporter is None:
            _reporter = _Reporter()
        _reporter.record(int(step_), source, samples)


def _next(source, samples=None):
    """Records the step after the newest one (sampler batches count steps),
    with the samples of its batch."""
    if not _agent.under_rover():
        return
    with _lock:
        last = _reporter.step if _reporter is not None and _reporter.source == source else None
    _record(0 if last is None else last + 1, source, samples)


# The most samples one step may report (2**40, as the master's throughput
# record accepts): more is a bug in the script, not a batch.
MAX_SAMPLES = 1 << 40


def _check_samples(samples):
    """samples as an int, or a TypeError/ValueError saying what is wrong."""
    if samples is None:
        return None
    if type(samples) is not int:  # the common case costs one type check
        if isinstance(samples, bool) or not hasattr(samples, "__index__"):
            raise TypeError(f"rover.progress.step: samples must be an int (the samples this worker trained in the step), "
                            f"not {type(samples).__name__} {samples!r}")
        samples = samples.__index__()  # numpy and torch integers
    if samples < 0 or samples > MAX_SAMPLES:
        raise ValueError(f"rover.progress.step: samples is {samples}; it must be 0..{MAX_SAMPLES} "
                         f"(the samples this worker trained in the step; 0 or None: unknown)")
    return samples


def step(step, samples=None):
    """Reports that this worker reached ``step`` (an int), having trained
    ``samples`` training samples in it (an int >= 0, optional: None or 0
    is unknown); a no-op outside ``rover run``. Call it once per training
    step; repeated calls with the same step count once (their samples too).
    A ``samples`` that is not an integer raises TypeError, a negative one
    or one above 2**40 ValueError, also outside ``rover run``."""
    samples = _check_samples(samples)
    _record(step, EXPLICIT, samples)
