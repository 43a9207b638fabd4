"""Flash checkpoint: save training state to memory in a fraction of a second.

``Checkpointer.save(step, state)`` copies every tensor of ``state`` into a
shared-memory arena owned by the node agent (the copy is the only blocking
part); ``load()`` returns the newest step that every rank holds in memory,
after a worker restart. The bytes in memory are a safetensors file, so the
same bytes are what persistence writes (docs/design/flash-checkpoint.md).

Under ``rover run``: ``save(..., persist=True)`` also has the agent write the
snapshot to storage in the background (a directory, or an s3://, gs:// or
azblob:// URL: docs/flash-checkpoint.md); the master commits a step (its
manifest, then the ``latest`` marker) once every rank of it is durable;
``wait()`` blocks until this rank's pending persistence is done; ``load()``
falls back to the newest committed step in storage when the ranks hold no
common step in memory. For the job's goodput, each save tells the agent how
long it blocked training (save() to its commit), and a process's first
load() when it began and what it found (docs/design/goodput.md).

Without ``rover run`` (plain ``python train.py``, torchrun, a notebook) there
is no agent, and the Checkpointer does the work itself (_direct.py), for a
local directory only (a path or a file:// URL): ``save`` copies the state
into process memory; with ``persist`` it also writes this rank's file and,
once every rank's is durable (the ranks agree over torch.distributed), rank
0 commits the step, all before ``save`` returns, in the same format and
layout as the agent (internal/ckpt); ``wait()`` returns the step last made
durable; ``load()`` returns the newest of the snapshot in memory and the
newest committed step in storage that validates.

``state`` is a nested dict/list/tuple of torch tensors and plain values; the
tensors are stored as tensors, everything else as one JSON document of a
closed set of types (_extras.py: None, bool, int, float, str, bytes, list,
tuple, dict, OrderedDict, torch.dtype and torch.Size), never as a pickle, so
loading a checkpoint cannot run code. ``save`` raises TypeError, naming the
path in the state, for any other value. A file without that document (one
written by other tools) loads as a flat dict of its tensors by name.
"""

import ctypes
import json
import mmap
import os
import struct
import time
import warnings

from . import _agent, _direct, _extras, progress
from ._extras import ExtrasError

__all__ = ["Checkpointer", "ExtrasError", "encode_header", "decode"]

_EXTRA = "__rover_extra__"

_STARTING = object()  # _report_restore's "loading began"

_DTYPES = {}  # torch dtype -> (safetensors name, element size); filled lazily


def _torch():
    import torch

    if not _DTYPES:
        for dt, name in [(torch.float64, "F64"), (torch.float32, "F32"), (torch.float16, "F16"),
                         (torch.bfloat16, "BF16"), (torch.int64, "I64"), (torch.int32, "I32"),
                         (torch.int16, "I16"), (torch.int8, "I8"), (torch.uint8, "U8"), (torch.bool, "BOOL")]:
            _DTYPES[dt] = (name, torch.tensor([], dtype=dt).element_size())
    return torch


def encode_header(entries, meta):
    """entries: [(name, dtype_name, shape, nbytes)], in data order. Returns
    (header_bytes, offsets, total_size) of a safetensors file whose data starts
    8-byte aligned."""
    header, offsets, pos = {}, [], 0
    for name, dtype, shape, nbytes in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [pos, pos + nbytes]}
        offsets.append(pos)
        pos += nbytes
    header["__metadata__"] = {k: str(v) for k, v in meta.items()}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((-(8 + len(raw))) % 8)
    return struct.pack("<Q", len(raw)) + raw, offsets, 8 + len(raw) + pos


def decode(buf):
    """Parses a safetensors buffer: returns (header dict, data start)."""
    if len(buf) < 8:
        raise ValueError("checkpoint snapshot is shorter than its header length")
    (n,) = struct.unpack_from("<Q", buf, 0)
    if n > len(buf) - 8 or n > 100 << 20:
        raise ValueError(f"checkpoint snapshot header length {n} is out of range")
    header = json.loads(bytes(buf[8:8 + n]))
    return header, 8 + n


def _view(torch, obj, dtype, count, offset):
    """A tensor over obj's bytes; obj may be a read-only mapping (the node
    copy), which is only read from: torch's warning about it is noise."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        return torch.frombuffer(obj, dtype=dtype, count=count, offset=offset)


def _job_storage(dir_or_url, keep):
    """The job's checkpoint storage and keep under ``rover run``. What this
    Checkpointer names is declared to the agent, which keeps the job's one
    storage with the master: the launcher's ``--checkpoint-dir`` when it
    gave one, else the first declaration of the job's script, so every
    rank on every node gets the same. A location or keep other than the
    job's raises ValueError saying what the job has and what was asked."""
    req = {}
    if dir_or_url:
        req["url"] = dir_or_url
    if keep is not None:
        req["keep"] = int(keep)
    try:
        r = _agent.call("CheckpointStorage", req)
    except _agent.AgentError as e:
        if e.code in ("failed_precondition", "invalid_argument"):
            args = ", ".join([repr(dir_or_url)] + ([f"keep={keep}"] if keep is not None else []))
            raise ValueError(f"Checkpointer({args}): {e.message}") from None
        raise
    return r.get("url") or None, int(r.get("keep", 0))


def _location(loc):
    """A location compared as the agent does: paths and file URLs by path."""
    if "://" not in loc:
        return os.path.normpath(loc)
    if loc.startswith("file://") and "?" not in loc:
        return os.path.normpath(loc[len("file://"):])
    return loc.rstrip("/")


class Checkpointer:
    """Saves and restores training state through the node agent's memory.

        ckpt = Checkpointer("/checkpoints/run1")
        restored = ckpt.load()
        if restored:
            step, state = restored
            model.load_state_dict(state["model"])
        for step in range(start, steps):
            ...
            ckpt.save(step, {"model": model.state_dict(), "optim": opt.state_dict()})
    """

    def __init__(self, dir_or_url=None, keep=None, mode="sharded"):
        """dir_or_url: where persisted checkpoints go. mode: "sharded"
        (every rank saves its own part: FSDP, ZeRO) or "replicated" (every
        rank holds the same state: DDP; any one rank's file restores all).

        Under ``rover run`` the job has one checkpoint storage: the
        launcher's (``rover run --checkpoint-dir DIR_OR_URL
        --checkpoint-keep N``), else the one the job's script declares:
        the first Checkpointer that names dir_or_url (and keep) sets it for
        the whole job, every rank and node (the master keeps it, across its
        restarts). Later requests name steps, never locations. dir_or_url
        and keep may be left out (the job's are taken); when given, they
        must agree with the job's, else ValueError says what the job has
        and what was asked. A keep given here applies when the launcher
        gave no --checkpoint-keep (default 1). Without ``rover run``,
        dir_or_url (None: memory only) must be a local directory (a path or
        a file:// URL; other URLs raise ValueError) and keep (default 1; 0:
        all) is the committed steps kept there."""
        if mode not in ("sharded", "replicated"):
            raise ValueError(f"mode must be 'sharded' or 'replicated', not {mode!r}")
        if dir_or_url is not None:
            dir_or_url = os.fspath(dir_or_url)
        if dir_or_url and "://" not in dir_or_url:
            dir_or_url = os.path.abspath(dir_or_url)
        if keep is not None and int(keep) < 0:
            raise ValueError(f"keep must be 0 (all) or more, not {keep!r}")
        if _agent.under_rover():
            dir_or_url, keep = _job_storage(dir_or_url, keep)
        elif keep is None:
            keep = 1
        self.url, self.keep, self.mode = dir_or_url, int(keep), mode
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self._mm, self._mm_path, self._mm_len = None, None, 0
        self._into = None
        self.rank = int(os.environ.get("RANK", "0"))
        # The local rank whose arena holds this rank's snapshots: in
        # replicated mode local rank 0 keeps one copy for the node.
        self.home = 0 if mode == "replicated" else self.local_rank
        self._ro = {}  # read-only mappings of the node copy, by path
        #: Where the last load() found its state: "memory", "storage" or None.
        self.restored_from = None
        self._last_saved = None  # the step this process saved last, under rover run
        # Whether a save asked for persistence, and why the last save that
        # did failed before it reached the agent: what wait() reports when
        # nothing became durable.
        self._persist_asked, self._save_error = False, None
        self._persist_step = None  # the step of the last save that asked for persistence
        # This process's first load was reported to the agent as begun, and
        # its end not yet (the DLRover checkpointers report it themselves).
        self._restore_reported, self._restore_open = False, False
        # Without the agent: a Store (memory and a local directory).
        self._direct = None if _agent.under_rover() else _direct.Store(dir_or_url)

    def _layout(self, step, state, rank=None, world=None):
        torch = _torch()
        extra, tensors = _extras.encode(state, torch)
        flat = []
        for name, t in tensors:
            if t.dtype not in _DTYPES:
                raise TypeError(f"{name}: dtype {t.dtype} cannot be checkpointed")
            if t.device.type != "cpu":
                t = t.to("cpu", non_blocking=False)
            flat.append((name, t.contiguous()))
        flat.sort(key=lambda nt: (-_DTYPES[nt[1].dtype][1], nt[0]))
        entries = [(n, _DTYPES[t.dtype][0], tuple(t.shape), t.numel() * _DTYPES[t.dtype][1]) for n, t in flat]
        entries.append((_EXTRA, "U8", (len(extra),), len(extra)))
        if rank is None:
            rank, world = self.rank, os.environ.get("WORLD_SIZE", "1")
        meta = {"rover.step": step, "rover.rank": rank, "rover.world_size": world, "rover.mode": self.mode}
        head, offsets, size = encode_header(entries, meta)
        return flat, extra, head, offsets, size

    def _map(self, path):
        """The arena file, mapped once and kept across saves and loads. A new
        mapping is populated and every page written once (with its own
        value), so that no save pays the first-write page faults."""
        length = os.stat(path).st_size
        if self._mm is None or self._mm_path != path or self._mm_len != length:
            if self._mm is not None:
                self._mm.close()
            with open(path, "r+b") as f:
                flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
                self._mm = mmap.mmap(f.fileno(), length, flags=flags)
            self._mm_path, self._mm_len = path, length
            torch = _torch()
            pages = torch.frombuffer(self._mm, dtype=torch.uint8)[::mmap.PAGESIZE]
            pages.add_(0)  # read and write back one byte a page
            del pages
        return self._mm

    def _wait_for(self, step, snaps, timeout=60.0):
        """snaps, once step is among them: in replicated mode local rank 0
        may still be copying the step that this rank's save skipped."""
        deadline = time.monotonic() + timeout
        while not any(s["step"] == step for s in snaps) and self.home != self.local_rank:
            if time.monotonic() > deadline:
                break
            time.sleep(0.005)
            snaps = self._snapshots()[0]
        return snaps

    def _map_read(self, path):
        """path mapped for reading: this rank's own mapping, or a read-only
        one of another rank's arena (the node copy), which must never be
        written: its owner may be saving into it."""
        if path == self._mm_path or self.home == self.local_rank:
            return self._map(path)
        length = os.stat(path).st_size
        mm = self._ro.get(path)
        if mm is None or len(mm) != length:
            with open(path, "rb") as f:
                mm = mmap.mmap(f.fileno(), length, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                               prot=mmap.PROT_READ)
            self._ro[path] = mm
        return mm

    def reserve(self, state_or_bytes):
        """Allocates (and pre-faults) this rank's arena for a state like
        state_or_bytes (or that many bytes) ahead of the first save, so that
        no save pays for it. Optional: the first save reserves otherwise.
        Without ``rover run``: allocates the snapshot buffer in process
        memory."""
        if isinstance(state_or_bytes, int):
            size = state_or_bytes
        else:
            size = self._layout(0, state_or_bytes)[4] + 64  # room for longer step numbers
        if self._direct is not None:
            self._direct.reserve(size)
            return
        if self.home != self.local_rank:
            return  # replicated: local rank 0 keeps the node's copy
        r = _agent.call("CheckpointReserve", {"localRank": self.local_rank, "size": str(size)}, timeout=None)
        self._map(r["path"])

    def save(self, step, state, persist=False):
        """Copies state into shared memory as step; blocks only for the copy.
        With persist, the agent also writes it to storage in the background.
        Without ``rover run``: copies state into process memory; with
        persist, also writes and commits it to the directory before
        returning (every rank must call save with the same step and
        persist; a failure on any rank raises on all)."""
        if persist and not self.url:
            if self._direct is None:
                raise ValueError("save(persist=True): this job has no checkpoint storage; "
                                 "name it, Checkpointer(DIR_OR_URL), or start the job with "
                                 "rover run --checkpoint-dir DIR_OR_URL")
            raise ValueError("save(persist=True) needs a Checkpointer(dir_or_url)")
        if step < 0:
            raise ValueError(f"step must be 0 or more, not {step}")
        if persist:
            self._persist_asked = True
            self._persist_step = step
        began = time.monotonic_ns()  # the save blocks training from here
        try:
            self._save(step, state, persist, began)
        except BaseException as e:
            if persist:
                self._save_error = e
            raise
        progress._record(step, progress.CHECKPOINT)

    def _save(self, step, state, persist, began):
        if self._direct is not None:
            rank, world, dist = _direct.rank_world()
            flat, extra, head, offsets, size = self._layout(step, state, rank, world)
            self._place(self._direct.buffer(size), 0, flat, extra, head, offsets)
            self._direct.hold(step, size)
            if persist:
                self._direct.persist(step, rank, world, dist, self.mode, self.keep)
            return
        self._last_saved = step
        if self.home != self.local_rank:
            return  # replicated: local rank 0 keeps the node's copy
        flat, extra, head, offsets, size = self._layout(step, state)
        slot = _agent.call("CheckpointBegin", {"localRank": self.local_rank, "step": str(step), "size": str(size)})
        self._place(self._map(slot["path"]), int(slot.get("offset", 0)), flat, extra, head, offsets)
        # The node's savers (one in replicated mode) and how long this save
        # blocked training: the agent reports each step's longest to the
        # master, whose goodput counts it as checkpoint badput.
        savers = 1 if self.mode == "replicated" else int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        commit = {"localRank": self.local_rank, "step": str(step), "length": str(size), "persist": bool(persist),
                  "nodeSavers": savers}
        if self.url:
            # Whose file it is, for the agent to persist, also when the
            # workers fail; where it goes is the job's storage.
            commit.update(rank=self.rank, worldSize=int(os.environ.get("WORLD_SIZE", "1")), mode=self.mode)
        commit["blockingNanos"] = str(time.monotonic_ns() - began)
        _agent.call("CheckpointCommit", commit)

    def _place(self, buf, base, flat, extra, head, offsets):
        """Copies a laid-out snapshot into buf (an mmap or a bytearray) at base.

        The tensors are CPU and contiguous (_layout made them so); each is
        copied with the C library's memmove, which writes a destination that
        is not in the cache (the arena's other slot) at about three times
        the pace of a tensor copy_ through a torch.frombuffer view (0.10 ms
        against 0.28 ms for 4 MiB in 8 tensors here), and builds no view."""
        data = base + len(head)
        end = data + offsets[-1] + len(extra)
        if base < 0 or end > len(buf):
            raise ValueError(f"checkpoint layout of {end - base} bytes at offset {base} does not fit "
                             f"the {len(buf)}-byte buffer")
        buf[base:data] = head
        addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))  # the export ends with the temporary
        for (name, t), off in zip(flat, offsets):
            n = t.numel() * _DTYPES[t.dtype][1]
            if n:
                if t.device.type != "cpu" or not t.is_contiguous():
                    raise ValueError(f"{name}: a tensor to place must be on the CPU and contiguous")
                ctypes.memmove(addr + data + off, t.data_ptr(), n)
        off = data + offsets[-1]  # the extras document comes last
        buf[off:off + len(extra)] = extra

    def wait(self):
        """Blocks until this rank's pending persistence is durable; returns the
        newest step this rank made durable, or None when no save asked for
        persistence. Raises if a persistence failed since the last wait, and
        when persistence was asked for but no step was ever made durable
        (naming the cause: storage full or unreachable, shared memory too
        small, ...). A durable rank file is committed by the master once
        every rank of the step is durable. In replicated mode the other
        local ranks first wait (up to a minute) for local rank 0 to make
        their last persisted step durable.
        Without ``rover run`` persistence is synchronous (save returns once
        the step is committed, or raises): returns the step this process last
        committed, or None; raises if a save asked for persistence and none
        was ever committed."""
        if self._direct is not None:
            if self._direct.durable is None and self._persist_asked:
                raise RuntimeError(f"no checkpoint step was made durable: the last save failed: {self._save_error}")
            return self._direct.durable
        if self.home != self.local_rank and self._persist_step is not None:
            # Replicated: this rank's save returned at once, and local rank
            # 0 may not have asked to persist that step yet: wait for it.
            deadline = time.monotonic() + 60.0
            while time.monotonic() < deadline:
                r = _agent.call("CheckpointWait", {"localRank": self.home}, timeout=None)
                if r.get("error"):  # reported once: raise it here
                    raise _agent.AgentError("unavailable", "persisting a checkpoint failed: " + r["error"])
                if int(r.get("durableStep", -1)) >= self._persist_step:
                    break
                time.sleep(0.005)
        r = _agent.call("CheckpointWait", {"localRank": self.home}, timeout=None)
        durable = int(r.get("durableStep", 0))
        if durable < 0 and (int(r.get("requested", 0)) > 0 or self._persist_asked):
            cause = r.get("error") or r.get("lastFailure") or (
                f"the last save failed: {self._save_error}" if self._save_error else "no persistence has finished")
            raise _agent.AgentError("unavailable", "no checkpoint step was made durable: " + cause)
        if r.get("error"):
            raise _agent.AgentError("unavailable", "persisting a checkpoint failed: " + r["error"])
        return durable if durable >= 0 else None

    def _snapshots(self):
        """The snapshots this rank can load from memory (its own arena's,
        then in replicated mode the node copy's), and the step the master
        agreed that every rank restores from memory in this round (or None)."""
        snaps, agreed = [], None
        for local in dict.fromkeys((self.local_rank, self.home)):
            r = _agent.call("CheckpointSnapshots", {"localRank": local})
            snaps += [dict(s, step=int(s["step"]), offset=int(s.get("offset", 0)), length=int(s["length"]))
                      for s in r.get("snapshots", [])]
            if r.get("agreedStep") is not None:
                agreed = int(r["agreedStep"])
        return snaps, agreed

    def latest_step(self):
        """The step load() restores from memory: under ``rover run`` the step
        this process saved last, or in a process that has not saved yet the
        step every rank restores from memory in this round (agreed by the
        master when the round started), or None. Without ``rover run``: the newest
        of the step in process memory and the newest committed step in
        storage whose manifest and file sizes validate (load also checks
        CRC32Cs, and may fall back further)."""
        if self._direct is not None:
            found = self._direct.source(*_direct.rank_world(), verify=False)
            return found[0] if found else None
        if self._last_saved is not None:
            return self._last_saved
        return self._snapshots()[1]

    def load(self, into=None):
        """Returns (step, state) of the newest step every rank holds in memory,
        else (with a dir_or_url) of the newest committed step in storage, or
        None; ``restored_from`` says which ("memory", "storage", None).
        Under ``rover run`` the master agrees on the memory step when the
        workers' round starts, from what every node holds, so all ranks load
        the same step without a process group. After this process has saved
        (a rollback, say), load() returns the step it saved last, from
        memory: ranks that saved the same steps load the same one. With ``into`` (a state of the
        same structure, e.g. the one you save), tensors are copied into its
        tensors in place, which is the fastest restore; otherwise new tensors
        are returned. Without ``rover run``: the newest of the snapshot in
        process memory and the newest committed step in storage that
        validates (in sharded mode this rank's file, in replicated mode rank
        0's or, if it is damaged, another rank's)."""
        return self._load(into, finish=True)

    def _load(self, into=None, finish=True):
        """load(); with finish False, a first load's end is left for the
        caller to report (_finish_restore): what the DLRover checkpointers
        do, which may go on to load a file of their own."""
        self._into, self.restored_from = into, None
        if self._direct is None and not self._restore_reported:
            self._report_restore()
            self._restore_reported = True
            restored = self._load_agent()
            self._restore_open = True
            if finish:
                self._finish_restore(restored[0] if restored else None, self.restored_from)
            return restored
        if self._direct is not None:
            rank, world, dist = _direct.rank_world()
            found = self._direct.source(rank, world, dist, verify=True)
            if found is None:
                return None
            step, buf, length = found
            self.restored_from = "memory" if buf is self._direct.buf else "storage"
            # A file's buffer is this load's own: its tensors may alias it.
            return self._decode(buf, 0, length, step, None, alias=buf is not self._direct.buf)
        return self._load_agent()

    def _finish_restore(self, step, source):
        """Reports the end of this process's first load, once: step loaded
        from source ("memory" or "storage"), or None, None (nothing)."""
        if not self._restore_open:
            return
        self._restore_open = False
        self._report_restore(step, source)

    def _report_restore(self, step=None, source=_STARTING):
        """Tells the agent this process began loading (no arguments) or what
        it loaded (step from source "memory" or "storage"; None: nothing),
        for the node's restore events in the master's goodput accounting.
        Best effort: a failed report never fails the load."""
        req = {"localRank": self.local_rank}
        if source is not _STARTING:
            source = {"memory": "CHECKPOINT_SOURCE_MEMORY", "storage": "CHECKPOINT_SOURCE_STORAGE"}.get(
                source if step is not None else None, "CHECKPOINT_SOURCE_NONE")
            req.update(finished=True, step=str(step if source != "CHECKPOINT_SOURCE_NONE" else -1), source=source)
        try:
            _agent.call("ReportRestore", req, timeout=5.0)
        except _agent.AgentError:
            pass

    def _load_agent(self):
        """load() under ``rover run``."""
        snaps, agreed = self._snapshots()
        if self._last_saved is not None:
            agreed, snaps = self._last_saved, self._wait_for(self._last_saved, snaps)
        if agreed is not None:
            snap = next((s for s in snaps if s["step"] == agreed), None)
            if snap is not None:
                restored = self._decode(self._map_read(snap["path"]), snap["offset"], snap["length"], agreed, self.rank)
                if restored is not None:
                    self.restored_from = "memory"
                    return restored
        if not self.url:
            return None
        r = _agent.call("CheckpointRestore", {"localRank": self.local_rank, "rank": self.rank})
        if not r.get("found"):
            return None
        s = r["snapshot"]
        snap = dict(s, step=int(s["step"]), offset=int(s.get("offset", 0)), length=int(s["length"]))
        restored = self._decode(self._map(snap["path"]), snap["offset"], snap["length"], snap["step"], self.rank)
        if restored is not None:
            self.restored_from = "storage"
        return restored

    def _decode(self, obj, offset, length, step, rank, alias=False):
        """The state in obj[offset:offset + length] (an mmap or a bytearray),
        or None when its metadata is not step's (and, sharded, rank's; rank
        None: checked already). With alias, new tensors are views of obj
        (which they keep alive) rather than copies: half the memory to
        touch, for a buffer nothing else writes."""
        torch = _torch()
        by_name = {v[0]: k for k, v in _DTYPES.items()}
        buf = memoryview(obj)[offset:offset + length]
        targets = {}
        if self._into is not None:
            targets = dict(_extras.tensors_of(self._into, torch))
        try:
            header, start = decode(buf)
            meta = header.pop("__metadata__", {})
            if rank is not None and int(meta.get("rover.step", -1)) != step:
                return None
            if rank is not None and self.mode == "sharded" and int(meta.get("rover.rank", -1)) != rank:
                return None  # another rank's part: not ours to restore
            tensors, extra = {}, None
            base = offset + start
            for name, info in header.items():
                b, e = info["data_offsets"]
                if name == _EXTRA:
                    extra = bytes(buf[start + b:start + e])
                    continue
                dt = by_name.get(info["dtype"])
                if dt is None:
                    raise TypeError(f"checkpoint tensor {name!r} has dtype {info['dtype']}, which cannot be restored")
                count = (e - b) // _DTYPES[dt][1]
                src = _view(torch, obj, dt, count, base + b) if count else torch.empty(0, dtype=dt)
                dst = targets.get(name)
                if dst is not None and dst.dtype == dt and list(dst.shape) == list(info["shape"]) and dst.is_contiguous():
                    dst.copy_(src.reshape(info["shape"]))
                    tensors[name] = dst
                else:
                    tensors[name] = (src if alias else src.clone()).reshape(info["shape"])
                del src
        finally:
            del buf
        if extra is None:
            return step, tensors
        try:
            return step, _extras.decode(extra, tensors, torch)
        except ExtrasError as e:
            raise ExtrasError(f"cannot load step {step} of this checkpoint: {e}") from None
