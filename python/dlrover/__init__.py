"""DLRover's training-script API, served by Rover.

Scripts written against DLRover's documented Python API import this package
unchanged when ``rover run`` (or ``dlrover-run``) starts them: the agent puts
it on the workers' PYTHONPATH next to ``rover``. It is a thin layer over
Rover's own package:

* ``dlrover.trainer.torch.flash_checkpoint`` (``DdpCheckpointer``,
  ``FsdpShardCheckpointer``, ``FsdpFullCheckpointer``, ``StorageType``) saves through
  ``rover.checkpoint.Checkpointer``: the agent's shared memory, persisted in
  the background to the job's ``--checkpoint-dir``.
* ``dlrover.trainer.torch.elastic.sampler.ElasticDistributedSampler`` is
  DLRover's resumable ``DistributedSampler``, implemented here, with
  ``elastic.dataloader.ElasticDataLoader`` and ``elastic.trainer.ElasticTrainer``.
* ``dlrover.python.common.storage``: DLRover's checkpoint deletion
  strategies, as requests to the checkpointers.

What is mapped, what differs and what is refused: docs/migrating-from-dlrover.md.
"""

__version__ = "0.1.0+rover"
