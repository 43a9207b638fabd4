"""Checkpoint extras: the non-tensor part of a saved state, as typed JSON.

A state is a nested structure of tensors and plain values. Its tensors are
safetensors entries of their own; the rest, with a reference in place of
each tensor, is one JSON document, stored as the 1-D U8 entry
``__rover_extra__``. The set of types is closed: decoding builds only the
types below and never imports, looks up or calls anything that the data
names, so loading a checkpoint cannot run code, as unpickling one could.
docs/flash-checkpoint.md describes the format for users.

The document is ``{"rover_extras": 1, "state": VALUE}``, where a VALUE is

    null, true, false, "string"       None, bool, str
    a JSON integer                    int in [-2**63, 2**63)
    a JSON number with "." or "e"     finite float (its repr: exact)
    [VALUE, ...]                      list
    {"key": VALUE, ...}               dict whose keys are str, none starting with "$"
    {"$int": "-0x1f"}                 any other int, in hex
    {"$float": "nan"}                 "inf", "-inf" or "nan"
    {"$bytes": "aGk="}                bytes (base64)
    {"$tuple": [VALUE, ...]}          tuple
    {"$dict": [[KEY, VALUE], ...]}    any other dict (KEY: a VALUE of type None,
                                      bool, int, float or str)
    {"$od": [[KEY, VALUE], ...]}      collections.OrderedDict
    {"$sd": [[[KEY, VALUE], ...], VALUE]}  an OrderedDict with torch's
                                      ``_metadata`` (a module's state_dict)
    {"$tensor": "state.model.w"}      the tensor stored under that name
    {"$dtype": "float32"}             torch.dtype
    {"$size": [2, 3]}                 torch.Size

An object with a key that starts with "$" is a tag and has no other key.
Subclasses of bool, int, float, str, bytes, list, tuple and dict (an
IntEnum, numpy.float64, a namedtuple) are saved as their base type. Values
nest at most MAX_DEPTH levels. Standard library only; torch is passed in.
"""

import base64
import binascii
import collections
import itertools
import json
import math
import re

__all__ = ["ExtrasError", "MAX_DEPTH", "VERSION", "encode", "decode", "tensors_of"]

VERSION = 1
#: How deep values may nest. A state deeper than this (or one that contains
#: itself) is refused by save; a document deeper than this by load.
MAX_DEPTH = 100
# Each value level is at most 4 JSON levels ($sd: object, list, pairs, pair).
_MAX_JSON_DEPTH = 4 * (MAX_DEPTH + 2)
_INT64 = 1 << 63

SUPPORTED = ("tensors, None, bool, int, float, str, bytes, list, tuple, dict (keys: str, int, float, bool "
             "or None), OrderedDict, torch.dtype and torch.Size")


class ExtrasError(ValueError):
    """A checkpoint's non-tensor state that is not a valid extras document:
    never loaded, and nothing in it is run."""


def _json_compatible_key(k):
    """k (a dict key) as a saved key, or raise TypeError."""
    if k is None or isinstance(k, bool):
        return None if k is None else bool(k)
    if isinstance(k, int):
        return int.__int__(k)
    if isinstance(k, float):
        return float.__float__(k)
    if isinstance(k, str):
        return str.__str__(k)
    raise TypeError


class _Encoder:
    """Walks a state: collects its tensors as (name, tensor) and builds the
    JSON-ready value. strict: raise TypeError on a value outside the closed
    set (save); otherwise ignore it (load's ``into``, whose tensors only are
    wanted)."""

    def __init__(self, torch, strict):
        self.torch, self.strict = torch, strict
        self.tensors, self._names = [], set()

    def _unsupported(self, obj, path, what="a"):
        t = type(obj)
        name = t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
        hint = ""
        if t.__module__ == "numpy":
            hint = " (convert numpy values with torch.from_numpy or .tolist())"
        raise TypeError(f"{path}: cannot checkpoint {what} {name}{hint}: a checkpoint holds {SUPPORTED}; "
                        "convert the value or leave it out of the state")

    def _tensor_name(self, path):
        name, n = path, 1
        while name in self._names:  # {"a.b": x, "a": {"b": y}} names two "state.a.b"
            name, n = f"{path}~{n}", n + 1
        self._names.add(name)
        return name

    def _pairs(self, items, path, depth):
        out = []
        for k, v in items:
            try:
                key = _json_compatible_key(k)
            except TypeError:
                if not self.strict:
                    continue
                self._unsupported(k, f"{path}.{k!r}"[:200], "a dict key of type")
            out.append([self._scalar(key), self.value(v, f"{path}.{k}", depth + 1)])
        return out

    @staticmethod
    def _scalar(x):
        if type(x) is float and not math.isfinite(x):
            return {"$float": "nan" if x != x else ("inf" if x > 0 else "-inf")}
        if type(x) is int and not -_INT64 <= x < _INT64:
            return {"$int": hex(x)}
        return x

    def value(self, obj, path="state", depth=0):
        torch = self.torch
        if depth > MAX_DEPTH:
            if not self.strict:
                return None
            raise ValueError(f"{path[:200]}...: the state nests deeper than {MAX_DEPTH} levels "
                             "(or contains itself), which a checkpoint cannot hold")
        if isinstance(obj, torch.Tensor):
            name = self._tensor_name(path)
            self.tensors.append((name, obj.detach()))
            return {"$tensor": name}
        if obj is None or isinstance(obj, bool):
            return None if obj is None else bool(obj)
        if isinstance(obj, int):
            return self._scalar(int.__int__(obj))
        if isinstance(obj, float):
            return self._scalar(float.__float__(obj))
        if isinstance(obj, str):
            return str.__str__(obj)
        if isinstance(obj, bytes):
            return {"$bytes": base64.b64encode(obj).decode("ascii")}
        if isinstance(obj, torch.dtype):
            return {"$dtype": str(obj).removeprefix("torch.")}
        if isinstance(obj, torch.Size):
            return {"$size": list(obj)}
        if isinstance(obj, list):
            return [self.value(v, f"{path}.{i}", depth + 1) for i, v in enumerate(obj)]
        if isinstance(obj, tuple):
            return {"$tuple": [self.value(v, f"{path}.{i}", depth + 1) for i, v in enumerate(obj)]}
        if isinstance(obj, collections.OrderedDict):
            pairs = self._pairs(obj.items(), path, depth)
            meta = getattr(obj, "_metadata", None)
            if meta is None:
                return {"$od": pairs}
            return {"$sd": [pairs, self.value(meta, f"{path}._metadata", depth + 1)]}
        if isinstance(obj, dict):
            if all(type(k) is str and not k.startswith("$") for k in obj):
                return {k: self.value(v, f"{path}.{k}", depth + 1) for k, v in obj.items()}
            return {"$dict": self._pairs(obj.items(), path, depth)}
        if self.strict:
            self._unsupported(obj, path)
        return None


def encode(state, torch):
    """(extras bytes, [(name, tensor)]) of state, tensors in the order
    found. TypeError names the path of a value outside the closed set."""
    enc = _Encoder(torch, strict=True)
    doc = {"rover_extras": VERSION, "state": enc.value(state)}
    raw = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode("ascii")
    return raw, enc.tensors


def tensors_of(state, torch):
    """[(name, tensor)] of state's tensors, named as encode names them;
    values outside the closed set are ignored."""
    enc = _Encoder(torch, strict=False)
    enc.value(state)
    return enc.tensors


# Nesting check before json.loads, whose recursion is Python's: strings
# (which may hold brackets) are dropped, then every byte but a bracket.
_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_DELTA = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_HEX_INT = re.compile(r"-?0x[0-9a-f]+\Z")


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON (non-finite floats are {{\"$float\": ...}})")


def _object(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"duplicate key {k!r}")
        d[k] = v
    return d


class _Decoder:
    def __init__(self, tensors, torch):
        self.tensors, self.torch = tensors, torch
        self.dtypes = {str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.dtype)}

    def value(self, v, path, depth):
        if depth > MAX_DEPTH:
            raise ExtrasError(f"{path[:200]}...: nested deeper than {MAX_DEPTH} levels")
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, list):
            return [self.value(x, f"{path}.{i}", depth + 1) for i, x in enumerate(v)]
        tags = [k for k in v if k.startswith("$")]
        if not tags:
            return {k: self.value(x, f"{path}.{k}", depth + 1) for k, x in v.items()}
        if len(v) != 1:
            raise ExtrasError(f"{path}: the tag {tags[0]!r} has other keys beside it")
        (tag, arg), = v.items()
        handler = _TAGS.get(tag)
        if handler is None:
            raise ExtrasError(f"{path}: unknown tag {tag!r} (extras format {VERSION} has {', '.join(_TAGS)})")
        return handler(self, arg, path, depth)

    def _want(self, ok, tag, arg, path, want):
        if not ok:
            raise ExtrasError(f"{path}: {tag} takes {want}, not {json.dumps(arg)[:100]}")

    def _int(self, arg, path, depth):
        self._want(isinstance(arg, str) and _HEX_INT.match(arg), "$int", arg, path, 'a hex string like "-0x1f"')
        return int(arg, 16)

    def _float(self, arg, path, depth):
        self._want(arg in ("inf", "-inf", "nan"), "$float", arg, path, '"inf", "-inf" or "nan"')
        return float(arg)

    def _bytes(self, arg, path, depth):
        self._want(isinstance(arg, str), "$bytes", arg, path, "a base64 string")
        try:
            return base64.b64decode(arg, validate=True)
        except binascii.Error as e:
            raise ExtrasError(f"{path}: $bytes is not base64: {e}") from None

    def _tuple(self, arg, path, depth):
        self._want(isinstance(arg, list), "$tuple", arg, path, "a list")
        return tuple(self.value(x, f"{path}.{i}", depth + 1) for i, x in enumerate(arg))

    def _pairs(self, arg, tag, path, depth, into):
        self._want(isinstance(arg, list) and all(isinstance(p, list) and len(p) == 2 for p in arg),
                   tag, arg, path, "a list of [key, value] pairs")
        for k, x in arg:
            key = self.value(k, f"{path}.<key>", depth + 1)
            if not (key is None or isinstance(key, (bool, int, float, str))):
                raise ExtrasError(f"{path}: a {tag} key must be None, bool, int, float or str, not {json.dumps(k)[:100]}")
            if key in into:
                raise ExtrasError(f"{path}: duplicate key {key!r}")
            into[key] = self.value(x, f"{path}.{key}", depth + 1)
        return into

    def _dict(self, arg, path, depth):
        return self._pairs(arg, "$dict", path, depth, {})

    def _od(self, arg, path, depth):
        return self._pairs(arg, "$od", path, depth, collections.OrderedDict())

    def _sd(self, arg, path, depth):
        self._want(isinstance(arg, list) and len(arg) == 2, "$sd", arg, path, "[pairs, metadata]")
        d = self._pairs(arg[0], "$sd", path, depth, collections.OrderedDict())
        d._metadata = self.value(arg[1], f"{path}._metadata", depth + 1)
        return d

    def _tensor(self, arg, path, depth):
        self._want(isinstance(arg, str), "$tensor", arg, path, "a tensor name")
        t = self.tensors.get(arg)
        if t is None:
            raise ExtrasError(f"{path}: refers to tensor {arg!r}, which the checkpoint file does not hold")
        return t

    def _dtype(self, arg, path, depth):
        dt = self.dtypes.get(arg) if isinstance(arg, str) else None
        self._want(dt is not None, "$dtype", arg, path, "the name of a torch dtype")
        return dt

    def _size(self, arg, path, depth):
        self._want(isinstance(arg, list) and all(type(d) is int and 0 <= d < _INT64 for d in arg),
                   "$size", arg, path, "a list of sizes")
        return self.torch.Size(arg)


_TAGS = {"$int": _Decoder._int, "$float": _Decoder._float, "$bytes": _Decoder._bytes, "$tuple": _Decoder._tuple,
         "$dict": _Decoder._dict, "$od": _Decoder._od, "$sd": _Decoder._sd, "$tensor": _Decoder._tensor,
         "$dtype": _Decoder._dtype, "$size": _Decoder._size}


def decode(raw, tensors, torch):
    """The state that encode saved as raw, with its tensors from tensors (by
    name). ExtrasError says what is wrong with a document that is not one
    encode writes; nothing in it is ever run."""
    raw = bytes(raw)
    if raw[:1] == b"\x80":  # pickle's PROTO opcode: what Rover wrote before the JSON format
        raise ExtrasError("the non-tensor state was written by an older Rover with pickle, which can run "
                          "arbitrary code when loaded, so it is not loaded; save the state again with this "
                          "Rover (its tensors can still be read with any safetensors reader)")
    depths = itertools.accumulate(map(_DELTA.__getitem__, _STRINGS.sub(b"", raw).translate(None, _NOT_BRACKETS)))
    if max(depths, default=0) > _MAX_JSON_DEPTH:
        raise ExtrasError(f"the non-tensor state nests deeper than {MAX_DEPTH} levels")
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_object, parse_constant=_reject_constant)
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError too
        raise ExtrasError(f"the non-tensor state is not valid JSON: {e}") from None
    if not isinstance(doc, dict) or "rover_extras" not in doc:
        raise ExtrasError("the non-tensor state is not a Rover extras document (no \"rover_extras\" version)")
    version = doc["rover_extras"]
    if type(version) is not int or version != VERSION:
        raise ExtrasError(f"the non-tensor state has extras format version {json.dumps(version)[:20]}; this Rover "
                          f"reads version {VERSION} (a newer Rover wrote it?)")
    if set(doc) != {"rover_extras", "state"}:
        raise ExtrasError(f"the extras document has fields {sorted(doc)}, want rover_extras and state")
    return _Decoder(tensors, torch).value(doc["state"], "state", 0)
