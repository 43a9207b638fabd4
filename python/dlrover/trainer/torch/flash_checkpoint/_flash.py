"""What DDP and FSDP checkpointers share: a ``rover.checkpoint.Checkpointer``
opened for DLRover's ``checkpoint_dir``, waiting with a timeout, and reading
checkpoints that DLRover itself wrote.

DLRover's layout (what its DDP checkpointer writes by default):
``<checkpoint_dir>/dlrover_latest.txt`` holds the newest complete step, and
``<checkpoint_dir>/<step>/rank_<r>.pt`` is rank r's state dict, a file of
``torch.save``. Those files are pickles; they are read with an unpickler
that builds only tensors, containers and plain values and refuses any other
class or function, so reading one cannot run code: PyTorch's own
``torch.load(weights_only=True)``, or, where that cannot read a float
(torch 1.13), the same file format read with ``_SafeUnpickler``.
"""

import os
import pickle
import threading
import types

from rover.checkpoint import Checkpointer as _RoverCheckpointer

TRACKER = "dlrover_latest.txt"
_MODEL_STATES = "model_states"  # DLRover's wrapper key in some of its files


def open_checkpointer(who, checkpoint_dir, mode, storage=None, deletion_strategy=None):
    """A rover Checkpointer for checkpoint_dir, or ValueError saying what to
    change. Under ``rover run`` the first checkpointer of a job that names
    a directory declares it the job's storage when the launcher gave no
    ``--checkpoint-dir``; a launcher's directory wins and a different one is
    refused. DLRover's storage objects have no Rover equivalent;
    KeepLatestStepStrategy(n) declares keep=n the same way."""
    if storage is not None:
        raise ValueError(f"{who}(storage={storage!r}): Rover writes checkpoints through the agent to the "
                         "job's storage (rover run --checkpoint-dir DIR_OR_URL, a directory or an s3://, "
                         "gs:// or azblob:// URL); leave storage out")
    keep = keep_of(who, deletion_strategy)
    if not checkpoint_dir:
        raise ValueError(f"{who}: checkpoint_dir is empty; give a checkpoint directory (or the "
                         "job's: rover run --checkpoint-dir)")
    try:
        return _RoverCheckpointer(checkpoint_dir, mode=mode, keep=keep)
    except ValueError as e:
        asked = f", deletion_strategy=KeepLatestStepStrategy({keep}, ...)" if keep is not None else ""
        raise ValueError(f"{who}({checkpoint_dir!r}{asked}): {e}") from None


def keep_of(who, deletion_strategy):
    """The committed steps to keep that deletion_strategy asks for (None: no
    strategy), or ValueError when Rover has no equivalent of it
    (dlrover.python.common.storage)."""
    if deletion_strategy is None:
        return None
    from dlrover.python.common.storage import KeepLatestStepStrategy

    if type(deletion_strategy) is KeepLatestStepStrategy:
        return deletion_strategy.max_to_keep
    raise ValueError(f"{who}(deletion_strategy={deletion_strategy!r}): Rover keeps the newest committed "
                     "steps only (rover run --checkpoint-keep N, 0: all, or KeepLatestStepStrategy(N, dir)); "
                     "leave deletion_strategy out")


SAVE_TIMEOUT = 600  # DLRover's default save_timeout, in seconds (accepted, unused)


def check_args(who, **args):
    """ValueError naming the first of DLRover's numeric arguments that is not
    what DLRover takes: shard counts 1 or more, replica_count 0 or more,
    save_timeout a positive number of seconds."""
    for name, value in args.items():
        least = 0 if name == "replica_count" else 1
        kind = float if name == "save_timeout" else int
        try:
            ok = value is not None and not isinstance(value, bool) and kind(value) == value and value >= least
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"{who}({name}={value!r}): {name} must be {'a number' if kind is float else 'an integer'} "
                             f"of {least} or more")


class StepState(dict):
    """The state dict a load returns, knowing the step it was saved as: when
    the state has no ``"step"`` of its own, ``state["step"]``,
    ``state.get("step")`` and ``"step" in state`` answer that step, while
    its keys (what ``model.load_state_dict(state)`` iterates) stay the ones
    saved. So ``step = state.get("step", 0)`` resumes at the saved step
    even when the script left it out of a save (DLRover's examples do)."""

    def __init__(self, state, step):
        super().__init__(state)
        if hasattr(state, "_metadata"):  # a module's state dict: load_state_dict reads it
            self._metadata = state._metadata
        self.saved_step = step

    def __missing__(self, key):
        if key == "step" and self.saved_step is not None:
            return self.saved_step
        raise KeyError(key)

    def get(self, key, default=None):
        if key == "step" and not dict.__contains__(self, key) and self.saved_step is not None:
            return self.saved_step
        return dict.get(self, key, default)

    def __contains__(self, key):
        return dict.__contains__(self, key) or (key == "step" and self.saved_step is not None)


def with_step(state, step):
    """state as a StepState of step; a state that is not a dict as it is."""
    if isinstance(state, dict) and step is not None:
        return StepState(state, int(step))
    return state


def wait(ckpt, who, timeout):
    """ckpt.wait() for at most timeout seconds (None: no limit); returns the
    newest step this rank made durable (None: no save asked for it). Raises
    what wait raises, and TimeoutError when the time runs out."""
    box = {}

    def run():
        try:
            box["step"] = ckpt.wait()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=run, name="rover-ckpt-wait", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise TimeoutError(f"{who}.wait_latest_checkpoint: the checkpoint was not persisted within "
                           f"{timeout} s; the agent's log says why (slow or unreachable storage), "
                           "or give a longer timeout")
    if "error" in box:
        raise box["error"]
    return box.get("step")


def _unwrap(state):
    if isinstance(state, dict) and list(state) == [_MODEL_STATES]:
        return state[_MODEL_STATES]
    return state


# What a state dict's pickle may name: containers, and torch's functions
# that rebuild tensors, storages, sizes and dtypes from their bytes.
_ALLOWED = {
    ("collections", "OrderedDict"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch", "Size"),
    ("torch", "device"),
    ("torch.storage", "UntypedStorage"),
    ("torch.storage", "TypedStorage"),
    ("torch.serialization", "_get_layout"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "complex"),
}


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        import torch

        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and (name.endswith("Storage") or isinstance(getattr(torch, name, None), torch.dtype)):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not a tensor, container or plain value")


_safe_pickle = types.SimpleNamespace(Unpickler=_SafeUnpickler, load=lambda f, **kw: _SafeUnpickler(f, **kw).load(),
                                     __name__="rover_safe_pickle")


def load_pt(path):
    """The state dict in a DLRover (torch.save) file, read without running
    code; ValueError when the file holds more than tensors, containers and
    plain values."""
    import torch

    try:
        return _unwrap(torch.load(path, map_location="cpu", weights_only=True))
    except pickle.UnpicklingError as e:
        first = e
    # torch 1.13's weights_only unpickler refuses floats (any optimizer's
    # state has some); read the zip format with _SafeUnpickler instead.
    # torch.load itself ignores pickle_module there, hence its _load.
    try:
        with torch.serialization._open_zipfile_reader(path) as z:
            return _unwrap(torch.serialization._load(z, "cpu", _safe_pickle, encoding="utf-8"))
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError) as e:
        raise ValueError(
            f"cannot read {path} safely: it holds more than tensors, containers and plain values ({e}; "
            f"torch.load(weights_only=True): {str(first)[-120:]}). If you trust the file, load it yourself "
            "with torch.load(path, weights_only=False) and save it again with save_checkpoint") from None


def _rank_file(step_dir, rank):
    for r in (rank, 0):  # a replicated model: rank 0's file restores every rank
        path = os.path.join(step_dir, f"rank_{r}.pt")
        if os.path.isfile(path):
            return path
    return None


def dlrover_step(checkpoint_dir):
    """The step that DLRover's tracker file in checkpoint_dir names, or None."""
    if "://" in checkpoint_dir:
        return None
    try:
        with open(os.path.join(checkpoint_dir, TRACKER)) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{os.path.join(checkpoint_dir, TRACKER)} holds {text[:40]!r}, not a step number; "
                         "remove it, or pass load_checkpoint(resume_path=FILE)") from None


def load_dlrover(path, rank):
    """(step or None, state) of a DLRover checkpoint at path: a .pt file; a
    directory with DLRover's tracker file (the step it names); or one step's
    directory of rank_<r>.pt files. None when path holds none of these."""
    if os.path.isfile(path):
        return None, load_pt(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"resume_path {path!r} does not exist")
    step = dlrover_step(path)
    step_dir = os.path.join(path, str(step)) if step is not None else path
    f = _rank_file(step_dir, rank)
    if f is None:
        if step is not None:
            raise FileNotFoundError(f"{os.path.join(path, TRACKER)} names step {step}, but "
                                    f"{step_dir} has no rank_{rank}.pt or rank_0.pt; pass "
                                    "load_checkpoint(resume_path=FILE) with the file that step was saved to")
        return None
    return step, load_pt(f)
