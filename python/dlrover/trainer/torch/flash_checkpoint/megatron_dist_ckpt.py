"""Not provided by Rover: DLRover's Megatron-LM distributed flash checkpoint.

Importing this module raises ImportError saying what to use instead
(docs/migrating-from-dlrover.md).
"""

raise ImportError(
    "dlrover.trainer.torch.flash_checkpoint.megatron_dist_ckpt is not provided by Rover's dlrover compatibility package: save Megatron-LM's state dicts with rover.checkpoint.Checkpointer(mode=\"sharded\") "
    "(docs/migrating-from-dlrover.md)")
