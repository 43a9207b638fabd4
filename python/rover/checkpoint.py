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
common step in memory.

``state`` is a nested dict/list/tuple of torch tensors and plain values; the
tensors are stored as tensors, everything else is pickled.
"""

import json
import mmap
import os
import pickle
import struct

from . import _agent

__all__ = ["Checkpointer", "encode_header", "decode"]

_EXTRA = "__rover_extra__"

_DTYPES = {}  # torch dtype -> (safetensors name, element size); filled lazily


def _torch():
    import torch

    if not _DTYPES:
        for dt, name in [(torch.float64, "F64"), (torch.float32, "F32"), (torch.float16, "F16"),
                         (torch.bfloat16, "BF16"), (torch.int64, "I64"), (torch.int32, "I32"),
                         (torch.int16, "I16"), (torch.int8, "I8"), (torch.uint8, "U8"), (torch.bool, "BOOL")]:
            _DTYPES[dt] = (name, torch.tensor([], dtype=dt).element_size())
    return torch


class _Ref:
    """A placeholder for a tensor inside the pickled skeleton."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return (_Ref, (self.name,))


def _flatten(obj, torch, tensors, path="state"):
    if isinstance(obj, torch.Tensor):
        name = path
        tensors.append((name, obj.detach()))
        return _Ref(name)
    if isinstance(obj, dict):
        return {k: _flatten(v, torch, tensors, f"{path}.{k}") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [_flatten(v, torch, tensors, f"{path}.{i}") for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else tuple(items)
    return obj


def _inflate(obj, tensors):
    if isinstance(obj, _Ref):
        return tensors[obj.name]
    if isinstance(obj, dict):
        return {k: _inflate(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_inflate(v, tensors) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_inflate(v, tensors) for v in obj)
    return obj


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

    def __init__(self, dir_or_url=None, keep=1, mode="sharded"):
        """dir_or_url: where persisted checkpoints go (None: memory only).
        keep: committed steps kept in storage (0: all). mode: "sharded"
        (every rank saves its own part: FSDP, ZeRO) or "replicated" (every
        rank holds the same state: DDP; any one rank's file restores all)."""
        if mode not in ("sharded", "replicated"):
            raise ValueError(f"mode must be 'sharded' or 'replicated', not {mode!r}")
        if dir_or_url and "://" not in dir_or_url:
            dir_or_url = os.path.abspath(dir_or_url)
        self.url, self.keep, self.mode = dir_or_url, int(keep), mode
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self._mm, self._mm_path, self._mm_len = None, None, 0
        self._into = None
        self.rank = int(os.environ.get("RANK", "0"))
        if not _agent.under_rover():
            raise _agent.AgentError("unavailable", "flash checkpoint needs the rover agent: start the script with `rover run`")

    def _layout(self, step, state):
        torch = _torch()
        tensors = []
        skeleton = _flatten(state, torch, tensors)
        extra = pickle.dumps(skeleton, protocol=pickle.HIGHEST_PROTOCOL)
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
        meta = {"rover.step": step, "rover.rank": self.rank, "rover.world_size": os.environ.get("WORLD_SIZE", "1")}
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

    def reserve(self, state_or_bytes):
        """Allocates (and pre-faults) this rank's arena for a state like
        state_or_bytes (or that many bytes) ahead of the first save, so that
        no save pays for it. Optional: the first save reserves otherwise."""
        if isinstance(state_or_bytes, int):
            size = state_or_bytes
        else:
            size = self._layout(0, state_or_bytes)[4] + 64  # room for longer step numbers
        r = _agent.call("CheckpointReserve", {"localRank": self.local_rank, "size": str(size)}, timeout=None)
        self._map(r["path"])

    def save(self, step, state, persist=False):
        """Copies state into shared memory as step; blocks only for the copy.
        With persist, the agent also writes it to storage in the background."""
        if persist and not self.url:
            raise ValueError("save(persist=True) needs a Checkpointer(dir_or_url)")
        torch = _torch()
        flat, extra, head, offsets, size = self._layout(step, state)
        slot = _agent.call("CheckpointBegin", {"localRank": self.local_rank, "step": str(step), "size": str(size)})
        base = int(slot.get("offset", 0))
        mm = self._map(slot["path"])
        mm[base:base + len(head)] = head
        data = base + len(head)
        for (name, t), off in zip(flat, offsets):
            n = t.numel() * _DTYPES[t.dtype][1]
            if n:
                dst = torch.frombuffer(mm, dtype=torch.uint8, count=n, offset=data + off)
                dst.copy_(t.reshape(-1).view(torch.uint8))
                del dst
        off = data + offsets[-1]  # the pickled rest comes last
        mm[off:off + len(extra)] = extra
        commit = {"localRank": self.local_rank, "step": str(step), "length": str(size), "persist": bool(persist)}
        if self.url:
            # Where the agent persists, also when the workers fail.
            commit.update(url=self.url, rank=self.rank, worldSize=int(os.environ.get("WORLD_SIZE", "1")),
                          mode=self.mode, keep=self.keep)
        _agent.call("CheckpointCommit", commit)

    def wait(self):
        """Blocks until this rank's pending persistence is durable; returns the
        newest durable step. Raises if a persistence failed since the last wait."""
        r = _agent.call("CheckpointWait", {"localRank": self.local_rank}, timeout=None)
        if r.get("error"):
            raise _agent.AgentError("unavailable", "persisting a checkpoint failed: " + r["error"])
        return int(r.get("durableStep", 0))

    def _snapshots(self):
        r = _agent.call("CheckpointSnapshots", {"localRank": self.local_rank})
        return [dict(s, step=int(s["step"]), offset=int(s.get("offset", 0)), length=int(s["length"]))
                for s in r.get("snapshots", [])]

    def latest_step(self):
        """The newest step every rank holds in memory, or None."""
        steps = self._agreed_steps()
        return max(steps) if steps else None

    def _agreed_steps(self):
        mine = {s["step"] for s in self._snapshots()}
        torch = _torch()
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            everyone = [None] * dist.get_world_size()
            dist.all_gather_object(everyone, sorted(mine))
            for other in everyone:
                mine &= set(other)
        del torch
        return mine

    def load(self, into=None):
        """Returns (step, state) of the newest step every rank holds in memory,
        else (with a dir_or_url) of the newest committed step in storage, or
        None. With a process group initialised, the ranks agree on the step.
        With ``into`` (a state of the same structure, e.g. the one you save),
        tensors are copied into its tensors in place, which is the fastest
        restore; otherwise new tensors are returned."""
        self._into = into
        steps = self._agreed_steps()
        if steps:
            step = max(steps)
            snap = next(s for s in self._snapshots() if s["step"] == step)
        elif self.url:
            r = _agent.call("CheckpointRestore", {"localRank": self.local_rank, "url": self.url, "rank": self.rank})
            if not r.get("found"):
                return None
            s = r["snapshot"]
            snap = dict(s, step=int(s["step"]), offset=int(s.get("offset", 0)), length=int(s["length"]))
            step = snap["step"]
        else:
            return None
        return self._read(snap, step)

    def _read(self, snap, step):
        torch = _torch()
        by_name = {v[0]: k for k, v in _DTYPES.items()}
        mm = self._map(snap["path"])
        buf = memoryview(mm)[snap["offset"]:snap["offset"] + snap["length"]]
        targets = {}
        if self._into is not None:
            found = []
            _flatten(self._into, torch, found)
            targets = dict(found)
        try:
            header, start = decode(buf)
            meta = header.pop("__metadata__", {})
            if int(meta.get("rover.step", -1)) != step:
                return None
            if self.mode == "sharded" and int(meta.get("rover.rank", -1)) != self.rank:
                return None  # another rank's part: not ours to restore
            tensors, extra = {}, None
            base = snap["offset"] + start
            for name, info in header.items():
                b, e = info["data_offsets"]
                if name == _EXTRA:
                    extra = bytes(buf[start + b:start + e])
                    continue
                dt = by_name[info["dtype"]]
                count = (e - b) // _DTYPES[dt][1]
                src = torch.frombuffer(mm, dtype=dt, count=count, offset=base + b) if count else torch.empty(0, dtype=dt)
                dst = targets.get(name)
                if dst is not None and dst.dtype == dt and list(dst.shape) == list(info["shape"]) and dst.is_contiguous():
                    dst.copy_(src.reshape(info["shape"]))
                    tensors[name] = dst
                else:
                    tensors[name] = src.clone().reshape(info["shape"])
                del src
        finally:
            del buf
        return step, _inflate(pickle.loads(extra), tensors)
