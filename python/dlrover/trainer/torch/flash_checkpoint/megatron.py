"""Not provided by Rover: DLRover's Megatron-LM flash checkpoint.

Importing this module raises ImportError saying what to use instead
(docs/migrating-from-dlrover.md).
"""

raise ImportError(
    "dlrover.trainer.torch.flash_checkpoint.megatron is not provided by Rover's dlrover compatibility package: save Megatron-LM's state dicts with rover.checkpoint.Checkpointer(mode=\"sharded\") "
    "(docs/migrating-from-dlrover.md)")
