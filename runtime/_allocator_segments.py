"""Device segments: sizing, obtaining them (the out-of-memory ladder) and giving cached ones back.

Only a block with no neighbours is a whole segment; a segment with any live or pending block stays reserved, which
is why ``empty_cache`` cannot shrink a fragmented cache (PyTorch's semantics, and a common user surprise).
"""
from __future__ import annotations

from bisect import bisect_left

from ._allocator_block import Block, Segment
from ._allocator_stats import LARGE, SMALL, stat_update, stat_update_unpooled
from .alloc_config import UNLIMITED
from .driver import DeviceOutOfMemory

MIN_BLOCK = 512  # every size is a multiple of this (cudaMalloc's alignment)
SMALL_SIZE = 1 << 20  # requests up to 1 MiB use the small pool
SMALL_BUFFER = 2 << 20  # ... carved from 2 MiB segments
MIN_LARGE_ALLOC = 10 << 20  # requests under 10 MiB share 20 MiB segments
LARGE_BUFFER = 20 << 20
ROUND_LARGE = 2 << 20  # larger requests get their own segment, rounded up to 2 MiB


class OutOfMemoryError(RuntimeError):
    """The device is out of memory even after the allocator released everything it had cached.

    Its message follows PyTorch's: "CUDA out of memory. Tried to allocate 16.00 MiB. GPU 0 has a total capacity
    of ... of which ... is free. ... this process has ... memory in use. Of the allocated memory ... is allocated by
    jitorch, and ... is reserved by jitorch but unallocated. ..."

    >>> issubclass(OutOfMemoryError, RuntimeError)  # code catching torch's OOM as RuntimeError keeps working
    True
    """


def segment_size(size):
    """Bytes of the device allocation that serves a (rounded) request of ``size`` bytes.

    >>> [segment_size(s) >> 20 for s in (512, 1 << 20, 3 << 20, 11 << 20)]
    [2, 2, 20, 12]
    """
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


class SegmentsMixin:
    """Segment paths of :class:`~jitorch.runtime.allocator.CachingAllocator` (it supplies the state)."""

    def _alloc_with_retries(self, pool, stream, rounded):
        """PyTorch's ladder after a cache miss: new segment, free oversize blocks, free all cached, give up."""
        cfg = self.config
        if self._allowed is not None and cfg.garbage_collection_threshold > 0:
            self._garbage_collect()
        block = self._alloc_segment(pool, stream, rounded)
        if block is None and self._release_oversize_blocks(pool, stream, rounded):
            block = self._alloc_segment(pool, stream, rounded)
        if block is None and not self._captures:
            self._release_cached_blocks()
            self._stats.num_alloc_retries += 1
            block = self._alloc_segment(pool, stream, rounded)
        if block is None:
            self._stats.num_ooms += 1
            raise OutOfMemoryError(self._oom_message(rounded))
        return block

    def _alloc_segment(self, pool, stream, rounded):
        """A new device segment for ``rounded`` bytes as one free block (not in the pool), or None if refused."""
        nbytes = segment_size(rounded)
        if self._allowed is not None and self._reserved + nbytes > self._allowed:
            return None
        try:
            ptr = self.driver.malloc(nbytes, stream)
        except DeviceOutOfMemory:
            return None
        segment = Segment(ptr, nbytes, stream, pool)
        block = Block(segment, ptr, nbytes)
        segment.head = block
        self._segments[ptr] = segment
        self._reserved += nbytes
        st = self._stats
        off = SMALL if pool.is_small else LARGE
        stat_update(st.segment, off, 1)
        stat_update(st.reserved_bytes, off, nbytes)
        st.num_device_alloc += 1
        if nbytes >= self._max_split:
            stat_update_unpooled(st.oversize_segments, 1)
        if pool.owner is not None:
            self._private[pool.owner].segments += 1
        return block

    def _release_block(self, block):
        """Return a whole free segment to the device."""
        block.pool.remove(block)
        segment = block.segment
        self.driver.free(segment.addr)
        del self._segments[segment.addr]
        self._reserved -= segment.size
        st = self._stats
        off = SMALL if block.pool.is_small else LARGE
        stat_update(st.segment, off, -1)
        stat_update(st.reserved_bytes, off, -segment.size)
        st.num_device_free += 1
        if segment.size >= self._max_split:
            stat_update_unpooled(st.oversize_segments, -1)
        if block.pool.owner is not None:
            self._private_segment_released(block.pool.owner)

    def _release_whole_segments(self, pool):
        for block in pool.blocks():
            if block.prev is None and block.next is None:
                self._release_block(block)

    def _release_oversize_blocks(self, pool, stream, rounded):
        """Free cached oversize blocks on ``stream`` (largest first) until ``rounded`` bytes could fit."""
        max_split = self._max_split
        if max_split >= UNLIMITED:
            return False
        key = max(rounded, max_split)
        entries = pool.free.get(stream) or []
        i = bisect_left(entries, (key,))
        if i < len(entries) and not entries[i][2].is_split:
            self._release_block(entries[i][2])
            return True
        victims = [entry[2] for entry in reversed(entries[:i]) if entry[0] >= max_split and not entry[2].is_split]
        released = 0
        for block in victims:
            if released >= key:
                break
            released += block.size
            self._release_block(block)
        return released >= key

    def _release_cached_blocks(self):
        """Wait for all pending events, then release every whole free segment the default and freeable pools hold."""
        if self._pending_events:
            self._stats.num_sync_all_streams += 1
            self._process_events(synchronize=True)
        self._release_whole_segments(self._small)
        self._release_whole_segments(self._large)
        self._release_freeable_private_pools()

    def _garbage_collect(self):
        """Free old unsplit large blocks until reserved memory is back under the threshold (PyTorch's GC)."""
        limit = self.config.garbage_collection_threshold * self._allowed
        if self._reserved <= limit:
            return
        target, reclaimed = self._reserved - limit, 0
        pool = self._large
        while reclaimed < target:
            candidates = [b for b in pool.blocks() if not b.is_split]
            if not candidates:
                return
            ages = [pool.free_calls - b.gc_base for b in candidates]
            average = sum(ages) / len(ages)
            freed = False
            for block, age in zip(candidates, ages):
                if age >= average:
                    reclaimed += block.size
                    self._release_block(block)
                    freed = True
                    if reclaimed >= target:
                        return
            if not freed:
                return

