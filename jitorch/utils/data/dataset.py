"""Datasets: the map-style ``Dataset``, the stream-style ``IterableDataset`` and their combinators.

>>> import jitorch
>>> from jitorch.utils.data import TensorDataset, random_split
>>> ds = TensorDataset(jitorch.arange(10), jitorch.arange(10) * 2)
>>> ds[3]
(tensor(3), tensor(6))
>>> train, val = random_split(ds, [0.8, 0.2], generator=jitorch.Generator().manual_seed(0))
>>> len(train), len(val)
(8, 2)
"""
from __future__ import annotations

import bisect
import itertools
import math
import warnings
from collections.abc import Iterable
from typing import Generic, TypeVar

from ... import _random
from ..._random import default_generator

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "StackDataset", "ConcatDataset", "ChainDataset", "Subset",
           "random_split"]

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """A map from keys (usually ``0 .. len - 1``) to samples: subclasses define ``__getitem__`` and usually ``__len__``.

    A subclass may also define ``__getitems__(indices)`` returning a list of samples, which the DataLoader then
    uses to fetch a whole batch in one call.
    """

    def __getitem__(self, index) -> T_co:
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: Dataset[T_co]) -> ConcatDataset[T_co]:
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co], Iterable):
    """A stream of samples: subclasses define ``__iter__``.

    With ``num_workers > 0`` every worker process iterates its own copy of the dataset, so each copy must yield a
    different shard (use ``jitorch.utils.data.get_worker_info()`` inside ``__iter__``) or samples are duplicated.
    """

    def __add__(self, other: Dataset[T_co]):
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Samples are the rows of tensors that share their first dimension: ``ds[i] == (t1[i], t2[i], ...)``."""

    def __init__(self, *tensors) -> None:
        if any(tensors[0].size(0) != tensor.size(0) for tensor in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(tensor[index] for tensor in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].size(0)


class StackDataset(Dataset):
    """Datasets of equal length zipped together: samples are tuples (``StackDataset(a, b)``) or dicts
    (``StackDataset(image=a, label=b)``)."""

    def __init__(self, *args: Dataset, **kwargs: Dataset) -> None:
        if args:
            if kwargs:
                raise ValueError("Supported either ``tuple``- (via ``args``) or``dict``- (via ``kwargs``) like "
                                 "input/output, but both types are given.")
            datasets = list(args)
            self.datasets = args
        elif kwargs:
            datasets = list(kwargs.values())
            self.datasets = kwargs
        else:
            raise ValueError("At least one dataset should be passed")
        self._length = len(datasets[0])
        if any(self._length != len(dataset) for dataset in datasets):
            raise ValueError("Size mismatch between datasets")

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: dataset[index] for k, dataset in self.datasets.items()}
        return tuple(dataset[index] for dataset in self.datasets)

    @staticmethod
    def _column(dataset, indices):
        if callable(getattr(dataset, "__getitems__", None)):
            items = dataset.__getitems__(indices)
            if len(items) != len(indices):
                raise ValueError(f"Nested dataset's output size mismatch. Expected {len(indices)}, got {len(items)}")
            return items
        return [dataset[i] for i in indices]

    def __getitems__(self, indices: list):
        if isinstance(self.datasets, dict):
            columns = {k: self._column(dataset, indices) for k, dataset in self.datasets.items()}
            return [{k: column[row] for k, column in columns.items()} for row in range(len(indices))]
        columns = [self._column(dataset, indices) for dataset in self.datasets]
        return [tuple(column[row] for column in columns) for row in range(len(indices))]

    def __len__(self) -> int:
        return self._length


class ConcatDataset(Dataset[T_co]):
    """Map-style datasets one after the other: index ``i`` walks through them in order."""

    @staticmethod
    def cumsum(sequence):
        r, s = [], 0
        for e in sequence:
            s += len(e)
            r.append(s)
        return r

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        super().__init__()
        self.datasets = list(datasets)
        if len(self.datasets) == 0:
            raise AssertionError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = self.cumsum(self.datasets)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        dataset_idx = bisect.bisect_right(self.cumulative_sizes, idx)
        sample_idx = idx if dataset_idx == 0 else idx - self.cumulative_sizes[dataset_idx - 1]
        return self.datasets[dataset_idx][sample_idx]

    @property
    def cummulative_sizes(self):
        warnings.warn("`cummulative_sizes` attribute is renamed to `cumulative_sizes`", FutureWarning, stacklevel=2)
        return self.cumulative_sizes


class ChainDataset(IterableDataset):
    """Iterable datasets one after the other, chained lazily."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        super().__init__()
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            yield from d

    def __len__(self) -> int:
        total = 0
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            total += len(d)
        return total


class Subset(Dataset[T_co]):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset: Dataset[T_co], indices) -> None:
        self.dataset = dataset
        self.indices = indices
        # The DataLoader fetches batches through ``__getitems__``; a subclass overriding only ``__getitem__`` would be
        # silently bypassed.
        if type(self).__getitem__ is not Subset.__getitem__ and type(self).__getitems__ is Subset.__getitems__:
            raise NotImplementedError(
                f"{type(self).__name__} overrides __getitem__ but not __getitems__. When subclassing Subset and "
                "overriding __getitem__, you must also override __getitems__ to ensure DataLoader works correctly "
                "with your custom logic. A simple implementation:\n\n"
                "def __getitems__(self, indices):\n    return [self.__getitem__(idx) for idx in indices]")

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list) -> list:
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[idx] for idx in indices])
        return [self.dataset[self.indices[idx]] for idx in indices]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset: Dataset, lengths, generator=default_generator) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random ``Subset`` s of the given lengths (or fractions summing to 1).

    Fractions become ``floor(frac * len(dataset))`` items; the remainder is dealt out one at a time, round-robin.
    """
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        subset_lengths = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            subset_lengths.append(math.floor(len(dataset) * frac))
        remainder = len(dataset) - sum(subset_lengths)
        for i in range(remainder):
            subset_lengths[i % len(subset_lengths)] += 1
        lengths = subset_lengths
        for i, length in enumerate(lengths):
            if length == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an empty dataset.",
                              stacklevel=2)
    if sum(lengths) != len(dataset):
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    indices = _random.randperm(sum(lengths), generator=generator).tolist()
    return [Subset(dataset, indices[offset - length:offset])
            for offset, length in zip(itertools.accumulate(lengths), lengths)]
