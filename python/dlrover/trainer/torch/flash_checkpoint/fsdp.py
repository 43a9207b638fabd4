"""DLRover's ``FsdpShardCheckpointer`` over ``rover.checkpoint.Checkpointer``.

    checkpointer = FsdpShardCheckpointer("/checkpoints/run1")  # the job's --checkpoint-dir
    extra = checkpointer.load_checkpoint(model, optimizer)     # {} when there is none
    ...
    checkpointer.save_checkpoint(step, model, optimizer, {"epoch": epoch},
                                 storage_type=StorageType.MEMORY)

Every rank saves its own shard (Rover's sharded mode): the model's
``SHARDED_STATE_DICT`` with each sharded tensor reduced to this rank's local
shard, the optimizer's own ``state_dict()`` (over this rank's flat
parameters) and the extra values. A load copies the shards back into the
model's sharded tensors in place, so it needs the sharding of the save: the
same world size and wrapping. DLRover's older form,
``save_checkpoint(step, state_dict, path, storage_type)`` with a state dict
built under ``SHARDED_STATE_DICT``, saves the same way; its
``get_storage_reader()`` (torch.distributed.checkpoint) is not provided.

Needs a PyTorch whose ``torch.distributed.fsdp`` imports: the constructor
raises RuntimeError, saying why, otherwise (Debian's torch 1.13 on Python
3.11 cannot import it).
"""

import sys

from .checkpointer import Checkpointer, StorageType, persist_of
from . import _flash

__all__ = ["FsdpFullCheckpointer", "FsdpShardCheckpointer", "StorageType"]


def _fsdp(who="FsdpShardCheckpointer"):
    """(FullyShardedDataParallel, StateDictType), or RuntimeError naming why
    this PyTorch has no FSDP and what to do."""
    import torch

    try:
        from torch.distributed.fsdp import FullyShardedDataParallel, StateDictType
        if who == "FsdpFullCheckpointer":  # PyTorch 2.0's full optimizer state dicts
            from torch.distributed.fsdp import FullStateDictConfig  # noqa: F401
            from torch.distributed.fsdp.api import FullOptimStateDictConfig  # noqa: F401
    except Exception as e:  # ImportError, or a module that fails while importing
        raise RuntimeError(
            f"{who} needs torch.distributed.fsdp, which this PyTorch ({torch.__version__}, "
            f"Python {sys.version.split()[0]}) cannot import: {type(e).__name__}: {e}. Use a PyTorch whose "
            "FSDP imports (2.0 or later), or DdpCheckpointer for a model that every rank holds whole") from None
    return FullyShardedDataParallel, StateDictType


def _local(value, path="state"):
    """value with every sharded tensor (ShardedTensor, DTensor) replaced by
    this rank's local shard, which shares its storage."""
    if isinstance(value, dict):
        out = type(value)() if type(value) is not dict else {}
        for k, v in value.items():
            out[k] = _local(v, f"{path}.{k}")
        if hasattr(value, "_metadata"):
            out._metadata = value._metadata
        return out
    if isinstance(value, (list, tuple)):
        return type(value)(_local(v, f"{path}.{i}") for i, v in enumerate(value))
    if hasattr(value, "local_shards"):  # ShardedTensor
        shards = value.local_shards()
        if len(shards) != 1:
            raise ValueError(f"{path}: a sharded tensor with {len(shards)} local shards on this rank; "
                             "FsdpShardCheckpointer saves one shard a rank")
        return shards[0].tensor
    if hasattr(value, "to_local"):  # DTensor
        return value.to_local()
    return value


def _tensors(value, path="state"):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _tensors(v, f"{path}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _tensors(v, f"{path}.{i}")
    elif hasattr(value, "data_ptr"):
        yield path, value


class FsdpShardCheckpointer(Checkpointer):
    """Saves and loads an FSDP model and its optimizer, a shard per rank,
    through the node agent's memory. checkpoint_dir: as DdpCheckpointer's."""

    def __init__(self, checkpoint_dir, comm_backend="", deletion_strategy=None, save_timeout=_flash.SAVE_TIMEOUT):
        _flash.check_args("FsdpShardCheckpointer", save_timeout=save_timeout)
        self._fsdp, self._types = _fsdp()
        self.checkpoint_dir = checkpoint_dir
        self._ckpt = _flash.open_checkpointer("FsdpShardCheckpointer", checkpoint_dir, "sharded",
                                              None, deletion_strategy)

    def _model_state(self, model):
        with self._fsdp.state_dict_type(model, self._types.SHARDED_STATE_DICT):
            return model.state_dict()

    def save_checkpoint(self, step, model, optimizer=None, extra_sd=None, path="", storage_type=StorageType.DISK):
        """Saves model's and optimizer's shards and extra_sd as step (to
        memory; with ``StorageType.DISK`` also to storage, in the
        background). DLRover's older form, ``save_checkpoint(step,
        state_dict, path, storage_type)``, saves a state dict built under
        ``SHARDED_STATE_DICT``. path is not used."""
        import torch

        if isinstance(model, torch.nn.Module):
            state = {"model": self._model_state(model)}
            if optimizer is not None:
                state["optim"] = optimizer.state_dict()
            state.update(extra_sd or {})
        else:  # the older form: (step, state_dict, path, storage_type)
            state = model
            if isinstance(optimizer, StorageType):
                storage_type = optimizer
            elif isinstance(extra_sd, StorageType):
                storage_type = extra_sd
        self._ckpt.save(int(step), _local(state), persist=persist_of(storage_type))

    def load_checkpoint(self, model=None, optimizer=None, resume_path=""):
        """Restores the newest step (from memory, else storage) into model's
        sharded parameters in place and into optimizer; returns the extra
        values saved with it ({} when there is no checkpoint). Raises
        ValueError when the checkpoint was saved with another sharding."""
        if resume_path:
            raise ValueError(f"FsdpShardCheckpointer.load_checkpoint(resume_path={resume_path!r}): Rover restores "
                             "the job's newest step; DLRover's FSDP checkpoints (torch.distributed.checkpoint "
                             "files) are not read")
        if model is None:
            raise ValueError("FsdpShardCheckpointer.load_checkpoint(model, optimizer): give the FSDP model to "
                             "restore into")
        sharded = self._model_state(model)
        into = {"model": _local(sharded)}
        restored = self._ckpt.load(into=into)
        if not restored:
            return {}
        step, state = restored
        want = dict(_tensors(into))
        got = dict(_tensors({"model": state.get("model", {})}))
        moved = [p for p, t in want.items() if got.get(p) is not t]
        if moved:
            raise ValueError(f"step {step} of the checkpoint does not fit this model's shards ({moved[0]} and "
                             f"{len(moved) - 1} more differ): it was saved with another world size or wrapping; "
                             "FsdpShardCheckpointer restores into the sharding it saved")
        model.load_state_dict(sharded)
        if optimizer is not None and "optim" in state:
            optimizer.load_state_dict(state["optim"])
        return _flash.with_step({k: v for k, v in state.items() if k not in ("model", "optim")}, step)

    def get_storage_reader(self, resume_path=""):
        raise NotImplementedError("FsdpShardCheckpointer.get_storage_reader: Rover's checkpoints are not "
                                  "torch.distributed.checkpoint files; use load_checkpoint(model, optimizer)")

    def wait_latest_checkpoint(self, timeout=1800):
        """As DdpCheckpointer.wait_latest_checkpoint."""
        return _flash.wait(self._ckpt, "FsdpShardCheckpointer", timeout)


class FsdpFullCheckpointer(Checkpointer):
    """Saves and loads an FSDP model and its optimizer as full (unsharded)
    state dicts, which every rank holds whole: Rover's replicated mode, as
    DdpCheckpointer's (one copy per node in memory, one rank's file per
    step in storage). The full state dicts let a job restore into another
    world size or wrapping, at the cost of gathering the whole model on
    every rank at each save. checkpoint_dir and the other arguments: as
    DdpCheckpointer's."""

    def __init__(self, checkpoint_dir, comm_backend="", deletion_strategy=None, save_timeout=_flash.SAVE_TIMEOUT):
        _flash.check_args("FsdpFullCheckpointer", save_timeout=save_timeout)
        self._fsdp, self._types = _fsdp("FsdpFullCheckpointer")
        self.checkpoint_dir = checkpoint_dir
        self._ckpt = _flash.open_checkpointer("FsdpFullCheckpointer", checkpoint_dir, "replicated",
                                              None, deletion_strategy)
        self._rank = self._ckpt.rank
        #: The step the last load_checkpoint restored (None: nothing).
        self.loaded_step = None

    def _full(self, model):
        from torch.distributed.fsdp import FullStateDictConfig
        from torch.distributed.fsdp.api import FullOptimStateDictConfig

        return self._fsdp.state_dict_type(model, self._types.FULL_STATE_DICT,
                                          FullStateDictConfig(rank0_only=False),
                                          FullOptimStateDictConfig(rank0_only=False))

    def save_checkpoint(self, step, model, optimizer, extra_sd=None, path="", storage_type=StorageType.DISK):
        """Saves model's and optimizer's full state dicts and extra_sd as step
        (to memory; with ``StorageType.DISK`` also to storage, in the
        background). path is not used."""
        with self._full(model):
            state = {"model": model.state_dict(), "optimizer": self._fsdp.optim_state_dict(model, optimizer)}
        state.update(extra_sd or {})
        self._ckpt.save(int(step), state, persist=persist_of(storage_type))

    def load_checkpoint(self, model, optimizer, resume_path=""):
        """Restores the newest step (from memory, else storage) into model
        and optimizer; returns the extra values saved with it ({} when there
        is no checkpoint), answering "step" with the saved step."""
        self.loaded_step = None
        if resume_path:
            found = _flash.load_dlrover(resume_path, self._rank)
            if found is None:
                raise FileNotFoundError(f"resume_path {resume_path!r} holds no DLRover checkpoint "
                                        f"(no {_flash.TRACKER}, no rank_<r>.pt)")
            self.loaded_step, state = found
        else:
            restored = self._ckpt.load()
            if not restored:
                return {}
            self.loaded_step, state = restored
        state = dict(state)
        model_sd, optim_sd = state.pop("model", {}), state.pop("optimizer", {})
        with self._full(model):
            optim_sd = self._fsdp.optim_state_dict_to_load(model=model, optim=optimizer, optim_state_dict=optim_sd)
        model.load_state_dict(model_sd)
        optimizer.load_state_dict(optim_sd)
        return _flash.with_step(state, self.loaded_step)

    def wait_latest_checkpoint(self, timeout=1800):
        """As DdpCheckpointer.wait_latest_checkpoint."""
        return _flash.wait(self._ckpt, "FsdpFullCheckpointer", timeout)
