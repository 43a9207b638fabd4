"""DLRover's ``ElasticDistributedSampler``: a ``DistributedSampler`` that
checkpoints how far an epoch got and resumes there, on any world size.

    sampler = ElasticDistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=B, sampler=sampler)
    sampler.load_state_dict(state["sampler"])          # after a restore
    for epoch in range(start_epoch, epochs):
        sampler.set_epoch(epoch)
        for step_in_epoch, batch in enumerate(loader, start=...):
            ...
            state["sampler"] = sampler.state_dict(step_in_epoch + 1, B)

The state is ``{"epoch": e, "completed_num": n}``: the first n samples of
epoch e's order (``torch.randperm`` seeded with seed + epoch when shuffling,
as DistributedSampler's) are trained. After ``load_state_dict`` the epoch
goes on with the samples after the n-th, split anew over the world size of
now (rank r takes every world-size-th of them from the r-th), padded or cut
to a multiple of it as DistributedSampler does.

It is implemented here, in the worker, rather than over Rover's data service
(``rover.data.ElasticSampler``): DLRover's sampler keeps its state in the
script's checkpoint, not in a master, and scripts rely on its exact order
and its ``state_dict(iter_step, micro_batch_size)``; the same order and
arithmetic here give the same samples in the same places. Its limits are
DLRover's: ``completed_num`` is ``iter_step * micro_batch_size *
world_size`` with the world size of the save, so ``iter_step`` must count
the epoch's steps since its start (DLRover's examples pass a global step,
which ``load_state_dict`` takes modulo the dataset size: right only while
epochs are whole multiples of the global batch); when the world size
changed within an epoch, the steps before the change count at the new
size. ``rover.data.ElasticSampler`` has none of these limits.
"""

import math

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

__all__ = ["ElasticDistributedSampler"]


class ElasticDistributedSampler(DistributedSampler):
    """DistributedSampler whose position in an epoch is checkpointed with
    ``state_dict(iter_step, micro_batch_size)`` and restored with
    ``load_state_dict``. Without a process group, rank and num_replicas
    default to 0 and 1."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        if not (dist.is_available() and dist.is_initialized()):
            rank = rank or 0
            num_replicas = num_replicas or 1
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed,
                         drop_last=drop_last)
        self._completed = {}  # epoch -> samples of its order trained before this iteration

    def _per_rank(self, remaining):
        """Samples each rank gets out of remaining, as DistributedSampler
        splits a dataset: cut to a multiple of the world, or padded up."""
        if self.drop_last and remaining % self.num_replicas:
            return max(math.ceil((remaining - self.num_replicas) / self.num_replicas), 0)
        return math.ceil(remaining / self.num_replicas)

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:  # DistributedSampler's order
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=g).tolist()
        else:
            order = list(range(n))
        indices = order[self._completed.get(self.epoch, 0):]
        self.num_samples = self._per_rank(len(indices))
        self.total_size = self.num_samples * self.num_replicas
        if self.total_size > len(indices):  # pad with the first ones again, as often as needed
            pad = self.total_size - len(indices)
            indices += (indices * math.ceil(pad / max(len(indices), 1)))[:pad]
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self._per_rank(len(self.dataset) - self._completed.get(self.epoch, 0))

    def state_dict(self, iter_step, micro_batch_size):
        """The position after iter_step steps of micro_batch_size samples a
        rank in this epoch: ``{"completed_num": iter_step *
        micro_batch_size * num_replicas, "epoch": epoch}``."""
        return {"completed_num": int(iter_step) * int(micro_batch_size) * self.num_replicas,
                "epoch": self.epoch}

    def load_state_dict(self, state):
        """Continues epoch ``state["epoch"]`` after its first
        ``state["completed_num"]`` samples (modulo the dataset size when
        larger), split over this sampler's world size."""
        self.epoch = int(state.get("epoch", 0))
        completed = int(state.get("completed_num", 0))
        n = len(self.dataset)
        if completed > n:
            completed %= n
        self._completed[self.epoch] = completed
        self.num_samples = self._per_rank(n - completed)
        self.total_size = self.num_samples * self.num_replicas

