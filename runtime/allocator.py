"""The caching device-memory allocator (PyTorch's policy), written against the small :mod:`.driver` interface.

See :class:`CachingAllocator` for the whole policy. Private pools, reporting and stats live in the
``_allocator_*`` modules; this one holds the allocation and free paths.
"""
from __future__ import annotations

from bisect import bisect_left
from collections import deque

from ._allocator_block import Block, BlockPool
from ._allocator_capture import PoolCapture
from ._allocator_pools import PrivatePoolsMixin
from ._allocator_report import ReportingMixin
from ._allocator_segments import MIN_BLOCK, SMALL_SIZE, OutOfMemoryError, SegmentsMixin, segment_size
from ._allocator_stats import LARGE, SMALL, AllocatorStats, count_split, stat_update, stat_update_unpooled
from .alloc_config import AllocatorConfig

__all__ = ["CachingAllocator", "OutOfMemoryError", "PoolCapture", "round_size", "segment_size"]


def round_size(size, divisions=0):
    """``size`` rounded up to 512 bytes, or to the next 1/``divisions`` step between powers of two.

    As in PyTorch's code, the power-of-two steps apply only above ``512 * divisions`` bytes (so 1200 B stays on
    the 512-byte grid even with 4 divisions).

    >>> round_size(1), round_size(513), round_size(4500, divisions=4), round_size(1200, divisions=4)
    (512, 1024, 5120, 1536)
    """
    if size <= MIN_BLOCK:
        return MIN_BLOCK
    if divisions > 1 and size > MIN_BLOCK * divisions:
        floor = 1 << (size.bit_length() - 1)
        if floor == size:
            return size
        step = floor // divisions
        rounded = size & ~(step - 1)
        return rounded if rounded == size else rounded + step
    return -(-size // MIN_BLOCK) * MIN_BLOCK


class CachingAllocator(SegmentsMixin, PrivatePoolsMixin, ReportingMixin):
    """A per-device caching allocator with PyTorch's policy.

    **Sizes.** Requests round up to 512 B (or to ``roundup_power2_divisions`` steps). Rounded requests of at most
    1 MiB use the *small pool*, carved from 2 MiB segments; larger ones the *large pool*: under 10 MiB they share
    20 MiB segments, larger ones get a segment of their own rounded up to 2 MiB.

    **Reuse.** Free blocks are kept per stream: a request takes the best fit (smallest, then lowest address) among
    the free blocks *of its own stream* and never a block freed on another stream. A block is split when the rest is
    worth keeping: at least 512 B in the small pool, over 1 MiB in the large pool, and never when the request is
    ``max_split_size`` or more. Blocks of ``max_split_size`` or more ("oversize") are never handed to smaller
    requests, and serve a larger request only if they exceed it by less than ``max_non_split_rounding``. A freed
    block merges with free neighbours of its segment; only whole free segments go back to the device.

    **Cross-stream use.** ``record_stream(block, s)`` notes that stream ``s`` also uses the block. Freeing it then
    records an event on each such stream; the block is reused only after all those events completed (polled at the
    start of every ``malloc``, never while a graph capture is under way).

    **Out of memory.** A miss asks the device for a new segment (within ``set_per_process_memory_fraction``, after
    garbage-collecting old cached blocks when ``garbage_collection_threshold`` is set). If the device refuses, the
    allocator frees oversize cached blocks and retries, then waits for all events, releases every whole free segment
    and retries once more (``num_alloc_retries``), and finally raises :class:`OutOfMemoryError` (``num_ooms``).

    **Private pools.** Between ``begin_allocate_to_pool(id)`` and ``end_allocate_to_pool(id)`` allocations come
    from segments owned by pool ``id`` and those segments never serve anyone else; beginning again with the same id
    shares the pool. ``release_pool(id)`` drops one use; at zero its whole free segments go back to the device.

    >>> from jitorch.runtime.driver import FakeDriver
    >>> alloc = CachingAllocator(FakeDriver(capacity=64 << 20), AllocatorConfig())
    >>> a = alloc.malloc(1000); b = alloc.malloc(1000)
    >>> b.ptr - a.ptr, alloc.memory_allocated(), alloc.memory_reserved()
    (1024, 2048, 2097152)
    >>> alloc.free(a); alloc.free(b); alloc.empty_cache(); alloc.memory_reserved()
    0
    """

    def __init__(self, driver, config: AllocatorConfig | None = None):
        self.driver = driver
        self.device = getattr(driver, "device", 0)
        self.config = AllocatorConfig.from_env() if config is None else config
        self._max_split = self.config.max_split_size
        self._plain_rounding = all(d <= 1 for d in self.config.roundup_power2_divisions)
        self._small = BlockPool(True)
        self._large = BlockPool(False)
        self._stats = AllocatorStats()
        self._segments = {}  # address -> Segment, every live device allocation
        self._reserved = 0
        self._allowed = None  # bytes allowed by set_per_process_memory_fraction
        self._events = {}  # stream -> deque of (event, block), in record order
        self._pending_events = 0
        self._pending_blocks = 0  # freed by their user, waiting for events
        self._spare_events = []  # completed events, reused instead of creating new ones
        self._init_private_pools()

    # -- allocation -----------------------------------------------------------------------------------------------
    def malloc(self, size: int, stream=0) -> Block:
        """A block of at least ``size`` bytes usable on ``stream``; its address is ``block.ptr``.

        The cached path is written out in one function (no helper calls): it is the allocator's hot path.
        """
        if size < 0:
            raise ValueError(f"malloc: size must be >= 0, got {size}")
        if self._pending_events and not self._captures:
            self._process_events()
        if size <= MIN_BLOCK:
            rounded = MIN_BLOCK
        elif self._plain_rounding:
            rounded = -(-size // MIN_BLOCK) * MIN_BLOCK
        else:
            rounded = round_size(size, self.config.divisions_for(size))
        small = rounded <= SMALL_SIZE
        if self._captures:
            pool = self._route(stream, small)
        else:
            pool = self._small if small else self._large
        max_split = self._max_split
        # Best fit on this stream (PyTorch's get_free_block).
        pool.free_calls += 1
        block = None
        entries = pool.free.get(stream)
        if entries:
            i = bisect_left(entries, (rounded,))
            if i < len(entries):
                block = entries[i][2]
                if rounded < max_split:
                    if block.size >= max_split:  # an oversize block would be wasted on a small request
                        block = None
                elif block.size >= rounded + self.config.max_non_split_rounding:
                    block = None
                if block is not None:
                    del entries[i]
        if block is None:
            block = self._alloc_with_retries(pool, stream, rounded)
        # Split off the rest when it is worth keeping; the caller gets the front part.
        st = self._stats
        off = SMALL if small else LARGE
        rest = block.size - rounded
        already_split = block.prev is not None or block.next is not None
        if rest >= MIN_BLOCK if small else (rounded < max_split and rest > SMALL_SIZE):
            remaining = block
            block = Block(remaining.segment, remaining.ptr, rounded)
            block.prev = remaining.prev
            if block.prev is None:
                remaining.segment.head = block
            else:
                block.prev.next = block
            block.next = remaining
            remaining.prev = block
            remaining.ptr += rounded
            remaining.size = rest
            pool.insert(remaining)
            if already_split:
                stat_update(st.inactive_split_bytes, off, -rounded)
            else:
                count_split(st, off, 1, rest)
        elif already_split:
            count_split(st, off, -1, -block.size)
        block.allocated = True
        block.requested = size
        nbytes = block.size
        # Counted inline, this being the hot path: allocation, allocated and requested bytes (see _allocator_stats).
        arr = st.allocation
        c = arr[off] + 1
        arr[off] = c
        if c > arr[off + 1]:
            arr[off + 1] = c
        c = arr[4] + arr[8]
        if c > arr[1]:
            arr[1] = c
        arr = st.allocated_bytes
        c = arr[off] + nbytes
        arr[off] = c
        if c > arr[off + 1]:
            arr[off + 1] = c
        c = arr[4] + arr[8]
        if c > arr[1]:
            arr[1] = c
        arr = st.requested_bytes
        c = arr[off] + size
        arr[off] = c
        if c > arr[off + 1]:
            arr[off + 1] = c
        c = arr[4] + arr[8]
        if c > arr[1]:
            arr[1] = c
        if nbytes >= max_split:
            stat_update_unpooled(st.oversize_allocations, 1)
        if self._pending_blocks:
            st.track_active_peak()
        return block

    # -- free -----------------------------------------------------------------------------------------------------
    def free(self, block: Block) -> None:
        """Give ``block`` back. It is reusable at once, or after the events of its ``record_stream`` streams."""
        if not block.allocated:
            raise ValueError(f"free: {block!r} is not allocated (double free?)")
        block.allocated = False
        st = self._stats
        off = SMALL if block.pool.is_small else LARGE
        nbytes = block.size
        arr = st.allocation
        arr[off] -= 1
        arr[off + 3] += 1
        arr = st.allocated_bytes
        arr[off] -= nbytes
        arr[off + 3] += nbytes
        arr = st.requested_bytes
        arr[off] -= block.requested
        arr[off + 3] += block.requested
        if block.size >= self._max_split:
            stat_update_unpooled(st.oversize_allocations, -1)
        if block.stream_uses:
            # Still active until its events complete ("pending"): counted apart, see _allocator_stats.
            self._pending_blocks += 1
            stat_update(st.pending, off, 1)
            stat_update(st.pending_bytes, off, block.size)
            if self._captures:  # no events may be recorded or polled during capture: decide after it ends
                self._deferred.append(block)
            else:
                self._insert_events(block)
        else:
            self._free_block(block)

    def _free_block(self, block):
        """Merge ``block`` with free neighbours and put the result in its pool (PyTorch's ``free_block``)."""
        pool = block.pool
        st = self._stats
        off = SMALL if pool.is_small else LARGE
        merged_count = merged_bytes = 0
        prev = block.prev
        if prev is not None and not prev.allocated and not prev.event_count and not prev.stream_uses:
            pool.remove(prev)
            block.ptr = prev.ptr
            block.size += prev.size
            block.prev = prev.prev
            if block.prev is None:
                block.segment.head = block
            else:
                block.prev.next = block
            merged_count -= 1
            merged_bytes -= prev.size
        nxt = block.next
        if nxt is not None and not nxt.allocated and not nxt.event_count and not nxt.stream_uses:
            pool.remove(nxt)
            block.size += nxt.size
            block.next = nxt.next
            if block.next is not None:
                block.next.prev = block
            merged_count -= 1
            merged_bytes -= nxt.size
        pool.insert(block)
        if block.prev is not None or block.next is not None:
            merged_count += 1
            merged_bytes += block.size
        if merged_count or merged_bytes:
            count_split(st, off, merged_count, merged_bytes)

    # -- cross-stream use -----------------------------------------------------------------------------------------
    def record_stream(self, block: Block, stream) -> None:
        """Note that ``stream`` uses ``block`` too: once freed, it waits for ``stream``'s work queued so far."""
        if not block.allocated:
            raise ValueError(f"record_stream: {block!r} is not allocated")
        if stream == block.stream:
            return
        if block.stream_uses is None:
            block.stream_uses = {stream}
        else:
            block.stream_uses.add(stream)

    def _insert_events(self, block):
        driver = self.driver
        for stream in block.stream_uses:
            event = self._spare_events.pop() if self._spare_events else driver.event_create()
            driver.event_record(event, stream)
            block.event_count += 1
            queue = self._events.get(stream)
            if queue is None:
                queue = self._events[stream] = deque()
            queue.append((event, block))
            self._pending_events += 1
        block.stream_uses = None

    def _process_events(self, synchronize=False):
        """Free the blocks whose events all completed; with ``synchronize``, wait for every event first."""
        driver = self.driver
        for queue in self._events.values():
            # Per-stream FIFO: an unfinished event on one stream does not hold up the others.
            while queue:
                event, block = queue[0]
                if synchronize:
                    driver.event_synchronize(event)
                elif not driver.event_query(event):
                    break
                queue.popleft()
                self._spare_events.append(event)
                self._pending_events -= 1
                block.event_count -= 1
                if block.event_count == 0:
                    self._pending_blocks -= 1
                    st = self._stats
                    off = SMALL if block.pool.is_small else LARGE
                    stat_update(st.pending, off, -1)
                    stat_update(st.pending_bytes, off, -block.size)
                    self._free_block(block)

    def empty_cache(self) -> None:
        """Release every whole cached segment to the device; partly used segments stay (PyTorch's semantics)."""
        if self._captures:  # waiting on events is illegal while capturing; free what is free now
            self._release_whole_segments(self._small)
            self._release_whole_segments(self._large)
            return
        self._release_cached_blocks()

    def set_per_process_memory_fraction(self, fraction: float) -> None:
        """Cap reserved memory at ``fraction`` of the device's total; requests beyond it raise out of memory."""
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"set_per_process_memory_fraction: fraction must be in [0, 1], got {fraction}")
        self._allowed = int(fraction * self.driver.mem_get_info()[1])

