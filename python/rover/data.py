"""Elastic data for training scripts started by ``rover run``.

Two modes (docs/data-sharding.md):

* ``ElasticSampler`` — synchronous training (DDP, FSDP). One global order per
  epoch (a seeded permutation when shuffling); each step, rank r trains the
  r-th slice of the next ``world_size * batch_size`` samples, or, with
  ``global_batch_size``, its share of the next ``global_batch_size``. The job's
  position moves on; a checkpoint records it, and a restore continues with
  exactly the samples not trained yet, whatever the world size is then.
* ``ShardClient`` — leased shards for independent workers: lease, train,
  complete; a dead worker's shards go back to the queue. It also works in
  the roles of a parameter-server job, which the master starts without an
  agent: there it calls the master itself (_master.py).

Standard library only; works with ``torch.utils.data.DataLoader`` without
importing torch.
"""

import os
import threading
import time

from . import _agent, _master, progress
from ._order import DROP_TAIL, ORDER_VERSION, PAD_TAIL, epoch_order, rank_batch, rank_share

__all__ = ["ElasticSampler", "ElasticBatchSampler", "ShardClient", "Shard", "DROP_TAIL", "PAD_TAIL"]


def _register(spec):
    return _shard_call("RegisterDataset", {"dataset": spec})["dataset"]


def _shard_call(method, request, timeout=60.0):
    """Calls a shard method of the local agent, or, in a process the master
    started without one (a parameter-server job's role), of the master
    itself, naming the worker by its node (see _master.py)."""
    if _master.available():
        if "worker" in request:
            request = dict(request, worker=_master.worker_id(request["worker"]))
        return _master.call(method, request, timeout=timeout)
    return _agent.call(method, request, timeout=timeout)


class ElasticSampler:
    """A sampler for ``DataLoader(dataset, batch_size=sampler.batch_size,
    sampler=sampler)`` in synchronous training.

    Iterating yields this rank's sample indices, step after step, from the
    current position to the end of the epoch. ``state_dict(batches)`` is the
    position after ``batches`` batches of the current iteration were
    trained: save it with the model; ``load_state_dict`` restores it.

    The batch across world sizes (docs/design/batch-size.md): with
    ``global_batch_size=G`` every step trains G samples whatever the world
    size; rank r trains its share of them (G split as evenly as possible,
    the remainder to the lowest ranks): ``batch_size`` (also
    ``local_batch_size``) is this rank's share in the current world, and
    ``ElasticBatchSampler(sampler)`` yields each step's batch for
    ``DataLoader(dataset, batch_sampler=...)``. With ``batch_size=B`` (the
    per-worker batch, kept fixed) the global batch is ``world_size * B``.
    The learning rate is the script's; ``loss_scale`` weighs per-sample
    losses so that DDP's averaged gradient is the mean over the global
    batch.
    """

    def __init__(self, name, size, batch_size=None, shuffle=False, seed=0, epochs=0, tail=DROP_TAIL,
                 rank=None, world_size=None, global_batch_size=None):
        if tail not in (DROP_TAIL, PAD_TAIL):
            raise ValueError(f"tail must be {DROP_TAIL!r} or {PAD_TAIL!r}, not {tail!r}")
        self.name, self.size = name, int(size)
        self.shuffle, self.seed, self.epochs, self.tail = bool(shuffle), int(seed), int(epochs), tail
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else int(rank)
        self.world_size = int(os.environ.get("WORLD_SIZE", "1")) if world_size is None else int(world_size)
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"ElasticSampler {name!r}: rank {self.rank} of world size {self.world_size}: "
                             f"want a world size >= 1 and a rank 0..world size-1")
        if (batch_size is None) == (global_batch_size is None):
            raise TypeError(f"ElasticSampler {name!r}: give batch_size (the per-worker batch, fixed) or "
                            f"global_batch_size (the global batch, fixed across world sizes), exactly one "
                            f"(got batch_size={batch_size!r}, global_batch_size={global_batch_size!r})")
        self.fixed_global = global_batch_size is not None
        if self.fixed_global:
            g = _positive_int(name, "global_batch_size", global_batch_size)
            if g < self.world_size:
                raise ValueError(f"ElasticSampler {name!r}: global_batch_size {g} is smaller than the world size "
                                 f"{self.world_size}, so some ranks would get no sample in a step; use a global "
                                 f"batch of at least {self.world_size} or run fewer workers")
            self.global_batch_size = g
            _, self.batch_size = rank_share(g, self.world_size, self.rank)
        else:
            self.batch_size = _positive_int(name, "batch_size", batch_size)
            self.global_batch_size = self.world_size * self.batch_size
        self._orders = {}
        self._steps = [self._master_position()]  # positions before each yielded step
        self._finished = False

    @property
    def local_batch_size(self):
        """This rank's batch in the current world (the same as batch_size)."""
        return self.batch_size

    @property
    def loss_scale(self):
        """world_size / global_batch_size: the sum of this rank's
        per-sample losses times it, averaged over the ranks by DDP, is the
        mean loss over the global batch, also when the ranks' shares
        differ by one (a plain mean per rank would weigh the samples of
        the smaller shares more)."""
        return self.world_size / self.global_batch_size

    # The master is the source of truth for the position when rover runs the job.
    def _master_position(self):
        if not _agent.under_rover():
            return (0, 0)
        # The registered batch is what stays fixed across world sizes (every
        # rank and every round registers the same spec): the per-worker
        # batch, or the global one.
        batch = self.global_batch_size if self.fixed_global else self.batch_size
        _register({"name": self.name, "size": str(self.size), "batchSize": batch,
                   "epochs": self.epochs, "shuffle": self.shuffle, "seed": str(self.seed),
                   "mode": "SHARD_MODE_SYNC"})
        p = _agent.call("GetPosition", {"dataset": self.name}).get("position", {})
        return (int(p.get("epoch", 0)), int(p.get("consumed", 0)))

    def _order(self, epoch):
        if not self.shuffle:
            return range(self.size)
        if epoch not in self._orders:
            self._orders = {epoch: epoch_order(self.size, epoch, True, self.seed)}
        return self._orders[epoch]

    @property
    def position(self):
        """(epoch, consumed) where the next iteration starts: after an
        iteration that ran to the end of its epoch, the next epoch's start."""
        return self._steps[-1] if self._finished else self._steps[0]

    def set_epoch(self, epoch):
        """Accepted for DistributedSampler compatibility: the position decides
        the epoch; a later epoch than the position's skips ahead to it."""
        e, _ = self.position
        if epoch > e:
            self._steps, self._finished = [(epoch, 0)], False

    def _normalize(self, pos):
        e, c = pos
        if c == self.size or (self.tail == DROP_TAIL and self.size - c < self.global_batch_size):
            return (e + 1, 0)
        return pos

    def batches(self):
        """Yields this rank's batch (a list of indices) of each step for the
        rest of one epoch; iterating the sampler yields their indices."""
        pos = self._normalize(self.position)
        self._steps, self._finished = [pos], False
        epoch = pos[0]
        g = self.global_batch_size if self.fixed_global else None
        while True:
            indices, nxt = rank_batch(self.size, self.batch_size, self.epochs, self._order, pos,
                                      self.world_size, self.rank, self.tail, g)
            if indices is None:
                self._finished = True
                return
            self._steps.append(nxt)
            progress._next(progress.SAMPLER, len(indices))
            yield indices
            if nxt[0] != epoch:
                self._finished = True
                return
            pos = nxt

    def __iter__(self):
        """Yields this rank's indices for the rest of one epoch."""
        for indices in self.batches():
            yield from indices

    def steps(self):
        """The steps left in the epoch from the current position."""
        return len(self) // self.batch_size

    def __len__(self):
        e, c = self._normalize(self.position)
        g = self.global_batch_size
        left = self.size - c
        steps = left // g if self.tail == DROP_TAIL else -(-left // g)
        return max(steps, 0) * self.batch_size

    def state_dict(self, batches):
        """The position after `batches` batches of the current iteration; it
        is also recorded on the master."""
        if batches < 0 or batches >= len(self._steps):
            raise ValueError(f"{batches} batches were not yielded in this iteration ({len(self._steps) - 1} were)")
        e, c = self._steps[batches]
        if _agent.under_rover():
            _agent.call("AdvancePosition", {"dataset": self.name, "position": {"epoch": e, "consumed": str(c)}})
        return {"name": self.name, "epoch": e, "consumed": c, "order": ORDER_VERSION}

    def load_state_dict(self, state):
        """Continues from a saved position (rewinding the master's). A
        position part-way through a shuffled epoch saved by an earlier Rover
        (no "order" in it), whose shuffled orders differ, is refused with a
        ValueError: it would train some samples twice and others not at
        all."""
        e, c = int(state["epoch"]), int(state["consumed"])
        if self.shuffle and int(state.get("order", 1)) < ORDER_VERSION and 0 < c < self.size:
            raise ValueError(
                f"the data state of {self.name!r} is part-way through shuffled epoch {e} ({c} of {self.size} "
                f"positions trained) and was saved by an earlier Rover, whose shuffled orders differ from this "
                f"one's: resuming would train some samples twice and others not at all. Finish the epoch with the "
                f"Rover that saved it, or load {{'epoch': {e + 1}, 'consumed': 0}} to go on with the next epoch "
                f"(or {{'epoch': {e}, 'consumed': 0}} to train this one again)")
        if _agent.under_rover():
            _agent.call("AdvancePosition", {"dataset": self.name, "restore": True,
                                            "position": {"epoch": e, "consumed": str(c)}})
        self._steps, self._finished = [(e, c)], False


class ElasticBatchSampler:
    """The batches of an ElasticSampler, one list of indices per step, for
    ``DataLoader(dataset, batch_sampler=ElasticBatchSampler(sampler))``:
    the loader's batch is then this rank's share of the step's global
    batch, whatever it is in the current world (with
    ``global_batch_size``, the ranks' shares differ by at most one).
    ``state_dict``, ``load_state_dict``, ``set_epoch`` and ``position`` are
    the sampler's."""

    def __init__(self, sampler):
        if not isinstance(sampler, ElasticSampler):
            raise TypeError(f"ElasticBatchSampler wraps an ElasticSampler, not {type(sampler).__name__}")
        self.sampler = sampler

    def __iter__(self):
        return self.sampler.batches()

    def __len__(self):
        return self.sampler.steps()

    @property
    def position(self):
        return self.sampler.position

    def set_epoch(self, epoch):
        self.sampler.set_epoch(epoch)

    def state_dict(self, batches):
        return self.sampler.state_dict(batches)

    def load_state_dict(self, state):
        self.sampler.load_state_dict(state)


def _positive_int(name, what, v):
    try:
        n = int(v)
    except (TypeError, ValueError):
        n = None
    if isinstance(v, bool) or n is None or n != v and not isinstance(v, str):
        raise TypeError(f"ElasticSampler {name!r}: {what} must be an int, not {type(v).__name__} {v!r}")
    v = n
    if not 1 <= v <= _MAX_BATCH:
        raise ValueError(f"ElasticSampler {name!r}: {what} is {v}; it must be 1..{_MAX_BATCH}")
    return v


_MAX_BATCH = (1 << 31) - 1  # the master's largest batch (an int32 on the wire)


class Shard:
    """A leased shard: samples ``indices()`` of epoch ``epoch``."""

    __slots__ = ("lease_id", "epoch", "start", "end", "_indices")

    def __init__(self, msg):
        self.lease_id = msg["leaseId"]
        self.epoch = int(msg.get("epoch", 0))
        self.start, self.end = int(msg.get("start", 0)), int(msg.get("end", 0))
        self._indices = [int(i) for i in msg.get("indices", [])] or None

    def indices(self):
        return list(self._indices) if self._indices is not None else list(range(self.start, self.end))

    def __len__(self):
        return self.end - self.start

    def __repr__(self):
        return f"Shard(epoch={self.epoch}, start={self.start}, end={self.end}, lease={self.lease_id})"


class ShardClient:
    """Leases shards of a dataset for this worker.

        client = ShardClient("train", size=100_000, shard_size=512)
        for shard in client:
            for i in shard.indices():
                ...
            client.complete(shard)

    Iteration ends when the dataset is finished. ``prefetch`` shards are kept
    leased ahead so the data path rarely waits on the network.

    Requests carry the worker's incarnation (ROVER_WORKER_INCARNATION, the
    round ``rover run`` started the process in): once a later round has
    begun, the master refuses them with an ``AgentError`` of code
    ``failed_precondition``, and the process must stop. Lease requests are
    numbered, so that one sent again is answered with the shards it already
    got, not new ones; a lease or completion the agent could not be reached
    for is sent again, unchanged, for up to ``timeout`` seconds (the agent
    itself waits for an unreachable master up to its heartbeat timeout).
    """

    def __init__(self, name, size=0, shard_size=1, batch_size=1, epochs=1, shuffle=False, seed=0,
                 streaming=False, lease_timeout=0.0, max_retries=3, prefetch=2, poll=0.05, timeout=900.0):
        spec = {"name": name, "size": str(int(size)), "batchSize": int(batch_size), "shardSize": str(int(shard_size)),
                "epochs": int(epochs), "shuffle": bool(shuffle), "seed": str(int(seed)), "streaming": bool(streaming),
                "leaseTimeoutMillis": str(int(lease_timeout * 1000)), "maxRetries": int(max_retries),
                "mode": "SHARD_MODE_LEASED"}
        self.name = name
        self.spec = _register(spec)
        self.worker = os.environ.get("LOCAL_RANK", "0")
        self.incarnation = int(os.environ.get("ROVER_WORKER_INCARNATION") or 0)
        self.prefetch, self.poll, self.timeout = max(1, int(prefetch)), poll, float(timeout)
        self._ready = []
        self._ended = False
        self._lock = threading.Lock()  # lease requests go one at a time, in order
        self._pid = self._client = self._seq = 0

    def _request_id(self):
        # A copy in a forked process (a DataLoader worker) counts apart under
        # a client number of its own: the same number from two processes
        # would get one process's shards for both.
        if self._pid != os.getpid() or self._seq >= 0xFFFFFFFF:
            self._pid, self._seq = os.getpid(), 0
            self._client = int.from_bytes(os.urandom(4), "big") << 32
        self._seq += 1
        return self._client | self._seq

    def _call(self, method, request):
        """Calls the agent, sending the same request again while it cannot
        be reached, for up to ``timeout`` seconds in all."""
        deadline = time.monotonic() + self.timeout
        delay = 0.1
        while True:
            left = deadline - time.monotonic()
            try:
                return _shard_call(method, request, timeout=max(left, 1.0))
            except _agent.AgentError as e:
                if e.code != "unavailable" or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 3.0)

    def _fill(self):
        want = self.prefetch - len(self._ready)
        if want <= 0 or self._ended:
            return
        with self._lock:
            r = self._call("LeaseShards", {"dataset": self.name, "worker": self.worker, "max": want,
                                           "incarnation": str(self.incarnation),
                                           "requestId": str(self._request_id())})
        self._ready.extend(Shard(s) for s in r.get("shards", []))
        if r.get("end"):
            self._ended = True

    def __iter__(self):
        delay = self.poll
        while True:
            self._fill()
            if self._ready:
                delay = self.poll
                yield self._ready.pop(0)
                continue
            if self._ended:
                return
            time.sleep(delay)  # others hold the last shards of the epoch
            delay = min(delay * 2, 1.0)

    def complete(self, shard, ok=True):
        """Reports a shard done (ok) or failed (retried elsewhere). Returns
        False when the lease had expired and the shard went to another
        worker: then this worker's results for it must be discarded."""
        r = self._call("CompleteShards", {"dataset": self.name, "worker": self.worker,
                                          "incarnation": str(self.incarnation),
                                          "results": [{"leaseId": shard.lease_id, "ok": bool(ok)}]})
        return str(shard.lease_id) not in [str(u) for u in r.get("unknown", [])]

    def state_dict(self):
        """The dataset's shard state on the master (which shards are done),
        to save with the checkpoint of the same step. Leases held now are
        saved as not done."""
        r = _shard_call("GetDatasetState", {"dataset": self.name})
        return {"name": self.name, "state": r.get("state", "")}

    def load_state_dict(self, state):
        """Restores the shard state saved with a checkpoint: the shards not
        done then are handed out again (leases held now are revoked)."""
        _agent.call("RestoreDataset", {"dataset": self.name, "state": state["state"]})
        self._ready, self._ended = [], False

    def append(self, samples, seal=False):
        """Streaming datasets: appends samples to the stream; returns its end."""
        r = _agent.call("AppendStream", {"dataset": self.name, "samples": str(int(samples)), "seal": bool(seal)})
        return int(r.get("end", 0))
