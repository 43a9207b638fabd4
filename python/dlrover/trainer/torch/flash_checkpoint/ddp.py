"""DLRover's ``DdpCheckpointer`` over ``rover.checkpoint.Checkpointer``.

    from dlrover.trainer.torch.flash_checkpoint.ddp import DdpCheckpointer, StorageType

    checkpointer = DdpCheckpointer("/checkpoints/run1")  # the job's --checkpoint-dir
    state = checkpointer.load_checkpoint()              # {} when there is none
    ...
    checkpointer.save_checkpoint(step, state, storage_type=StorageType.MEMORY)
    checkpointer.save_checkpoint(step, state, storage_type=StorageType.DISK)

Every rank of a DDP job holds the same state, so the checkpointer saves in
Rover's replicated mode: one copy per node in shared memory, one rank's file
per step in storage (``step-<N>/rank-<R>.safetensors``, committed by the
master with ``step-<N>/manifest.json`` and ``latest``). ``local_shard_num``
or ``global_shard_num`` above 1 (a model partitioned over ranks) saves in
sharded mode: every rank its own part.
"""

from .checkpointer import Checkpointer, StorageType, persist_of
from . import _flash

__all__ = ["DdpCheckpointer", "StorageType"]


class DdpCheckpointer(Checkpointer):
    """Saves and loads the state of a DDP job through the node agent's memory.

    The arguments are DLRover's, in its order. checkpoint_dir must be the
    job's checkpoint storage under ``rover run`` (``--checkpoint-dir``);
    without ``rover run`` it is a local directory that saves with
    ``StorageType.DISK`` write to, synchronously. local_shard_num or
    global_shard_num above 1 (a model partitioned over ranks) saves in
    sharded mode. deletion_strategy: ``KeepLatestStepStrategy(n, dir)``
    (``dlrover.python.common.storage``) keeps n committed steps, as
    ``--checkpoint-keep n``; any other strategy is refused, saying so.
    replica_count (DLRover: copies of a node's memory checkpoint in other
    nodes' memory) is accepted: in replicated mode every node already holds
    the whole state in its own memory, and a node that was replaced restores
    from storage (docs/migrating-from-dlrover.md). comm_backend and
    save_timeout are accepted and unused: Rover needs no process group to
    save or load. ``storage`` (older DLRover releases' storage object) is
    refused: Rover writes through the agent.
    """

    def __init__(self, checkpoint_dir, local_shard_num=1, global_shard_num=1, comm_backend="",
                 deletion_strategy=None, save_timeout=_flash.SAVE_TIMEOUT, replica_count=0, *, storage=None):
        _flash.check_args("DdpCheckpointer", local_shard_num=local_shard_num, global_shard_num=global_shard_num,
                          save_timeout=save_timeout, replica_count=replica_count)
        self.checkpoint_dir = checkpoint_dir
        self.storage = storage
        self.replica_count = int(replica_count)
        mode = "sharded" if int(local_shard_num) > 1 or int(global_shard_num) > 1 else "replicated"
        self._ckpt = _flash.open_checkpointer("DdpCheckpointer", checkpoint_dir, mode, storage, deletion_strategy)
        self._rank = self._ckpt.rank
        #: The step the last load_checkpoint restored (None: nothing, or a file without a step).
        self.loaded_step = None

    def save_checkpoint(self, step, state_dict, path="", storage_type=StorageType.DISK):
        """Copies state_dict into shared memory as step; with
        ``StorageType.DISK`` the agent also persists it in the background.
        path is not used: files are named by step in the job's storage."""
        self._ckpt.save(int(step), state_dict, persist=persist_of(storage_type))

    def load_checkpoint(self, resume_path=""):
        """The state dict of the newest step every rank holds in memory, else
        of the newest committed step in storage, else of a checkpoint that
        DLRover wrote in checkpoint_dir (its ``dlrover_latest.txt`` and
        ``<step>/rank_<r>.pt``); {} when there is none. resume_path: a
        DLRover checkpoint to read instead (a ``.pt`` file, or a directory
        as above), read without running code. The state returned answers
        ``"step"`` with the step it was saved as when it holds no "step"
        of its own (``_flash.StepState``); ``loaded_step`` is that step."""
        self.loaded_step = None
        if resume_path:
            found = _flash.load_dlrover(resume_path, self._rank)
            if found is None:
                raise FileNotFoundError(f"resume_path {resume_path!r} holds no DLRover checkpoint "
                                        f"(no {_flash.TRACKER}, no rank_<r>.pt)")
            self.loaded_step, state = found
            return _flash.with_step(state, self.loaded_step)
        restored = self._ckpt._load(finish=False)  # the restore's end is reported below
        if restored:
            self.loaded_step, state = restored
            self._ckpt._finish_restore(self.loaded_step, self._ckpt.restored_from)
            return _flash.with_step(state, self.loaded_step)
        if isinstance(self.checkpoint_dir, str) and _flash.dlrover_step(self.checkpoint_dir) is not None:
            self.loaded_step, state = _flash.load_dlrover(self.checkpoint_dir, self._rank)
            self._ckpt._finish_restore(self.loaded_step, "storage")
            return _flash.with_step(state, self.loaded_step)
        self._ckpt._finish_restore(None, None)
        return {}

    def wait_latest_checkpoint(self, timeout=1800):
        """Blocks until this rank's latest ``StorageType.DISK`` save is durable
        in storage (the master commits the step once every rank's is) and
        returns that step (None: no save asked for storage). Raises when
        persisting failed, and TimeoutError after timeout seconds."""
        return _flash.wait(self._ckpt, "DdpCheckpointer", timeout)
