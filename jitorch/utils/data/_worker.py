"""DataLoader worker processes: ``get_worker_info``, their seeding, and the loop that turns indices into batches.

A worker receives ``(task index, sampler entry, blocks to reuse, blocks to forget)`` on its own index queue (see
``_recycle`` for the blocks), fetches and collates the batch, and puts
``(task index, ShmBatch)`` on the shared result channel, the array data in shared memory (see ``_transport``). An
exception becomes an ``ExceptionWrapper`` carrying the worker's traceback text, re-raised by the main process; the end
of an iterable dataset becomes ``_IterableDatasetStopIteration``.

Seeding follows PyTorch: with ``base_seed`` drawn by the main process, worker ``i`` seeds Python's ``random`` and
jitorch's default generator with ``base_seed + i`` and NumPy's legacy global generator with a hash of both.

>>> from jitorch.utils.data import get_worker_info
>>> get_worker_info() is None  # in the main process
True
"""
from __future__ import annotations

import os
import pickle
import queue
import random
import sys
import traceback
from dataclasses import dataclass

import numpy as np

from ... import _misc, _random
from . import _shm, _transport
from ._fetch import _DatasetKind

__all__ = ["WorkerInfo", "get_worker_info", "ExceptionWrapper", "MP_STATUS_CHECK_INTERVAL"]

# How often an idle worker checks that the main process still exists (PyTorch's value).
MP_STATUS_CHECK_INTERVAL = 5.0

_worker_info = None


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """What a worker knows about itself: ``id`` (0 .. num_workers - 1), ``num_workers``, ``seed`` and ``dataset``
    (this process's own copy, which may be reconfigured, e.g. sharded, in ``worker_init_fn``)."""

    id: int
    num_workers: int
    seed: int
    dataset: object
    rng: object = None
    worker_method: str | None = "multiprocessing"


def get_worker_info():
    """The ``WorkerInfo`` of the DataLoader worker process calling it; None in the main process."""
    return _worker_info


@dataclass(frozen=True)
class _IterableDatasetStopIteration:
    worker_id: int


@dataclass(frozen=True)
class _ResumeIteration:
    seed: int | None = None


class _KeyErrorMessage(str):
    """A str whose repr is itself: KeyError would otherwise print the multi-line traceback text as one quoted line."""

    __slots__ = ()

    def __repr__(self):
        return self


class ExceptionWrapper:
    """An exception's type and formatted traceback, to be re-raised in another process or thread."""

    def __init__(self, exc_info=None, where="in background"):
        if exc_info is None:
            exc_info = sys.exc_info()
        self.exc_type = exc_info[0]
        self.exc_msg = "".join(traceback.format_exception(*exc_info))
        self.where = where
        try:
            pickle.dumps(self.exc_type)
        except Exception:  # a class the main process could not import (a local class, say): keep the text only
            self.exc_type = RuntimeError

    def reraise(self):
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        if self.exc_type is KeyError:
            msg = _KeyErrorMessage(msg)
        elif getattr(self.exc_type, "message", None):
            raise self.exc_type(message=msg)
        try:
            exception = self.exc_type(msg)
        except Exception:
            raise RuntimeError(msg) from None
        raise exception


def _generate_state(base_seed, worker_id):
    """PyTorch's NumPy seed for a worker: four 32-bit words hashed from ``base_seed`` and ``worker_id``
    (NumPy's SeedSequence mixing), so that workers get unrelated NumPy streams."""
    init_a, mult_a, init_b, mult_b = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
    mix_mult_l, mix_mult_r, xshift, mask32 = 0xCA01F9DD, 0x4973F715, 16, 0xFFFFFFFF
    entropy = [worker_id, base_seed & mask32, base_seed >> 32, 0]
    hash_const_a = init_a

    def hash_(value):
        nonlocal hash_const_a
        value = (value ^ hash_const_a) & mask32
        hash_const_a = (hash_const_a * mult_a) & mask32
        value = (value * hash_const_a) & mask32
        return (value ^ (value >> xshift)) & mask32

    def mix(x, y):
        result = (((mix_mult_l * x) & mask32) - ((mix_mult_r * y) & mask32)) & mask32
        return (result ^ (result >> xshift)) & mask32

    pool = [hash_(e) for e in entropy]
    for i_src in range(4):
        for i_dst in range(4):
            if i_src != i_dst:
                pool[i_dst] = mix(pool[i_dst], hash_(pool[i_src]))
    hash_const_b = init_b
    state = []
    for value in pool:
        value = (value ^ hash_const_b) & mask32
        hash_const_b = (hash_const_b * mult_b) & mask32
        value = (value * hash_const_b) & mask32
        state.append((value ^ (value >> xshift)) & mask32)
    return state


class _ResultChannel:
    """The workers' shared way back to the main process: a pipe written synchronously under a lock.

    Not a ``multiprocessing.Queue``: its background feeder thread would let a worker that dies right after ``put``
    take unsent batches with it, and the shared memory they name would stay behind. Here a batch is in the pipe
    before the worker moves on.
    """

    def __init__(self, writer, lock):
        self.writer = writer
        self.lock = lock

    def put(self, obj):
        with self.lock:
            self.writer.send(obj)


class _ManagerWatchdog:
    """Tells a worker whether the process that started it still exists (a dead parent re-parents the worker)."""

    def __init__(self):
        self.manager_pid = os.getppid()

    def is_alive(self):
        return os.getppid() == self.manager_pid


def _fetch_batch(fetcher, index, dataset_kind, worker_id):
    with _shm.worker_scope() as scope:
        try:
            return _transport.encode(fetcher.fetch(index), scope, worker_id)
        except StopIteration:
            if dataset_kind == _DatasetKind.Iterable:
                return _IterableDatasetStopIteration(worker_id)
            return ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
        except Exception:
            return ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")


def _worker_loop(dataset_kind, dataset, index_queue, result_channel, done_event, auto_collation, collate_fn,
                 drop_last, base_seed, init_fn, worker_id, num_workers, persistent_workers):
    try:
        _shm.owner_pid = os.getppid()
        # As torch: one thread per worker, so that num_workers processes do not each start a pool the size of the
        # machine (the main process keeps its own setting).
        _misc.set_num_threads(1)
        seed = base_seed + worker_id
        random.seed(seed)
        _random.manual_seed(seed)
        np.random.seed(_generate_state(base_seed, worker_id))
        global _worker_info
        _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)

        init_exception = None
        fetcher = None
        try:
            if init_fn is not None:
                init_fn(worker_id)
            fetcher = _DatasetKind.create_fetcher(dataset_kind, dataset, auto_collation, collate_fn, drop_last)
        except Exception:
            init_exception = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")

        # After an iterable dataset is exhausted the worker must ignore further indices until told to resume.
        iteration_end = False
        watchdog = _ManagerWatchdog()
        while watchdog.is_alive():
            try:
                r = index_queue.get(timeout=MP_STATUS_CHECK_INTERVAL)
            except queue.Empty:
                continue
            if isinstance(r, _ResumeIteration):  # persistent workers: a new epoch starts
                result_channel.put((r, None))
                iteration_end = False
                if init_exception is None:
                    fetcher = _DatasetKind.create_fetcher(dataset_kind, dataset, auto_collation, collate_fn,
                                                          drop_last)
                continue
            if r is None:  # shutdown
                break
            idx, index, give_back, forget = r
            _shm.worker_blocks.update(give_back, forget)  # even for a skipped task: the blocks are ours again
            if done_event.is_set() or iteration_end:
                continue
            if init_exception is not None:
                data, init_exception = init_exception, None
            elif fetcher is None:
                data = ExceptionWrapper((RuntimeError, RuntimeError("worker initialization failed earlier"), None),
                                        where=f"in DataLoader worker process {worker_id}")
            else:
                data = _fetch_batch(fetcher, index, dataset_kind, worker_id)
                iteration_end = isinstance(data, _IterableDatasetStopIteration)
            result_channel.put((idx, data))
            del data, idx, index, r  # drop this batch's memory before waiting for the next index
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group; the main process handles it
        pass
