"""``jitorch.utils.data``: datasets, samplers and the ``DataLoader``, as in ``torch.utils.data``.

>>> import jitorch
>>> from jitorch.utils.data import DataLoader, TensorDataset
>>> ds = TensorDataset(jitorch.arange(6.0).view(3, 2), jitorch.tensor([0, 1, 0]))
>>> x, y = next(iter(DataLoader(ds, batch_size=2)))
>>> x.shape, y.tolist()
(jitorch.Size([2, 2]), [0, 1])
"""
from ._fetch import _DatasetKind  # noqa: F401
from .dataloader import DataLoader, default_collate, default_convert, get_worker_info
from .dataset import (
    ChainDataset, ConcatDataset, Dataset, IterableDataset, StackDataset, Subset, TensorDataset, random_split,
)
from .distributed import DistributedSampler
from .sampler import (
    BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler, WeightedRandomSampler,
)
from . import _utils  # noqa: F401  (PyTorch's private paths, e.g. _utils.collate.default_collate_fn_map)

__all__ = ["BatchSampler", "ChainDataset", "ConcatDataset", "DataLoader", "Dataset", "DistributedSampler",
           "IterableDataset", "RandomSampler", "Sampler", "SequentialSampler", "StackDataset", "Subset",
           "SubsetRandomSampler", "TensorDataset", "WeightedRandomSampler", "default_collate", "default_convert",
           "get_worker_info", "random_split"]
