"""The DataLoader iterator with worker processes.

Task ``k`` (the ``k``-th entry of the index sampler) goes to worker ``k % num_workers``; at most ``prefetch_factor``
tasks per worker are in flight. Results come back through one pipe in any order and are delivered in task order
(or as they arrive with ``in_order=False``); a batch is mapped from shared memory as soon as it is received, so the
reorder buffer never holds shared-memory names, and its blocks go back to their worker once the batch is garbage
(``_recycle``).

The main process waits on the pipe and on the active workers' process sentinels together, so a worker that dies is
noticed at once. Shutting down (end of epoch, ``break``, the iterator being collected, interpreter exit) drains the
pipe so every block still in flight is released.

>>> import jitorch
>>> from jitorch.utils.data import DataLoader
>>> [b.tolist() for b in DataLoader(list(range(6)), batch_size=2, num_workers=2)]
[[0, 1], [2, 3], [4, 5]]
"""
from __future__ import annotations

import atexit
import itertools
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import time
import warnings
import weakref

from . import _shm, _transport
from ._recycle import BlockRecycler
from ._fetch import _DatasetKind
from ._worker import MP_STATUS_CHECK_INTERVAL, ExceptionWrapper, _IterableDatasetStopIteration, _ResumeIteration
from ._worker import _ResultChannel, _worker_loop
from .dataloader import _BaseDataLoaderIter, _pin_memory

# Pools not yet shut down. Shut down at exit before multiprocessing's own exit handler (registered earlier, so it
# runs later) terminates the daemonic workers: stopping them first lets the batches they still hold be released
# instead of reported as leaked by the resource tracker.
_live_pools = set()


@atexit.register
def _shutdown_live_pools():
    for pool in list(_live_pools):
        pool.shutdown()


def _default_context():
    # fork is fast and needs nothing picklable; macOS's system libraries are not fork-safe (and Windows lacks it).
    if "fork" in multiprocessing.get_all_start_methods() and sys.platform != "darwin":
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _death_message(worker):
    code = worker.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
            description = signal.strsignal(-code) or name
        except ValueError:
            description = f"signal {-code}"
        return f"DataLoader worker (pid {worker.pid}) is killed by signal: {description}."
    return (f"DataLoader worker (pid {worker.pid}) exited unexpectedly with exit code {code}. Details are lost due to "
            f"multiprocessing. Rerunning with num_workers=0 may give better error trace.")


class _WorkerPool:
    """The worker processes and their channels, apart from the iterator so that its finalizer can shut them down.

    An iterator caught in a reference cycle (an exception traceback holding its frames, say) is collected by the
    cyclic garbage collector, which may finalize the queues inside it before calling its ``__del__``; indices put
    then never reach the workers. A ``weakref.finalize`` holding this pool keeps everything the shutdown needs alive.
    """

    def __init__(self, context, num_workers, worker_args, recycler):
        self.owner_pid = os.getpid()
        self.closed = False
        self.recycler = recycler
        _shm.prepare()  # the resource tracker must run before the workers are forked, so that they share it
        self.reader, writer = context.Pipe(duplex=False)
        # Kept: with spawn, a worker rebuilds the lock from its name, which must outlive the worker's start.
        self.channel = _ResultChannel(writer, context.Lock())
        self.done_event = context.Event()
        self.index_queues, self.workers = [], []
        _live_pools.add(self)
        try:
            for i in range(num_workers):
                index_queue = context.Queue()
                # Indices left unread at shutdown do not matter: do not wait for them to be flushed.
                index_queue.cancel_join_thread()
                w = context.Process(target=_worker_loop, args=worker_args(i, index_queue, self.channel,
                                                                           self.done_event), daemon=True)
                try:
                    w.start()
                except (TypeError, AttributeError, pickle.PicklingError):
                    # spawn / forkserver pickle the dataset, collate_fn and worker_init_fn: say so, as torch does.
                    warnings.warn("Got pickle error when attempting to start a worker Process. This might be because "
                                  "the worker Process arguments are not picklable. Python 3.14+ changed the "
                                  "multiprocessing start method in non-Mac POSIX platforms to 'forkserver', which "
                                  "requires the worker Process arguments to be picklable. You can also try "
                                  "multiprocessing.set_start_method('fork').", stacklevel=5)
                    raise
                self.index_queues.append(index_queue)
                self.workers.append(w)
        except BaseException:
            self.shutdown()
            raise
        finally:
            # The workers hold the write end; closing ours lets a read see EOF once every worker is gone.
            writer.close()
            self.channel.writer = None

    def drain(self, timeout):
        """Release the shared memory of every result that can be read within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        try:
            while self.reader.poll(max(0.0, deadline - time.monotonic())):
                _, data = self.reader.recv()
                if isinstance(data, _transport.ShmBatch):
                    self.recycler.discard(data)
        except (OSError, EOFError):  # every worker is gone and the pipe is empty
            pass

    def shutdown(self):
        if self.closed or os.getpid() != self.owner_pid:  # (a forked child holding a copy of this object)
            return
        self.closed = True
        _live_pools.discard(self)
        try:
            # ``done_event`` makes a worker skip the indices still queued before the None that stops it.
            self.done_event.set()
            for index_queue in self.index_queues:
                index_queue.put(None)
            # Workers may be writing results: keep reading so they can finish and exit.
            deadline = time.monotonic() + MP_STATUS_CHECK_INTERVAL
            while any(w.is_alive() for w in self.workers) and time.monotonic() < deadline:
                self.drain(0.02)
        finally:
            for w in self.workers:
                if w.is_alive():
                    w.terminate()
                w.join(timeout=MP_STATUS_CHECK_INTERVAL)
            self.drain(0.0)
            self.recycler.close()
            for index_queue in self.index_queues:
                index_queue.close()
            self.reader.close()


class _MultiProcessingDataLoaderIter(_BaseDataLoaderIter):
    """Iterates once over the DataLoader's dataset (or once per epoch with persistent workers)."""

    def __init__(self, loader) -> None:
        super().__init__(loader)
        self._prefetch_factor = loader.prefetch_factor
        self._in_order = loader.in_order
        if self._prefetch_factor <= 0:
            raise AssertionError("prefetch_factor must be greater than 0 for MultiProcessingDataLoaderIter")
        context = loader.multiprocessing_context or _default_context()

        def worker_args(i, index_queue, channel, done_event):
            return (self._dataset_kind, self._dataset, index_queue, channel, done_event, self._auto_collation,
                    self._collate_fn, self._drop_last, self._base_seed, loader.worker_init_fn, i, self._num_workers,
                    self._persistent_workers)

        self._recycler = BlockRecycler(self._num_workers, self._prefetch_factor)
        self._pool = _WorkerPool(context, self._num_workers, worker_args, self._recycler)
        self._workers = self._pool.workers
        self._index_queues = self._pool.index_queues
        self._finalizer = weakref.finalize(self, self._pool.shutdown)
        self._finalizer.atexit = False  # ``_shutdown_live_pools`` does it, before multiprocessing's exit handler
        self._reset(loader, first_iter=True)

    def _can_reset(self):
        return self._finalizer.alive  # False once shut down (a worker died): the loader then starts new workers

    def _reset(self, loader, first_iter=False):
        super()._reset(loader, first_iter)
        self._send_idx = 0  # index of the next task to send
        self._rcvd_idx = 0  # index of the next task to return
        # task index -> (worker id,) while in flight, (worker id, data) once received out of order
        self._task_info = {}
        self._tasks_outstanding = 0
        self._workers_status = [True] * self._num_workers
        self._workers_num_tasks = [0] * self._num_workers
        self._worker_queue_idx_cycle = itertools.cycle(range(self._num_workers))
        if not first_iter:
            # Persistent workers: each acknowledges the new epoch; results of the previous one still in flight
            # arrive before the acknowledgement and are dropped.
            for index_queue in self._index_queues:
                index_queue.put(_ResumeIteration())
            remaining = self._num_workers
            while remaining > 0:
                return_idx, return_data = self._get_data(decode=False)
                if isinstance(return_idx, _ResumeIteration):
                    remaining -= 1
                elif isinstance(return_data, _transport.ShmBatch):
                    self._recycler.discard(return_data, recycle=True)
        for _ in range(self._prefetch_factor * self._num_workers):
            self._try_put_index()

    def _check_workers(self):
        failed = [w for worker_id, w in enumerate(self._workers)
                  if self._workers_status[worker_id] and not w.is_alive()]
        if failed:
            for w in failed:
                self._workers_status[self._workers.index(w)] = False
            # The dead worker's tasks are lost: this epoch cannot continue, so stop the others now.
            self._shutdown_workers()
            raise RuntimeError(" ".join(_death_message(w) for w in failed))

    def _get_data(self, decode=True):
        deadline = time.monotonic() + self._timeout if self._timeout > 0 else None
        while True:
            wait = MP_STATUS_CHECK_INTERVAL if deadline is None else max(0.0, deadline - time.monotonic())
            sentinels = [w.sentinel for worker_id, w in enumerate(self._workers) if self._workers_status[worker_id]]
            ready = multiprocessing.connection.wait([self._pool.reader, *sentinels], timeout=wait)
            if self._pool.reader in ready:  # read first: a worker's last batch may precede its death
                try:
                    idx, data = self._pool.reader.recv()
                except EOFError:  # every worker has closed its end: they are all gone
                    for w in self._workers:
                        w.join(timeout=MP_STATUS_CHECK_INTERVAL)
                    self._check_workers()
                    raise RuntimeError("DataLoader workers exited unexpectedly") from None
                if decode and isinstance(data, _transport.ShmBatch):
                    data = _transport.decode(data, self._recycler)
                return idx, data
            self._check_workers()
            if deadline is not None and time.monotonic() >= deadline:
                raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")

    def _next_data(self):
        if self._finalizer is not None and not self._finalizer.alive and not self._persistent_workers:
            # Shut down early: batches that arrived out of order before are dropped, as the workers' others are
            raise StopIteration
        while True:
            # Skip tasks whose worker has ended (an exhausted iterable-dataset worker) without producing them.
            while self._rcvd_idx < self._send_idx:
                info = self._task_info.get(self._rcvd_idx, None)
                if info:
                    worker_id = info[0]
                    if len(info) == 2 or self._workers_status[worker_id]:  # has data or is still active
                        break
                    del self._task_info[self._rcvd_idx]
                self._rcvd_idx += 1
            else:
                if not self._persistent_workers:
                    self._shutdown_workers()
                raise StopIteration

            if len(self._task_info[self._rcvd_idx]) == 2:  # already received out of order
                worker_id, data = self._task_info.pop(self._rcvd_idx)
                self._rcvd_idx += 1
                return self._process_data(data, worker_id)

            idx, data = self._get_data()
            self._tasks_outstanding -= 1
            if self._dataset_kind == _DatasetKind.Iterable and isinstance(data, _IterableDatasetStopIteration):
                if self._persistent_workers:
                    self._workers_status[data.worker_id] = False
                else:
                    self._mark_worker_as_unavailable(data.worker_id)
                self._try_put_index()
                continue

            if idx != self._rcvd_idx:
                if not self._in_order:
                    worker_id = self._task_info.pop(idx)[0]
                    return self._process_data(data, worker_id)
                self._task_info[idx] += (data,)
            else:
                worker_id = self._task_info.pop(idx)[0]
                self._rcvd_idx += 1
                return self._process_data(data, worker_id)

    def _try_put_index(self):
        max_tasks = self._prefetch_factor * self._num_workers
        try:
            index = self._next_index()
        except StopIteration:
            return
        for _ in range(self._num_workers):  # the next active worker, if any
            worker_queue_idx = next(self._worker_queue_idx_cycle)
            if self._workers_status[worker_queue_idx]:
                if self._in_order or self._workers_num_tasks[worker_queue_idx] < max_tasks // sum(
                        self._workers_status):
                    break
        else:
            return
        self._index_queues[worker_queue_idx].put((self._send_idx, index, *self._recycler.hand_back(worker_queue_idx)))
        self._task_info[self._send_idx] = (worker_queue_idx,)
        self._workers_num_tasks[worker_queue_idx] += 1
        self._tasks_outstanding += 1
        self._send_idx += 1

    def _process_data(self, data, worker_idx):
        self._workers_num_tasks[worker_idx] -= 1
        self._try_put_index()
        if isinstance(data, ExceptionWrapper):
            data.reraise()
        if self._pin_memory:
            data = _pin_memory(data)
        return data

    def _mark_worker_as_unavailable(self, worker_id, shutdown=False):
        # The worker exits when it reads None.
        self._index_queues[worker_id].put(None)
        self._workers_status[worker_id] = False

    def _shutdown_workers(self):
        self._finalizer()
        # As torch: an iterator shut down early (user code calls this to stop workers) then ends cleanly instead of
        # reading a closed pipe.
        self._workers_status = [False] * self._num_workers
