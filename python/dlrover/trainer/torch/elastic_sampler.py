"""The import path of older DLRover releases:
``dlrover.trainer.torch.elastic_sampler.ElasticDistributedSampler``."""

from .elastic.sampler import ElasticDistributedSampler

__all__ = ["ElasticDistributedSampler"]
