"""``StorageType`` and the ``Checkpointer`` interface of DLRover's flash
checkpoint, as DLRover documents them.

``StorageType.MEMORY``: the save is a copy into the node agent's shared
memory (the only blocking part); nothing is written to storage, except that
the agent persists the newest snapshot when the workers fail.
``StorageType.DISK``: the same copy, and then the agent persists it to the
job's checkpoint storage in the background (``rover.checkpoint``'s
``save(step, state, persist=True)``).
"""

import abc
import enum

__all__ = ["Checkpointer", "StorageType"]


class StorageType(enum.Enum):
    """Where ``save_checkpoint`` puts a checkpoint."""

    MEMORY = 1
    DISK = 2


class Checkpointer(abc.ABC):
    """Saves and loads PyTorch training state: to memory at every call, to
    storage in the background when asked (``StorageType.DISK``); loads from
    memory after a process restart, else from storage."""

    @abc.abstractmethod
    def save_checkpoint(self, step, state_dict, path="", storage_type=StorageType.DISK):
        """Saves state_dict as step; path is accepted and not used (Rover
        names files by step: docs/migrating-from-dlrover.md)."""

    @abc.abstractmethod
    def load_checkpoint(self, resume_path=""):
        """Returns the newest state dict saved, or {} when there is none."""


def persist_of(storage_type):
    """Whether storage_type asks for persistence; ValueError when it is not a
    StorageType."""
    if storage_type is StorageType.DISK:
        return True
    if storage_type is StorageType.MEMORY:
        return False
    raise ValueError(f"storage_type must be StorageType.MEMORY or StorageType.DISK "
                     f"(from dlrover.trainer.torch.flash_checkpoint.checkpointer), not {storage_type!r}")
