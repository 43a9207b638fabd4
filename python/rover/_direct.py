"""Flash checkpoints without the rover agent: process memory and a local
directory.

A script that ``rover run`` did not start has no agent to hold its snapshots
in shared memory or to persist them, so ``Checkpointer`` (checkpoint.py) does
both itself through a ``Store``:

* A save copies the state into one buffer in process memory: the snapshot
  that ``load`` restores while the process lives, and the bytes a persist
  writes. It is a copy, so later in-place updates of the state do not reach
  it.
* A persist is synchronous. Each rank writes its file,
  ``step-<N>/rank-<R>.safetensors``, to a temporary file that it fsyncs and
  renames, then fsyncs the directory. Once every rank's file is durable (the
  ranks learn it over torch.distributed), rank 0 checks that it sees them
  all, writes ``step-<N>/manifest.json`` with their sizes and CRC32Cs, then
  the ``latest`` marker, the commit point, each the same way; then it deletes
  old steps as ckpt.Keep does, manifest first. A failure on any rank raises
  on every rank, and the step is not committed.
* A load takes the newest step that ``latest`` names, or, when that one does
  not validate (a missing or malformed manifest, a missing file, a wrong
  size or CRC32C), the newest older step that does, as ckpt.FindLatest does;
  a corrupt or partial file is never loaded. With a process group the ranks
  agree on the step.

The layout, manifest and marker are those of internal/ckpt (manifest.go,
commit.go, load.go): the Go code reads what this module writes and the
other way round. Only local directories (a path or a file:// URL, shared by
all nodes when there are several): other storage needs the agent's drivers.
Standard library only; torch.distributed is used when it is initialised.
"""

import mmap
import os
import shutil
import threading
import time
import urllib.parse
import warnings

from ._crc32c import crc32c
from ._manifest import (LATEST, MANIFEST, MAX_INT64, SCHEMA, Corrupt, check_safetensors, format_latest,
                        marshal_manifest, parse_latest, parse_manifest, parse_step_dir, rank_path, rfc3339,
                        step_dir)

__all__ = ["Store", "local_dir", "rank_world"]


def local_dir(url):
    """The directory that url names: a path, or a file:// URL. Any other
    scheme raises ValueError: only the agent has drivers for them."""
    if "://" not in url:
        return os.path.abspath(url)
    u = urllib.parse.urlsplit(url)
    if u.scheme != "file":
        raise ValueError(
            f"checkpoint storage {url!r}: {u.scheme}:// storage needs `rover run`, whose agent has the "
            "storage drivers; without it, give a local directory (a path or a file:// URL)")
    if u.netloc not in ("", "localhost") or not u.path.startswith("/"):
        raise ValueError(f"checkpoint storage {url!r}: a file URL names an absolute local path, "
                         "like file:///checkpoints/run1")
    return urllib.parse.unquote(u.path)


def rank_world():
    """(rank, world size, dist): from torch.distributed when a process group
    is initialised, else from RANK and WORLD_SIZE; dist is the
    torch.distributed module when the group has more than one rank, else
    None (no collectives needed or possible)."""
    try:
        import torch.distributed as dist
    except ImportError:
        dist = None
    if dist is not None and dist.is_available() and dist.is_initialized():
        world = dist.get_world_size()
        return dist.get_rank(), world, (dist if world > 1 else None)
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")), None


def _gather(dist, world, obj):
    if dist is None:
        return [obj]
    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


def _collective(dist, world, what, fn, share=lambda result: result):
    """Runs fn on every rank and gathers share(result) from all of them (a
    list by rank). If fn raised on any rank, raises on every rank rather
    than leaving the others waiting in the next collective."""
    try:
        result, err, exc = fn(), None, None
    except Exception as e:
        if dist is None:
            raise
        result, err, exc = None, f"rank {dist.get_rank()}: {type(e).__name__}: {e}", e
    everyone = _gather(dist, world, (None if err else share(result), err))
    errs = [e for _, e in everyone if e]
    if errs:
        raise RuntimeError(f"{what} failed: " + "; ".join(errs)) from exc
    return result, [x for x, _ in everyone]


class Store:
    """The checkpoints of one Checkpointer without the agent: the snapshot
    in memory, and the directory root (None: memory only)."""

    def __init__(self, url):
        self.root = local_dir(url) if url else None
        self.buf = None  # the snapshot in memory (an anonymous mmap), reused by saves
        self.mem_step = None  # its step; None while it holds none
        self.mem_len = 0
        self.durable = None  # the newest step this process committed

    # Memory.

    def reserve(self, size):
        """Makes the buffer at least size bytes (a larger one replaces the
        snapshot in memory), its pages faulted in now, not during a save."""
        if self.buf is None or len(self.buf) < size:
            self.mem_step, self.buf = None, None
            self.buf = _memory(size)

    def buffer(self, size):
        """A buffer of at least size bytes for the next snapshot; the one in
        memory is gone from now on."""
        self.reserve(size)
        self.mem_step = None
        return self.buf

    def hold(self, step, size):
        """Records that the buffer now holds step's snapshot of size bytes."""
        self.mem_step, self.mem_len = step, size

    # Persisting.

    def persist(self, step, rank, world, dist, mode, keep):
        """Writes the snapshot in memory as rank's file of step and commits
        the step with the other ranks (see the module comment). In
        replicated mode only rank 0 writes: one file restores every rank."""
        if world > 1 and dist is None and mode == "sharded":
            raise RuntimeError(
                f"persisting a sharded checkpoint of {world} ranks without `rover run` needs torch.distributed "
                "initialised: the ranks agree through it that every file is durable before rank 0 commits")
        payload = memoryview(self.buf)[:self.mem_len]
        writes = mode == "sharded" or rank == 0
        try:
            _, files = _collective(dist, world, f"persisting checkpoint step {step} to {self.root}",
                                   lambda: self._write_rank(step, rank, payload) if writes else None)
        finally:
            payload.release()
        files = [f for f in files if f]
        _collective(dist, world, f"committing checkpoint step {step} to {self.root}",
                    lambda: self._commit(step, world, mode, files) if rank == 0 else None)
        if rank == 0 or dist is not None:
            self.durable = step
        if rank == 0 and keep > 0:
            try:
                self.keep(keep)
            except (OSError, Corrupt) as e:  # the step is committed: training goes on
                warnings.warn(f"deleting old checkpoints in {self.root}: {e}", stacklevel=3)

    def _write_rank(self, step, rank, payload):
        path = rank_path(step, rank)
        # The CRC32C (pure Python, holding the GIL) overlaps the writes
        # (system calls, without it): a second core does the copy.
        crc = []
        worker = threading.Thread(target=lambda: crc.append(crc32c(payload)), name="rover-crc32c", daemon=True)
        worker.start()
        try:
            _ensure_dir(os.path.join(self.root, step_dir(step)))
            _write_file(os.path.join(self.root, path), payload)
        finally:
            worker.join()
        if not crc:
            raise RuntimeError(f"computing the CRC32C of {path} failed (see the traceback above)")
        return {"rank": rank, "path": path, "size": len(payload), "crc32c": crc[0]}

    def _commit(self, step, world, mode, files):
        files = sorted(files, key=lambda f: f["rank"])
        for f in files:
            try:
                size = os.stat(os.path.join(self.root, f["path"])).st_size
            except FileNotFoundError:
                size = None
            if size != f["size"]:
                seen = "no such file" if size is None else f"{size} bytes"
                raise RuntimeError(
                    f"rank {f['rank']} wrote {f['path']} ({f['size']} bytes), but rank 0 finds {seen} in "
                    f"{self.root}: every rank must save to the same directory, shared by all nodes")
        m = {"schema": SCHEMA, "step": step, "world_size": world, "mode": mode, "files": files,
             "created": rfc3339(time.time_ns())}
        _write_file(os.path.join(self.root, step_dir(step), MANIFEST), marshal_manifest(m))
        _write_file(os.path.join(self.root, LATEST), format_latest(step))

    def keep(self, n):
        """Deletes old steps as ckpt.Keep does: of the steps at or below the
        one the latest marker names, keeps the newest n that have a manifest
        and the named one; deletes the others (manifest first). Steps above
        the marker are commits in progress: never touched. Returns the
        deleted steps."""
        latest = self.latest_marker()
        if latest is None:
            return []
        doomed, kept = [], 0
        for s in reversed(self.steps()):
            if s > latest:
                continue
            if os.path.exists(os.path.join(self.root, step_dir(s), MANIFEST)) and kept < n:
                kept += 1
                continue
            if s != latest:
                doomed.append(s)
        doomed.sort()
        for s in doomed:
            self._delete_step(s)
        return doomed

    def _delete_step(self, step):
        d = os.path.join(self.root, step_dir(step))
        try:
            os.unlink(os.path.join(d, MANIFEST))
        except FileNotFoundError:
            pass
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            return
        for name in names:
            p = os.path.join(d, name)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
        try:
            os.rmdir(d)
        except OSError:
            pass  # not empty: a write racing the delete

    # Reading.

    def latest_marker(self):
        """The step the latest marker names; None without one; Corrupt if
        it is unreadable."""
        try:
            with open(os.path.join(self.root, LATEST), "rb") as f:
                raw = f.read(64)
        except FileNotFoundError:
            return None
        return parse_latest(raw)

    def steps(self):
        """The steps that have a directory, in increasing order."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        steps = [parse_step_dir(name) for name in names]
        return sorted(s for s, name in zip(steps, names)
                      if s is not None and os.path.isdir(os.path.join(self.root, name)))

    def source(self, rank, world, dist, verify):
        """What load (verify: the data read and checked) or latest_step
        (not: manifests and file sizes only) takes, agreed by the ranks: the
        newest of the snapshot in memory, if every rank holds the same step,
        and the newest step in storage that validates for every rank.
        Returns (step, buffer, length), buffer None without verify, or
        None."""
        mem = self.mem_step
        if dist is not None:
            held = _gather(dist, world, mem)
            mem = mem if all(s == mem for s in held) else None
        if self.root is not None:
            found = self._find(rank, world, dist, mem, verify)
            if found is not None:
                return found
        if mem is not None:
            return mem, self.buf, self.mem_len
        return None

    def _find(self, rank, world, dist, floor, verify):
        """The newest step above floor valid for every rank: each rank
        proposes its newest valid step at or below the bound, and the bound
        drops to the lowest proposal until they all match."""
        bound, checked = None, {}
        while True:
            got, steps = _collective(dist, world, f"finding a checkpoint in {self.root}",
                                     lambda: self._newest(rank, floor, bound, verify, checked),
                                     share=lambda got: got[0] if got else None)
            if None in steps:
                return None
            bound = min(steps)
            if max(steps) == bound:
                return got
            for s in checked:  # free the data of steps above the bound: never taken now
                if s > bound and checked[s]:
                    checked[s] = True

    def _newest(self, rank, floor, bound, verify, checked):
        try:
            latest = self.latest_marker()
        except Corrupt as e:
            warnings.warn(f"{self.root}: {e}; taking the newest step that validates", stacklevel=5)
            latest = MAX_INT64
        if latest is None:
            return None
        candidates = [] if latest == MAX_INT64 else [latest]
        candidates += [s for s in reversed(self.steps()) if s < latest]
        for s in candidates:
            if bound is not None and s > bound:
                continue
            if floor is not None and s <= floor:
                break
            if s in checked:
                if checked[s] is False:
                    continue
                if checked[s] is not True:
                    return checked[s]
            try:
                checked[s] = self._check(s, rank, verify)
            except Corrupt as e:
                checked[s] = False
                warnings.warn(f"checkpoint step {s} in {self.root} is not restored: {e}", stacklevel=5)
                continue
            return checked[s]
        return None

    def _check(self, step, rank, verify):
        """Checks step's manifest and the sizes of all its files; with
        verify, reads this rank's file (in replicated mode the first of the
        files, by rank, that validates) and checks its CRC32C and header.
        Returns (step, data or None, length)."""
        try:
            with open(os.path.join(self.root, step_dir(step), MANIFEST), "rb") as f:
                raw = f.read(16 << 20)
        except FileNotFoundError:
            raise Corrupt("no manifest") from None
        m = parse_manifest(raw)
        if m["step"] != step:
            raise Corrupt(f"the manifest in the directory of step {step} is for step {m['step']}")
        for f in m["files"]:
            try:
                size = os.stat(os.path.join(self.root, f["path"])).st_size
            except FileNotFoundError:
                raise Corrupt(f"rank {f['rank']} file {f['path']} is missing") from None
            if size != f["size"]:
                raise Corrupt(f"rank {f['rank']} file {f['path']} has {size} bytes, the manifest says {f['size']}")
        if m["mode"] == "replicated":
            mine = m["files"]
        else:
            mine = [f for f in m["files"] if f["rank"] == rank]
            if not mine:
                raise ValueError(f"checkpoint step {step} in {self.root} was saved sharded by {m['world_size']} "
                                 f"ranks: rank {rank} has no file in it")
        if not verify:
            return step, None, 0
        reasons = []
        for f in mine:
            try:
                data = self._read(f, step)
            except Corrupt as e:
                reasons.append(str(e))
                continue
            return step, data, len(data)
        raise Corrupt("; ".join(reasons))

    def _read(self, f, step):
        path = os.path.join(self.root, f["path"])
        try:
            file = open(path, "rb", buffering=0)
        except FileNotFoundError:
            raise Corrupt(f"rank {f['rank']} file {f['path']} is missing") from None
        with file:
            buf = _memory(f["size"])
            view, n = memoryview(buf), 0
            while n < len(buf):
                k = file.readinto(view[n:])
                if not k:
                    break
                n += k
            view.release()
            if n != len(buf) or file.read(1):
                raise Corrupt(f"rank {f['rank']} file {f['path']} does not have the {f['size']} bytes "
                              "the manifest says")
        crc = crc32c(buf)
        if crc != f["crc32c"]:
            raise Corrupt(f"rank {f['rank']} file {f['path']} has CRC32C {crc:08x}, "
                          f"the manifest says {f['crc32c']:08x}")
        meta = check_safetensors(buf)
        for key, want in (("rover.step", step), ("rover.rank", f["rank"])):
            if key in meta and meta[key] != str(want):
                raise Corrupt(f"rank {f['rank']} file {f['path']}: metadata {key}={meta[key]!r}, want {want}")
        return buf


def _memory(size):
    """size bytes of zeroed private memory, every page faulted in up front
    by the kernel (MAP_POPULATE), as the agent's arena is: 0.25 s per GiB on
    a VM that charges each first touch of a page, against 4 s for
    bytearray's page-by-page faults."""
    if size == 0:
        return bytearray(0)
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0))


def _ensure_dir(path):
    """Creates path and its missing parents, fsyncing the parent of each one
    it creates so that the new entry survives a machine crash."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent != path:
        _ensure_dir(parent)
    try:
        os.mkdir(path)
    except FileExistsError:
        return  # another rank made it
    _fsync_dir(parent)


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path, data):
    """Writes data to path atomically and durably: a temporary file in the
    same directory (named as gocloud's fileblob names its own), fsynced,
    renamed over path; then the directory is fsynced."""
    d, name = os.path.split(path)
    tmp = os.path.join(d, "%s.%x%x.tmp" % (name, time.time_ns(), os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        try:
            with memoryview(data) as mv, mv.cast("B") as view:
                off = 0
                while off < len(view):
                    off += os.write(fd, view[off:off + (1 << 30)])
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(d)
