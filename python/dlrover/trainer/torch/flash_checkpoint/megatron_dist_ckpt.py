"""Not provided by Rover: DLRover's save_checkpoint/load_checkpoint for Megatron-LM distributed checkpoints.

Importing this module raises ImportError saying whether Megatron-LM is installed
and what to use instead (docs/migrating-from-dlrover.md).
"""

import importlib.util as _util

_HAS = _util.find_spec("megatron") is not None

raise ImportError(
    "dlrover.trainer.torch.flash_checkpoint.megatron_dist_ckpt (save_checkpoint/load_checkpoint for Megatron-LM distributed checkpoints) is not provided by Rover's dlrover "
    + ("compatibility package" if _HAS else "compatibility package, and Megatron-LM is not installed here "
       "(pip install megatron-core, or Megatron-LM from source, if the script needs it)")
    + ": save Megatron-LM's model and optimizer state dicts with rover.checkpoint.Checkpointer(mode='sharded') (docs/migrating-from-dlrover.md)")
