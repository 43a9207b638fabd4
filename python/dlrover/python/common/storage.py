"""DLRover's checkpoint deletion strategies, which scripts hand to a flash
checkpointer's ``deletion_strategy``.

Rover keeps a job's newest committed steps itself (``rover run
--checkpoint-keep N``; the master deletes older steps once a newer one is
committed), so a strategy is a request the checkpointer checks, not code it
runs:

* ``KeepLatestStepStrategy(max_to_keep, checkpoint_dir)`` keeps the newest
  ``max_to_keep`` committed steps: the checkpointer opens with ``keep =
  max_to_keep``, which must be the job's ``--checkpoint-keep`` under ``rover
  run`` (the constructor says so otherwise).
* ``KeepStepIntervalStrategy(keep_interval, checkpoint_dir)`` (keep the steps
  that are multiples of an interval) and strategies of your own
  (``CheckpointDeletionStrategy`` subclasses) have no Rover equivalent: the
  checkpointer refuses them, saying to leave ``deletion_strategy`` out and
  use ``--checkpoint-keep``.
"""

import abc

__all__ = ["CheckpointDeletionStrategy", "KeepLatestStepStrategy", "KeepStepIntervalStrategy"]


class CheckpointDeletionStrategy(abc.ABC):
    """What DLRover's strategies are: ``clean_up(step, delete_func)`` after a
    step is saved. Rover's checkpointers do not call it (module comment)."""

    @abc.abstractmethod
    def clean_up(self, step, delete_func):
        """Deletes what the strategy does not keep once step is saved."""


class KeepLatestStepStrategy(CheckpointDeletionStrategy):
    """Keep the newest max_to_keep steps (at least 1): ``--checkpoint-keep
    max_to_keep``."""

    def __init__(self, max_to_keep, checkpoint_dir):
        self.max_to_keep = max(int(max_to_keep), 1)
        self.checkpoint_dir = checkpoint_dir

    def clean_up(self, step, delete_func):
        """Nothing: the job master deletes steps beyond ``--checkpoint-keep``."""


class KeepStepIntervalStrategy(CheckpointDeletionStrategy):
    """Keep the steps that are multiples of keep_interval: refused by Rover's
    checkpointers (no equivalent)."""

    def __init__(self, keep_interval, checkpoint_dir):
        self.keep_interval = int(keep_interval)
        self.checkpoint_dir = checkpoint_dir

    def clean_up(self, step, delete_func):
        """Nothing: Rover's checkpointers refuse this strategy."""
