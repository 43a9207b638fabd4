"""Not provided by Rover: DLRover's ElasticTrainer (gradient accumulation that keeps the global batch fixed as the world changes).

Importing this module raises ImportError saying what to use instead
(docs/migrating-from-dlrover.md).
"""

raise ImportError(
    "dlrover.trainer.torch.elastic.trainer is not provided by Rover's dlrover compatibility package: scale gradient accumulation yourself from WORLD_SIZE, or use rover.data.ElasticSampler "
    "(docs/migrating-from-dlrover.md)")
