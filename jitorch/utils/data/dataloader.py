"""``DataLoader``: iterate a dataset in (shuffled, batched, collated) mini-batches, optionally with worker processes.

>>> import jitorch
>>> from jitorch.utils.data import DataLoader, TensorDataset
>>> loader = DataLoader(TensorDataset(jitorch.arange(5.0), jitorch.arange(5)), batch_size=2)
>>> [(x.tolist(), y.tolist()) for x, y in loader]
[([0.0, 1.0], [0, 1]), ([2.0, 3.0], [2, 3]), ([4.0], [4])]
"""
from __future__ import annotations

import collections.abc
import math
import multiprocessing
import os
import warnings
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ... import _creation, _dtype
from ...runtime import cuda_available
from . import _collate
from ._collate import default_collate, default_convert
from ._fetch import _DatasetKind
from ._worker import get_worker_info
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["DataLoader", "get_worker_info", "default_collate", "default_convert"]

T_co = TypeVar("T_co", covariant=True)
_T = TypeVar("_T")
# torch's annotation aliases, which typed user code imports from here.
_worker_init_fn_t = Callable[[int], None]
_collate_fn_t = Callable[[list[_T]], Any]


class _InfiniteConstantSampler(Sampler):
    """The sampler of an iterable dataset: endless ``None`` placeholders (the dataset decides when to stop)."""

    def __iter__(self):
        while True:
            yield None


class DataLoader(Generic[T_co]):
    """Combines a dataset and a sampler and iterates over batches, PyTorch's ``torch.utils.data.DataLoader``.

    Map-style datasets are read in ``sampler`` order (``SequentialSampler``, or ``RandomSampler`` with
    ``shuffle=True``) grouped by ``BatchSampler(sampler, batch_size, drop_last)`` unless a ``batch_sampler`` is
    given; ``batch_size=None`` turns automatic batching off (``collate_fn`` then sees single samples). Iterable
    datasets are read in their own order.

    ``num_workers > 0`` loads batches in that many worker processes (``multiprocessing_context``: 'fork' where the
    platform allows it, else the platform's default), each with ``prefetch_factor`` batches in flight; batches arrive
    in sampler order through shared memory. ``persistent_workers`` keeps the workers (and their dataset copies)
    between epochs. Worker ``i`` calls ``worker_init_fn(i)`` after seeding; ``get_worker_info()`` describes it.
    """

    __initialized = False

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None, sampler=None,
                 batch_sampler=None, num_workers: int = 0, collate_fn=None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn=None, multiprocessing_context=None,
                 generator=None, *, prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True) -> None:
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             "multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 "
                             "to enable multiprocessing, otherwise set prefetch_factor to None.")
        elif num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")

        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.in_order = in_order

        if isinstance(dataset, IterableDataset):
            self._dataset_kind = _DatasetKind.Iterable
            if shuffle not in {False, None}:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle option, but got "
                                 f"shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified sampler option, but got "
                                 f"sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified batch_sampler option, but "
                                 f"got batch_sampler={batch_sampler}")
        else:
            shuffle = bool(shuffle)
            self._dataset_kind = _DatasetKind.Map

        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and "
                                 "drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")

        if sampler is None:
            if self._dataset_kind == _DatasetKind.Iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = _collate.default_collate if self._auto_collation else _collate.default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self.__initialized = True
        self._IterableDataset_len_called = None  # what len() reported for an iterable dataset, to warn on overrun
        self._iterator = None
        self.check_worker_number_rationality()

    def _get_iterator(self):
        if self.num_workers == 0:
            return _SingleProcessDataLoaderIter(self)
        from ._multiprocessing import _MultiProcessingDataLoaderIter

        self.check_worker_number_rationality()
        return _MultiProcessingDataLoaderIter(self)

    @property
    def multiprocessing_context(self):
        return self.__multiprocessing_context

    @multiprocessing_context.setter
    def multiprocessing_context(self, multiprocessing_context):
        if multiprocessing_context is not None:
            if self.num_workers <= 0:
                raise ValueError(f"multiprocessing_context can only be used with multi-process loading "
                                 f"(num_workers > 0), but got num_workers={self.num_workers}")
            if isinstance(multiprocessing_context, str):
                valid_start_methods = multiprocessing.get_all_start_methods()
                if multiprocessing_context not in valid_start_methods:
                    raise ValueError(f"multiprocessing_context option should specify a valid start method in "
                                     f"{valid_start_methods!r}, but got "
                                     f"multiprocessing_context={multiprocessing_context!r}")
                multiprocessing_context = multiprocessing.get_context(multiprocessing_context)
            if not isinstance(multiprocessing_context, multiprocessing.context.BaseContext):
                raise TypeError(f"multiprocessing_context option should be a valid context object or a string "
                                f"specifying the start method, but got "
                                f"multiprocessing_context={multiprocessing_context}")
        self.__multiprocessing_context = multiprocessing_context

    def __setattr__(self, attr, val):
        if self.__initialized and attr in ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset",
                                           "persistent_workers"):
            raise ValueError(f"{attr} attribute should not be set after {self.__class__.__name__} is initialized")
        super().__setattr__(attr, val)

    def __iter__(self):
        # Persistent workers: one iterator for the loader's whole life, reset at each epoch.
        if self.persistent_workers and self.num_workers > 0:
            if self._iterator is None or not self._iterator._can_reset():
                self._iterator = self._get_iterator()
            else:
                self._iterator._reset(self)
            return self._iterator
        return self._get_iterator()

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        # What the iterator draws from: index batches with automatic batching, single indices without.
        return self.batch_sampler if self._auto_collation else self.sampler

    def __len__(self) -> int:
        if self._dataset_kind == _DatasetKind.Iterable:
            # An estimate: the dataset's own length in batches (workers sharding unevenly can make it wrong).
            length = self._IterableDataset_len_called = len(self.dataset)
            if self.batch_size is not None:
                length = length // self.batch_size if self.drop_last else math.ceil(length / self.batch_size)
            return length
        return len(self._index_sampler)

    def check_worker_number_rationality(self):
        """Warn when more workers are asked for than the CPUs this process may use."""
        if not self.num_workers:
            return
        cpuset_checked = hasattr(os, "sched_getaffinity")
        max_num_worker_suggest = len(os.sched_getaffinity(0)) if cpuset_checked else os.cpu_count()
        if max_num_worker_suggest is None or self.num_workers > max_num_worker_suggest:
            if max_num_worker_suggest is None:
                suggestion = "DataLoader is not able to compute a suggested max number of worker in current system."
            else:
                suggestion = (f"Our suggested max number of worker in current system is {max_num_worker_suggest}"
                              f"{'' if cpuset_checked else ' (`cpuset` is not taken into account)'}, which is "
                              f"smaller than what this DataLoader is going to create.")
            warnings.warn(f"This DataLoader will create {self.num_workers} worker processes in total. {suggestion} "
                          "Please be aware that excessive worker creation might get DataLoader running slow or even "
                          "freeze, lower the worker number to avoid potential slowness/freeze if necessary.",
                          stacklevel=2)


def _pin_memory(data):
    """Page-lock every tensor inside ``data`` (containers are rebuilt like in ``default_convert``)."""
    if hasattr(data, "pin_memory") and not isinstance(data, type):
        return data.pin_memory()
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, collections.abc.Mapping):
        try:
            return type(data)({k: _pin_memory(v) for k, v in data.items()})
        except TypeError:
            return {k: _pin_memory(v) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_pin_memory(d) for d in data))
    if isinstance(data, tuple):
        return [_pin_memory(d) for d in data]
    if isinstance(data, collections.abc.Sequence):
        try:
            return type(data)([_pin_memory(d) for d in data])
        except TypeError:
            return [_pin_memory(d) for d in data]
    return data


class _BaseDataLoaderIter:
    def __init__(self, loader: DataLoader) -> None:
        self._dataset = loader.dataset
        self._dataset_kind = loader._dataset_kind
        self._IterableDataset_len_called = loader._IterableDataset_len_called
        self._auto_collation = loader._auto_collation
        self._drop_last = loader.drop_last
        self._index_sampler = loader._index_sampler
        self._num_workers = loader.num_workers
        if loader.pin_memory and loader.pin_memory_device:
            warnings.warn(f"pin_memory_device is deprecated, the current accelerator will be used as the device,"
                          f"ignore pin_memory_device='{loader.pin_memory_device}'.", stacklevel=3)
        self._pin_memory = loader.pin_memory and cuda_available()
        if loader.pin_memory and not self._pin_memory:
            warnings.warn("'pin_memory' argument is set as true but no accelerator is found, then device pinned "
                          "memory won't be used.", stacklevel=3)
        self._timeout = loader.timeout
        self._collate_fn = loader.collate_fn
        self._sampler_iter = iter(self._index_sampler)
        # Drawn from the loader's generator (else the default one) every epoch, as in PyTorch: it seeds the workers.
        self._base_seed = int(_creation.empty((), dtype=_dtype.int64).random_(generator=loader.generator).item())
        self._persistent_workers = loader.persistent_workers
        self._num_yielded = 0

    def __iter__(self):
        return self

    def _can_reset(self):
        return True

    def _reset(self, loader, first_iter=False):
        self._sampler_iter = iter(self._index_sampler)
        self._num_yielded = 0
        self._IterableDataset_len_called = loader._IterableDataset_len_called

    def _next_index(self):
        return next(self._sampler_iter)  # may raise StopIteration

    def _next_data(self):
        raise NotImplementedError

    def __next__(self):
        if self._sampler_iter is None:
            self._reset()
        data = self._next_data()
        self._num_yielded += 1
        if (self._dataset_kind == _DatasetKind.Iterable and self._IterableDataset_len_called is not None
                and self._num_yielded > self._IterableDataset_len_called):
            warn_msg = (f"Length of IterableDataset {self._dataset} was reported to be "
                        f"{self._IterableDataset_len_called}(when accessing len(dataloader)), but {self._num_yielded} "
                        f"samples have been fetched. ")
            if self._num_workers > 0:
                warn_msg += ("For multiprocessing data-loading, this could be caused by not properly configuring the "
                             "IterableDataset replica at each worker. Please see "
                             "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset for "
                             "examples.")
            warnings.warn(warn_msg, stacklevel=2)
        return data

    def __len__(self) -> int:
        return len(self._index_sampler)

    def __getstate__(self):
        raise NotImplementedError("{} cannot be pickled", self.__class__.__name__)


class _SingleProcessDataLoaderIter(_BaseDataLoaderIter):
    def __init__(self, loader) -> None:
        super().__init__(loader)
        if self._timeout != 0:
            raise AssertionError("_SingleProcessDataLoaderIter requires timeout == 0")
        self._dataset_fetcher = _DatasetKind.create_fetcher(self._dataset_kind, self._dataset, self._auto_collation,
                                                            self._collate_fn, self._drop_last)

    def _next_data(self):
        index = self._next_index()  # may raise StopIteration
        data = self._dataset_fetcher.fetch(index)  # may raise StopIteration
        if self._pin_memory:
            data = _pin_memory(data)
        return data


def __getattr__(name):
    # ``_multiprocessing`` imports this module, so its iterator class (which user code imports from here, as in
    # torch) is looked up lazily.
    if name == "_MultiProcessingDataLoaderIter":
        from ._multiprocessing import _MultiProcessingDataLoaderIter

        return _MultiProcessingDataLoaderIter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
