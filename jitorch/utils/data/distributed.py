"""``DistributedSampler``: each of ``num_replicas`` processes loads its own exclusive share of a dataset.

>>> from jitorch.utils.data import DistributedSampler
>>> list(DistributedSampler(range(10), num_replicas=3, rank=1, shuffle=False))
[1, 4, 7, 0]
"""
from __future__ import annotations

import math

from ... import _random
from ... import distributed as _dist
from .sampler import Sampler

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler):
    """Indices ``rank, rank + num_replicas, ...`` of a (seeded, per-epoch) shuffled order of the dataset.

    Every replica must use the same ``seed`` and call ``set_epoch(epoch)`` before each epoch to get a new shuffle.
    Without ``drop_last`` the order is padded with its own first indices to a multiple of ``num_replicas``; with it,
    the tail is dropped instead.
    """

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False) -> None:
        # As torch: the missing values come from the default process group, which raises ValueError when there
        # is none (jitorch has no process-group backend, so there never is one).
        if num_replicas is None:
            num_replicas = _dist.get_world_size()
        if rank is None:
            rank = _dist.get_rank()
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        if self.drop_last and len(self.dataset) % self.num_replicas != 0:
            self.num_samples = math.ceil((len(self.dataset) - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(len(self.dataset) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self):
        if self.shuffle:
            g = _random.Generator().manual_seed(self.seed + self.epoch)
            indices = _random.randperm(len(self.dataset), generator=g).tolist()
        else:
            indices = list(range(len(self.dataset)))
        if not self.drop_last:
            padding_size = self.total_size - len(indices)
            if padding_size <= len(indices):
                indices += indices[:padding_size]
            else:
                indices += (indices * math.ceil(padding_size / len(indices)))[:padding_size]
        else:
            indices = indices[:self.total_size]
        if len(indices) != self.total_size:
            raise AssertionError(f"Number of indices ({len(indices)}) does not match total_size ({self.total_size})")
        indices = indices[self.rank:self.total_size:self.num_replicas]
        if len(indices) != self.num_samples:
            raise AssertionError(f"Number of subsampled indices ({len(indices)}) does not match num_samples "
                                 f"({self.num_samples})")
        return iter(indices)

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use a different shuffle for ``epoch`` (the same on every replica)."""
        self.epoch = epoch
