"""The main process's side of shared-memory block recycling, for one multi-process DataLoader iterator.

Every block a worker sends stays in a loop: the main process maps it (once: the mapping is kept), the batch's arrays
view it, and when the last of them is garbage-collected the block goes on its worker's free list, to be handed back
with the worker's next task. Both processes keep their mappings, so a recycled block costs no page faults. At most
a few batches' worth of blocks per worker wait on the free list; beyond that a freed block is unlinked and its worker
told to forget it. The main process is the only one that unlinks a block that is in the loop, and when the iterator
shuts down (``close``) it unlinks them all: batches the user keeps stay valid (a mapping outlives its name) and are
unmapped when collected, so nothing is left in /dev/shm once the workers are gone.

>>> from jitorch.utils.data import _recycle, _shm, _transport
>>> import numpy as np
>>> recycler = _recycle.BlockRecycler(num_workers=1, prefetch_factor=2)
>>> batch = _transport.encode(np.ones(4))._replace(worker_id=0)
>>> float(_transport.decode(batch, recycler).sum()), recycler.hand_back(0)[0] == (batch.blocks[0][0],)
(4.0, True)
>>> recycler.close()
"""
from __future__ import annotations

import collections
import weakref

from . import _shm

__all__ = ["BlockRecycler"]


class BlockRecycler:
    """Blocks received from ``num_workers`` workers: mapped once, handed back when their batch is gone."""

    def __init__(self, num_workers, prefetch_factor):
        self._known = {}  # name -> [mapping, worker id, in use by a batch]
        self._free = [collections.deque() for _ in range(num_workers)]
        self._forget = [collections.deque() for _ in range(num_workers)]
        self._cap = [0] * num_workers
        self._prefetch_factor = prefetch_factor
        self.closed = False

    def blocks_for(self, batch):
        """The ``Block`` s to build ``batch`` on, mapping blocks seen for the first time."""
        worker_id = batch.worker_id
        blocks = []
        for i, (name, size) in enumerate(batch.blocks):
            entry = self._known.get(name)
            if entry is None:
                try:
                    mapping = _shm.open_block(name, size)
                except BaseException:
                    for later, _ in batch.blocks[i:]:
                        _shm.release(later)
                    raise
                entry = self._known[name] = [mapping, worker_id, False]
            entry[2] = True
            block = _shm.Block(entry[0])
            weakref.finalize(block, self._on_free, name).atexit = False
            blocks.append(block)
        # Enough free blocks for the batches a worker has in flight (plus one being consumed), no more.
        self._cap[worker_id] = max(self._cap[worker_id], len(batch.blocks) * (self._prefetch_factor + 1))
        return blocks

    def _on_free(self, name):
        # Called by garbage collection, at any point and in any thread: only atomic container operations here.
        entry = self._known.get(name)
        if entry is None:
            return
        entry[2] = False
        worker_id = entry[1]
        if self.closed:
            self._release(name)
        elif len(self._free[worker_id]) < self._cap[worker_id]:
            self._free[worker_id].append(name)
        else:
            self._release(name)
            self._forget[worker_id].append(name)

    def _release(self, name):
        if self._known.pop(name, None) is not None:  # pop is atomic: exactly one caller unlinks
            _shm.release(name)

    @staticmethod
    def _take_all(queue):
        names = []
        while queue:
            names.append(queue.popleft())
        return tuple(names)

    def hand_back(self, worker_id):
        """(names ``worker_id`` may reuse, names it must forget), to send with its next task."""
        return self._take_all(self._free[worker_id]), self._take_all(self._forget[worker_id])

    def discard(self, batch, recycle=False):
        """A batch that will never be decoded: recycle its known blocks, or release them all."""
        for name, _ in batch.blocks:
            if name in self._known:
                if recycle:
                    self._on_free(name)
                else:
                    self._release(name)
            else:  # never mapped here: only its worker knows it
                _shm.release(name)
                if recycle and 0 <= batch.worker_id < len(self._forget):
                    self._forget[batch.worker_id].append(name)

    def close(self):
        """Unlink every block (the workers are gone: none will be reused); batches still viewing one keep it mapped."""
        self.closed = True
        for name in list(self._known):
            self._release(name)
        for queue in self._free + self._forget:
            queue.clear()
