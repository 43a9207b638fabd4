"""Not provided by Rover: DLRover's FlashCkptTrainer (Hugging Face transformers).

Importing this module raises ImportError saying whether transformers is installed
and what to use instead (docs/migrating-from-dlrover.md).
"""

import importlib.util as _util

_HAS = _util.find_spec("transformers") is not None

raise ImportError(
    "dlrover.trainer.torch.flash_checkpoint.hf_trainer (FlashCkptTrainer (Hugging Face transformers)) is not provided by Rover's dlrover "
    + ("compatibility package" if _HAS else "compatibility package, and transformers is not installed here "
       "(pip install transformers, if the script needs it)")
    + ": use transformers.Trainer, saving with rover.checkpoint.Checkpointer from a TrainerCallback (docs/migrating-from-dlrover.md)")
