"""DLRover's elastic-training helpers: ``sampler.ElasticDistributedSampler``
(a resumable DistributedSampler), ``dataloader.ElasticDataLoader`` (a
DataLoader whose batch size can change) and ``trainer.ElasticTrainer``
(gradient accumulation that keeps the largest world's global batch).
"""
