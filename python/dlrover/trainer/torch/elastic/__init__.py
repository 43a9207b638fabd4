"""DLRover's elastic-training helpers: ``sampler.ElasticDistributedSampler``.

``ElasticTrainer`` and ``ElasticDataLoader`` are not provided
(docs/migrating-from-dlrover.md says what to use instead).
"""
