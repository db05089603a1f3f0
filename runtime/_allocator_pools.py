"""Private memory pools of the caching allocator: memory reserved for one owner, such as a CUDA graph capture.

A graph replays kernels at the addresses they had during capture, so nothing else may ever be handed those
addresses while the graph lives. Allocations made while a pool is active (optionally only those on one stream) come
from segments owned by that pool; frees return blocks to the same pool. Several captures may share a pool by using
the same id; the pool's memory goes back to the device once every user has released it.
"""
from __future__ import annotations

from contextlib import contextmanager

from ._allocator_block import PrivatePool


class PrivatePoolsMixin:
    """Private-pool methods of :class:`~jitorch.runtime.allocator.CachingAllocator`.

    >>> from jitorch.runtime.allocator import CachingAllocator
    >>> from jitorch.runtime.alloc_config import AllocatorConfig
    >>> from jitorch.runtime.driver import FakeDriver
    >>> alloc = CachingAllocator(FakeDriver(), AllocatorConfig())
    >>> pid = alloc.create_pool_id()
    >>> with alloc.use_pool(pid):
    ...     b = alloc.malloc(4096)
    >>> alloc.free(b); alloc.malloc(4096).ptr == b.ptr     # the default pool cannot see the private block
    False
    >>> alloc.release_pool(pid); alloc.pool_use_count(pid)  # released: its free segment went back to the device
    0
    """

    def _init_private_pools(self):
        self._private = {}  # pool id -> PrivatePool
        self._captures = []  # active (PrivatePool, stream filter or None), innermost last
        self._deferred = []  # blocks freed with cross-stream uses during a capture; events recorded after it
        self._pool_counter = 0

    def create_pool_id(self):
        """A fresh pool id (like ``torch.cuda.graph_pool_handle()``)."""
        self._pool_counter += 1
        return (0, self._pool_counter)

    def begin_allocate_to_pool(self, pool_id, stream=None) -> None:
        """Route allocations (on ``stream`` only, unless None) to pool ``pool_id``; reusing an id shares the pool."""
        pool = self._private.get(pool_id)
        if pool is None:
            pool = self._private[pool_id] = PrivatePool(pool_id)
        else:
            pool.use_count += 1
        self._captures.append((pool, stream))

    def end_allocate_to_pool(self, pool_id) -> None:
        """Stop routing allocations to ``pool_id``; the pool keeps its memory until released."""
        before = len(self._captures)
        self._captures = [(pool, flt) for pool, flt in self._captures if pool.id != pool_id]
        if len(self._captures) == before:
            raise ValueError(f"end_allocate_to_pool: pool {pool_id!r} is not active")
        if not self._captures and self._deferred:
            deferred, self._deferred = self._deferred, []
            for block in deferred:
                self._insert_events(block)

    def release_pool(self, pool_id) -> None:
        """Drop one use of ``pool_id``; at zero, its whole free segments go back to the device at once and the
        rest as they are freed and ``empty_cache`` runs."""
        pool = self._private.get(pool_id)
        if pool is None or pool.use_count == 0:
            raise ValueError(f"release_pool: pool {pool_id!r} is not in use")
        pool.use_count -= 1
        if pool.use_count == 0:
            self._release_whole_segments(pool.small)
            self._release_whole_segments(pool.large)
            if pool.segments == 0:
                self._private.pop(pool_id, None)

    @contextmanager
    def use_pool(self, pool_id, stream=None):
        """``begin_allocate_to_pool`` ... ``end_allocate_to_pool`` as a ``with`` block (the use is kept)."""
        self.begin_allocate_to_pool(pool_id, stream)
        try:
            yield pool_id
        finally:
            self.end_allocate_to_pool(pool_id)

    def capturing(self) -> bool:
        """Whether any private pool is receiving allocations now (a graph capture is under way)."""
        return bool(self._captures)

    def pool_use_count(self, pool_id) -> int:
        """How many users hold ``pool_id`` (0 once released or unknown)."""
        pool = self._private.get(pool_id)
        return 0 if pool is None else pool.use_count

    def _route(self, stream, small):
        """The free-block pool an allocation on ``stream`` uses while captures are active."""
        for pool, stream_filter in reversed(self._captures):
            if stream_filter is None or stream_filter == stream:
                return pool.small if small else pool.large
        return self._small if small else self._large

    def _private_segment_released(self, pool_id):
        pool = self._private[pool_id]
        pool.segments -= 1
        if pool.segments == 0 and pool.use_count == 0:
            del self._private[pool_id]

    def _release_freeable_private_pools(self):
        for pool in list(self._private.values()):
            if pool.use_count == 0:
                self._release_whole_segments(pool.small)
                self._release_whole_segments(pool.large)
