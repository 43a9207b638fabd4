"""Not provided by Rover: DLRover's DeepSpeedCheckpointer (DeepSpeed flash checkpoint).

Importing this module raises ImportError saying whether DeepSpeed is installed
and what to use instead (docs/migrating-from-dlrover.md).
"""

import importlib.util as _util

_HAS = _util.find_spec("deepspeed") is not None

raise ImportError(
    "dlrover.trainer.torch.flash_checkpoint.deepspeed (DeepSpeedCheckpointer) is not provided by Rover's dlrover "
    + ("compatibility package" if _HAS else "compatibility package, and DeepSpeed is not installed here "
       "(pip install deepspeed, if the script needs it)")
    + ": save the engine's module and optimizer state dicts (engine.module.state_dict(), engine.optimizer.state_dict()) with rover.checkpoint.Checkpointer(mode='sharded') (docs/migrating-from-dlrover.md)")
