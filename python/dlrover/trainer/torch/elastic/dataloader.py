"""Not provided by Rover: DLRover's ElasticDataLoader (batch size from a config file).

Importing this module raises ImportError saying what to use instead
(docs/migrating-from-dlrover.md).
"""

raise ImportError(
    "dlrover.trainer.torch.elastic.dataloader is not provided by Rover's dlrover compatibility package: use torch.utils.data.DataLoader with ElasticDistributedSampler "
    "(docs/migrating-from-dlrover.md)")
