"""The persisted checkpoint format, as internal/ckpt defines it
(manifest.go, format.go): the names of the layout, the manifest and its
validation, the latest marker, and the checks a safetensors file must pass
before it is loaded. No I/O; standard library only.

    <root>/step-000000000042/rank-00000.safetensors   one file per rank
    <root>/step-000000000042/manifest.json            sizes and CRC32Cs
    <root>/latest                                     "42\n": the commit point
"""

import json
import re
import time

SCHEMA = 1
LATEST = "latest"
MANIFEST = "manifest.json"
MAX_INT64 = (1 << 63) - 1
_STEP_DIR = re.compile(r"step-([0-9]+)\Z")
_RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})\Z")
_MANIFEST_FIELDS = ("schema", "step", "world_size", "mode", "files", "created")
_FILE_FIELDS = ("rank", "path", "size", "crc32c")
# Element sizes of the safetensors dtypes that internal/ckpt reads.
_DTYPE_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
                "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
_EXTRA = "__rover_extra__"


class Corrupt(Exception):
    """A step, manifest or file that does not validate: never loaded."""


def step_dir(step):
    return "step-%012d" % step


def rank_path(step, rank):
    return "%s/rank-%05d.safetensors" % (step_dir(step), rank)


def parse_step_dir(name):
    """The step of a directory name that step_dir writes, else None."""
    m = _STEP_DIR.match(name)
    if not m or step_dir(int(m.group(1))) != name or int(m.group(1)) > MAX_INT64:
        return None
    return int(m.group(1))


def format_latest(step):
    return b"%d\n" % step


def parse_latest(raw):
    """The step a latest marker names: decimal digits and a newline (one
    without is taken as torn); Corrupt otherwise."""
    s = raw[:-1]
    if not raw.endswith(b"\n") or not s or not s.isdigit() or int(s) > MAX_INT64:
        raise Corrupt(f"latest marker {raw!r}: want a step number and a newline")
    return int(s)


def marshal_manifest(m):
    """Validates m and encodes it as ckpt.MarshalManifest does: indented by
    two spaces, fields in the Go struct's order, a final newline."""
    validate_manifest(m)
    return (json.dumps(m, indent=2) + "\n").encode()


def rfc3339(ns):
    """ns since the epoch as Go's time.Time marshals it in UTC (RFC 3339,
    trailing zeros of the fraction dropped)."""
    sec, frac = divmod(ns, 1_000_000_000)
    s = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
    return s + (("." + "%09d" % frac).rstrip("0") if frac else "") + "Z"


def _is_int(x, lo, hi):
    return type(x) is int and lo <= x <= hi


def parse_manifest(raw):
    """Decodes and validates a manifest as ckpt.ParseManifest does: unknown
    fields, trailing data and anything validate_manifest rejects are
    Corrupt."""
    try:
        m = json.loads(raw.decode("utf-8"))
    except ValueError as e:
        raise Corrupt(f"manifest: {e}") from None
    if not isinstance(m, dict):
        raise Corrupt("manifest: not a JSON object")
    for k in m:
        if k not in _MANIFEST_FIELDS:
            raise Corrupt(f"manifest: unknown field {k!r}")
    files = m.get("files") or []
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise Corrupt("manifest: files is not a list of objects")
    for f in files:
        for k in f:
            if k not in _FILE_FIELDS:
                raise Corrupt(f"manifest: unknown field {k!r} in files")
    m = {"schema": m.get("schema", 0), "step": m.get("step", 0), "world_size": m.get("world_size", 0),
         "mode": m.get("mode", ""), "files": [{k: f.get(k, "" if k == "path" else 0) for k in _FILE_FIELDS} for f in files],
         "created": m.get("created")}
    try:
        validate_manifest(m)
    except ValueError as e:
        raise Corrupt(str(e)) from None
    return m


def validate_manifest(m):
    """Raises ValueError unless m is a well-formed manifest, by the rules of
    ckpt.Manifest.Validate."""
    for k in ("schema", "step", "world_size"):
        if not _is_int(m[k], -(1 << 63), MAX_INT64):
            raise ValueError(f"manifest {k} {m[k]!r} is not an integer")
    created = m["created"]
    if created is not None and not (isinstance(created, str) and _RFC3339.match(created)):
        raise ValueError(f"manifest created {created!r} is not an RFC 3339 time")
    step, world, files = m["step"], m["world_size"], m["files"]
    if m["schema"] != SCHEMA:
        raise ValueError(f"manifest schema {m['schema']}, this version reads {SCHEMA}")
    if step < 0:
        raise ValueError(f"manifest step {step} is negative")
    if world < 1:
        raise ValueError(f"manifest world size {world}")
    if m["mode"] not in ("sharded", "replicated"):
        raise ValueError(f"manifest mode {m['mode']!r}: want 'sharded' or 'replicated'")
    if not files:
        raise ValueError(f"manifest of step {step} lists no files")
    if m["mode"] == "sharded" and len(files) != world:
        raise ValueError(f"sharded manifest of step {step} lists {len(files)} files for world size {world}")
    prev = -1
    for f in files:
        rank, path, size, crc = f["rank"], f["path"], f["size"], f["crc32c"]
        if not (_is_int(rank, 0, world - 1) and _is_int(size, 0, MAX_INT64) and _is_int(crc, 0, 0xFFFFFFFF)):
            raise ValueError(f"manifest file {f!r}: rank, size or crc32c out of range")
        if rank <= prev:
            raise ValueError(f"manifest files not sorted by rank, or rank {rank} twice")
        if path != rank_path(step, rank):
            raise ValueError(f"manifest file of rank {rank} has path {path!r}, want {rank_path(step, rank)!r}")
        prev = rank


def _no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"duplicate key {k!r}")
        d[k] = v
    return d


def check_safetensors(buf):
    """Validates a safetensors file as ckpt.Decode does (header length, JSON,
    dtypes and shapes, tensors that tile the data exactly) and returns its
    metadata; Corrupt otherwise."""
    if len(buf) < 8:
        raise Corrupt(f"safetensors file of {len(buf)} bytes is shorter than its header length")
    n = int.from_bytes(buf[:8], "little")
    if n > 100_000_000 or n > len(buf) - 8:
        raise Corrupt(f"safetensors header length {n} does not fit a file of {len(buf)} bytes")
    try:
        header = json.loads(bytes(buf[8:8 + n]).decode("utf-8"), object_pairs_hook=_no_duplicates)
    except ValueError as e:
        raise Corrupt(f"safetensors header: {e}") from None
    if not isinstance(header, dict) or not bytes(buf[8:9]) == b"{":
        raise Corrupt("safetensors header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise Corrupt("safetensors __metadata__ is not an object of strings")
    spans = []
    for name, info in header.items():
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            size = _DTYPE_SIZES[dtype]
            for d in shape:
                if not _is_int(d, 0, MAX_INT64):
                    raise ValueError(d)
                size *= d
            ok = name and _is_int(begin, 0, MAX_INT64) and _is_int(end, begin, MAX_INT64) and end - begin == size
            if name == _EXTRA:
                ok = ok and dtype == "U8" and len(shape) == 1
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise Corrupt(f"safetensors tensor {name!r}: bad dtype, shape or data_offsets {info!r}")
        spans.append((begin, end, name))
    off = 0
    for begin, end, name in sorted(spans):
        if begin != off:
            raise Corrupt(f"tensor {name!r} starts at {begin}, want {off} (gap or overlap)")
        off = end
    if off != len(buf) - 8 - n:
        raise Corrupt(f"the tensors fill {off} of the file's {len(buf) - 8 - n} data bytes")
    return meta
