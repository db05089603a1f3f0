"""Blocks, segments and the per-stream best-fit free lists of the caching allocator.

A *segment* is one raw device allocation. It is carved into *blocks* that form a doubly linked list in address
order (``prev``/``next``); a block with neither neighbour is a whole segment, the only kind that can go back to the
device. Free blocks wait in a :class:`BlockPool`, one sorted list per stream, so a lookup is a binary search for the
smallest block that fits on the caller's stream.
"""
from __future__ import annotations

from bisect import bisect_left, insort


class Segment:
    """One raw device allocation: its address range, owning stream and pool, and its lowest block (``head``)."""

    __slots__ = ("addr", "size", "stream", "pool", "head")

    def __init__(self, addr, size, stream, pool):
        self.addr, self.size, self.stream, self.pool = addr, size, stream, pool
        self.head = None

    def blocks(self):
        """The segment's blocks in address order."""
        out, block = [], self.head
        while block is not None:
            out.append(block)
            block = block.next
        return out

    @property
    def is_small(self):
        return self.pool.is_small


class Block:
    """A range of a segment: handed to a caller (``allocated``), waiting on events, or free in its pool.

    ``ptr`` is the device address callers use; ``size`` the rounded size it occupies; ``requested`` what the caller
    asked for. ``stream_uses`` holds the other streams that touched the block (``record_stream``); ``event_count``
    counts events still to complete before the block may be reused.

    >>> seg = Segment(4096, 2048, 0, BlockPool(True))
    >>> b = Block(seg, 4096, 2048); b.is_split, b.ptr
    (False, 4096)
    """

    __slots__ = ("segment", "ptr", "size", "requested", "stream", "pool", "prev", "next", "allocated", "stream_uses",
                 "event_count", "gc_base")

    def __init__(self, segment, ptr, size):
        self.segment = segment
        self.ptr = ptr
        self.size = size
        self.requested = 0
        self.stream = segment.stream
        self.pool = segment.pool
        self.prev = None
        self.next = None
        self.allocated = False
        self.stream_uses = None
        self.event_count = 0
        self.gc_base = 0

    @property
    def is_split(self):
        return self.prev is not None or self.next is not None

    def __repr__(self):
        state = "allocated" if self.allocated else ("pending_free" if self.event_count else "free")
        return f"Block(ptr={self.ptr:#x}, size={self.size}, stream={self.stream!r}, {state})"


class BlockPool:
    """Free blocks of one size class (small or large) of one owner (the default pool or a private pool).

    Per stream, a list of ``(size, ptr, block)`` kept sorted, so ``bisect`` finds the best fit (smallest size, then
    lowest address) and the address breaks ties before Python would ever compare two blocks.

    >>> pool = BlockPool(is_small=True)
    >>> seg = Segment(0, 4096, 0, pool)
    >>> pool.insert(Block(seg, 0, 4096)); pool.best_fit(0, 1024)
    Block(ptr=0x0, size=4096, stream=0, free)
    >>> pool.best_fit(1, 1024) is None
    True
    """

    __slots__ = ("is_small", "owner", "free", "free_calls")

    def __init__(self, is_small, owner=None):
        self.is_small = is_small
        self.owner = owner  # None for the default pools, the private pool's id otherwise
        self.free = {}  # stream -> sorted list of (size, ptr, block)
        self.free_calls = 0  # lookups so far; a free block's age for garbage collection is measured in these

    def insert(self, block):
        block.gc_base = self.free_calls
        entries = self.free.get(block.stream)
        if entries is None:
            self.free[block.stream] = [(block.size, block.ptr, block)]
        else:
            insort(entries, (block.size, block.ptr, block))

    def remove(self, block):
        entries = self.free[block.stream]
        del entries[bisect_left(entries, (block.size, block.ptr))]

    def best_fit(self, stream, size):
        """The smallest free block on ``stream`` of at least ``size`` bytes, left in the pool; None if there is none."""
        entries = self.free.get(stream)
        if entries:
            i = bisect_left(entries, (size,))
            if i < len(entries):
                return entries[i][2]
        return None

    def blocks(self):
        """Every free block, all streams."""
        return [entry[2] for entries in self.free.values() for entry in entries]

    def __len__(self):
        return sum(len(entries) for entries in self.free.values())


class PrivatePool:
    """Memory set aside for one owner (a graph capture, a ``MemPool``): its own small and large free lists.

    ``use_count`` counts the captures or users sharing it; at zero the pool's memory may go back to the device.
    ``segments`` counts its live device allocations so the pool can be forgotten once the last one is released.
    """

    __slots__ = ("id", "use_count", "segments", "small", "large")

    def __init__(self, pool_id):
        self.id = pool_id
        self.use_count = 1
        self.segments = 0
        self.small = BlockPool(True, pool_id)
        self.large = BlockPool(False, pool_id)
