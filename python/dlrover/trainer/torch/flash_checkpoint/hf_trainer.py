"""Not provided by Rover: DLRover's FlashCkptTrainer for Hugging Face transformers.

Importing this module raises ImportError saying what to use instead
(docs/migrating-from-dlrover.md).
"""

raise ImportError(
    "dlrover.trainer.torch.flash_checkpoint.hf_trainer is not provided by Rover's dlrover compatibility package: use transformers.Trainer, saving with rover.checkpoint.Checkpointer from a TrainerCallback "
    "(docs/migrating-from-dlrover.md)")
