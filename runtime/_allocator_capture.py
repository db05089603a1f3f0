"""One graph capture over a private pool: the device-agnostic half of ``jitorch.cuda.CUDAGraph``.

A captured graph replays its kernels at the addresses they had during capture. So while one stream captures, every
allocation made on that stream comes from a *private pool* of the caching allocator, and that memory is never handed
to eager code while the graph lives: blocks freed during or after the capture go back to the same pool, where only
captures sharing the pool (same pool id) can reuse them. ``reset`` drops the graph's use of the pool; once no graph
uses it, its whole free segments go back to the device (and the rest as their last tensors die and ``empty_cache``
runs).

:class:`PoolCapture` pairs that routing with the device's stream capture, given as a ``capturer`` with
``begin_capture(stream)`` and ``end_capture(stream) -> graph``: :class:`~jitorch.runtime.driver.FakeDriver` on a
CPU-only machine, CuPy's stream capture in ``jitorch.cuda.graphs``. Whatever ends a capture (success, an error inside
the captured region, an invalidated capture) ends both the routing and the device capture, so the stream stays usable.

>>> from jitorch.runtime.allocator import CachingAllocator
>>> from jitorch.runtime.driver import FakeDriver
>>> drv = FakeDriver(); alloc = CachingAllocator(drv)
>>> cap = PoolCapture(alloc, drv)
>>> cap.begin(stream=7)
>>> out = alloc.malloc(4096, stream=7)          # a capture-time allocation: it lives in the graph's pool
>>> graph = cap.end(); alloc.free(out)
>>> alloc.malloc(4096, stream=7).ptr == out.ptr  # eager code never gets the graph's memory
False
>>> cap.reset(); alloc.pool_use_count(cap.pool_id)
0
"""
from __future__ import annotations

from contextlib import nullcontext

__all__ = ["PoolCapture"]


class PoolCapture:
    """A stream capture whose allocations come from a private pool, and the graph it produced.

    ``begin(stream, pool=None)`` starts routing ``stream``'s allocations to ``pool`` (a fresh pool when None; an id
    from ``allocator.create_pool_id()`` or another capture's ``pool_id`` shares that pool) and starts the device
    capture. ``end()`` stops both and keeps the graph; ``abort()`` stops both and keeps nothing; ``reset()`` also
    gives the pool use back. ``lock``, when given, is held around allocator calls (the CuPy hook frees blocks from
    ``__del__`` in any thread).
    """

    def __init__(self, allocator, capturer, lock=None):
        self.allocator = allocator
        self.capturer = capturer
        self._lock = lock if lock is not None else nullcontext()
        self.pool_id = None
        self.stream = None
        self.graph = None
        self.capturing = False
        self.holds_pool = False  # whether this capture still counts as a user of ``pool_id``

    def begin(self, stream, pool=None) -> None:
        if self.capturing:
            raise RuntimeError("capture_begin: this graph is already capturing")
        if self.graph is not None:
            raise RuntimeError("capture_begin: this graph already holds a capture; call reset() before capturing "
                               "again")
        if self.holds_pool:  # a capture that ended in an error keeps nothing, not even its pool use
            self._release_pool()
        alloc = self.allocator
        with self._lock:
            pool_id = alloc.create_pool_id() if pool is None else pool
            alloc.begin_allocate_to_pool(pool_id, stream)
        self.pool_id, self.stream, self.holds_pool = pool_id, stream, True
        try:
            self.capturer.begin_capture(stream)
        except BaseException:
            with self._lock:
                alloc.end_allocate_to_pool(pool_id)
            self._release_pool()
            raise
        self.capturing = True

    def end(self):
        """Stop capturing, then routing; returns the device graph (an invalidated capture raises, ended all the same).

        The device capture ends first: ending the routing records the events of cross-stream frees deferred during
        the capture, and an event recorded on a still-capturing stream would become a node of the graph.
        """
        if not self.capturing:
            raise RuntimeError("capture_end: the graph is not capturing (capture_begin first, or the capture already "
                               "ended on an error)")
        self.capturing = False
        try:
            self.graph = self.capturer.end_capture(self.stream)
        except BaseException:
            self._end_routing()
            self._release_pool()
            raise
        self._end_routing()
        return self.graph

    def abort(self) -> None:
        """End a capture under way without keeping its graph (idempotent); the pool use is given back."""
        if self.capturing:
            self.capturing = False
            try:
                self.capturer.end_capture(self.stream)
            except Exception:  # noqa: BLE001 - an invalidated capture is the usual reason to abort; it ended anyway
                pass
            self._end_routing()
        self.graph = None
        self._release_pool()

    def _end_routing(self):
        with self._lock:
            self.allocator.end_allocate_to_pool(self.pool_id)

    def reset(self) -> None:
        """Drop the graph and this capture's use of its pool (the memory returns once no sharer is left)."""
        self.abort()

    def _release_pool(self):
        if self.holds_pool:
            self.holds_pool = False
            with self._lock:
                self.allocator.release_pool(self.pool_id)
