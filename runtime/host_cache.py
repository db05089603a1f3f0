"""A cache of large freed host (NumPy) buffers, so big temporaries skip the kernel's page-fault pass.

A fresh 64 MiB ``np.empty`` is a fresh ``mmap``: the first write to each 4 KiB page faults, and freeing ``munmap``s
it all again, so allocating and filling a new buffer costs about 2.5 times as much as refilling an old one. This
module keeps freed buffers of at least :data:`THRESHOLD` bytes and hands them out again, pages already mapped.

Where the cache starts to pay depends on the C library. glibc serves requests below its mmap threshold from the
heap, and raises that threshold (up to 32 MiB on 64-bit) each time a mapped block is freed, so in a steady loop it
already reuses faulted pages below 32 MiB; there the cache only adds its ~3 us per call (measured: ``np.add`` into a
cached buffer is 0.9-1.1x of a fresh one from 1 to 24 MiB, 2.5x faster at 32 and 64 MiB). Other C libraries map every
large request afresh, so there the threshold is 1 MiB.

**When is a buffer free?** Only when nothing can reach its memory: not the array handed out, nor any view, slice,
``np.asarray`` or DLPack capsule derived from it. NumPy records who keeps memory alive in ``ndarray.base``, and every
derived array's base chain ends at the object that exported the buffer. So each buffer is handed out through a fresh
*exporter*: a ctypes array over the cached raw block (``from_buffer``), of a private subclass whose ``__del__`` puts
the raw block back on a return queue. The exporter dies exactly when the last array derived from it does. (Python
3.11 has no ``__buffer__`` hook, and an ``ndarray`` subclass would not do: NumPy collapses base chains through
arrays of the same type, skipping it.)

**Size classes.** Sizes round up to quarter steps between powers of two (the allocator's ``roundup_power2_divisions``
of 4): at most 25% slack, and untouched slack pages never fault in. A request reuses a freed block of its own class,
the most recently freed first (its pages are the most likely to be in cache).

**Cap.** Freed blocks are kept up to ``max_cached_bytes`` (``host_cache_max_mb`` in ``JITORCH_ALLOC_CONF``;
default the smaller of 1 GiB and an eighth of RAM); beyond it the least recently freed go back to the OS.
``empty_cache()`` releases them all. Blocks in use are never counted against the cap: they are the caller's memory.

**Threads.** ``__del__`` only appends to a deque (atomic under the GIL, and safe when it runs inside a garbage
collection triggered from within this module); the queue is drained under a lock by the next ``empty``.

>>> import numpy as np
>>> from jitorch.runtime.host_cache import HostCache
>>> cache = HostCache(threshold=1 << 20, max_cached_bytes=1 << 30)
>>> a = cache.empty((1024, 1024), np.float32)        # 4 MiB, over this cache's threshold: cached path
>>> a.shape, a.dtype, a.flags.c_contiguous
((1024, 1024), dtype('float32'), True)
>>> address = a.ctypes.data; del a
>>> b = cache.empty((1024, 1024), np.float32)
>>> b.ctypes.data == address, cache.stats()["hits"]
(True, 1)
"""
from __future__ import annotations

import ctypes
import os
import threading
from collections import OrderedDict, deque

import numpy as np

__all__ = ["HostCache", "THRESHOLD", "empty", "empty_cache", "stats", "set_max_cached_bytes",
           "get_max_cached_bytes", "size_class"]


def _default_threshold() -> int:
    import platform

    try:
        glibc = platform.libc_ver()[0] == "glibc"
    except (OSError, ValueError):
        glibc = False
    return 32 << 20 if glibc else 1 << 20


THRESHOLD = _default_threshold()  # bytes; below this np.empty is as fast (see the module docstring)
ALIGNMENT = 64  # a cache line, and the widest vector the compiled kernels use
_DIVISIONS = 4


def size_class(nbytes: int) -> int:
    """``nbytes`` rounded up to the next quarter step between powers of two (4 KiB granularity at least).

    >>> size_class(1 << 20), size_class((1 << 20) + 1), size_class(3 << 20), size_class(64 << 20)
    (1048576, 1310720, 3145728, 67108864)
    """
    if nbytes <= 4096:
        return 4096
    floor = 1 << (nbytes.bit_length() - 1)
    step = max(floor // _DIVISIONS, 4096)
    return -(-nbytes // step) * step


def _default_max_cached_bytes() -> int:
    from .alloc_config import AllocatorConfig

    configured = AllocatorConfig.from_env().host_cache_max
    if configured is not None:
        return configured
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = 8 << 30
    return min(1 << 30, ram // 8)


class HostCache:
    """One cache of large host buffers; the module-level functions use a shared default instance.

    ``threshold``: requests below it go straight to ``np.empty``. ``max_cached_bytes``: freed bytes kept at most
    (``None``: from ``JITORCH_ALLOC_CONF``, or the default). 0 keeps nothing, which still hands out aligned buffers.

    >>> cache = HostCache(threshold=1 << 20, max_cached_bytes=0)
    >>> x = cache.empty(1 << 20, "uint8"); del x
    >>> cache.stats()["cached_bytes"], cache.stats()["evictions"]
    (0, 1)
    """

    def __init__(self, threshold: int | None = None, max_cached_bytes: int | None = None):
        self.threshold = THRESHOLD if threshold is None else int(threshold)
        self._max = _default_max_cached_bytes() if max_cached_bytes is None else int(max_cached_bytes)
        if self._max < 0:
            raise ValueError(f"HostCache: max_cached_bytes must be >= 0, got {self._max}")
        self._lock = threading.Lock()
        self._returned = deque()  # (size class, raw, offset) put back by exporters' __del__, not yet sorted in
        self._free = {}  # size class -> deque of tokens, oldest first
        self._lru = OrderedDict()  # token -> (size class, raw, offset), least recently freed first
        self._token = 0
        self._exporters = {}  # size class -> ctypes exporter type
        self._cached_bytes = 0
        self._counts = {"hits": 0, "misses": 0, "evictions": 0, "live_blocks": 0, "live_bytes": 0,
                        "peak_cached_bytes": 0, "peak_live_bytes": 0}

    # -- the hot path -------------------------------------------------------------------------------------------
    def empty(self, shape, dtype) -> np.ndarray:
        """An uninitialised C-contiguous array, from a cached block when it is at least ``threshold`` bytes.

        >>> HostCache().empty((2, 3), "float64").shape
        (2, 3)
        """
        dtype = np.dtype(dtype)
        if type(shape) is int:
            shape = (shape,)
        nbytes = dtype.itemsize
        for dim in shape:
            if dim < 0:  # let NumPy raise its own error
                return np.empty(shape, dtype)
            nbytes *= dim
        if nbytes < self.threshold or dtype.hasobject:
            return np.empty(shape, dtype)
        cls = size_class(nbytes)
        with self._lock:
            if self._returned:
                self._drain()
            counts = self._counts
            tokens = self._free.get(cls)
            if tokens:
                _, raw, offset = self._lru.pop(tokens.pop())
                self._cached_bytes -= cls
                counts["hits"] += 1
            else:
                raw = np.empty(cls + ALIGNMENT, np.uint8)
                offset = -raw.ctypes.data % ALIGNMENT
                counts["misses"] += 1
            counts["live_blocks"] += 1
            live = counts["live_bytes"] + cls
            counts["live_bytes"] = live
            if live > counts["peak_live_bytes"]:
                counts["peak_live_bytes"] = live
            exporter_type = self._exporters.get(cls) or self._exporter_type(cls)
        exporter = exporter_type.from_buffer(raw, offset)
        exporter._block = (cls, raw, offset)
        return np.ndarray(shape, dtype, buffer=exporter)

    def _exporter_type(self, cls):
        returned = self._returned

        class _Exporter(ctypes.c_uint8 * cls):
            __slots__ = ("_block",)

            def __del__(self):
                # Runs when the last array derived from this buffer is gone. Only an atomic append: this may run in
                # any thread, inside a garbage collection, or while the cache's lock is held.
                try:
                    returned.append(self._block)
                except Exception:  # interpreter shutdown
                    pass

        self._exporters[cls] = _Exporter
        return _Exporter

    def _drain(self):
        """Sort returned blocks into the free lists, then trim to the cap (least recently freed first). Lock held."""
        returned, counts, lru, free = self._returned, self._counts, self._lru, self._free
        while returned:
            cls, raw, offset = returned.popleft()
            counts["live_blocks"] -= 1
            counts["live_bytes"] -= cls
            self._token += 1
            lru[self._token] = (cls, raw, offset)
            tokens = free.get(cls)
            if tokens is None:
                tokens = free[cls] = deque()
            tokens.append(self._token)
            self._cached_bytes += cls
        self._trim(self._max)
        if self._cached_bytes > counts["peak_cached_bytes"]:
            counts["peak_cached_bytes"] = self._cached_bytes

    def _trim(self, limit):
        while self._cached_bytes > limit:
            token, (cls, _, _) = self._lru.popitem(last=False)
            tokens = self._free[cls]
            tokens.remove(token)  # the oldest of its class: at the front
            if not tokens:
                del self._free[cls]
            self._cached_bytes -= cls
            self._counts["evictions"] += 1

    # -- control and statistics ---------------------------------------------------------------------------------
    def empty_cache(self) -> None:
        """Give every cached free block back to the OS; blocks in use are untouched."""
        with self._lock:
            self._drain()
            self._trim(0)

    def set_max_cached_bytes(self, nbytes: int) -> None:
        """Keep at most ``nbytes`` of freed blocks (evicting the least recently freed now if over)."""
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"set_max_cached_bytes: expected a byte count >= 0, got {nbytes}")
        with self._lock:
            self._max = nbytes
            self._drain()

    def get_max_cached_bytes(self) -> int:
        return self._max

    def stats(self) -> dict:
        """Counters: ``hits``/``misses`` (cached-path requests), ``evictions``, ``cached_bytes``/``cached_blocks``
        (freed, kept), ``live_bytes``/``live_blocks`` (handed out, still referenced), their peaks, and the limits.
        Sizes are size-class bytes."""
        with self._lock:
            self._drain()
            out = dict(self._counts)
            out.update(cached_bytes=self._cached_bytes, cached_blocks=len(self._lru), max_cached_bytes=self._max,
                       threshold=self.threshold)
        return out


_default = HostCache()


def empty(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous NumPy array; large ones (>= ``THRESHOLD``) reuse freed buffers of a shared cache.

    >>> import numpy as np
    >>> from jitorch.runtime import host_cache
    >>> out = host_cache.empty((4096, 2048), np.float32)
    >>> np.multiply(np.ones(out.shape, np.float32), 2, out=out)[0, 0]
    np.float32(2.0)
    """
    return _default.empty(shape, dtype)


def empty_cache() -> None:
    """Release the shared cache's freed blocks to the OS."""
    _default.empty_cache()


def stats() -> dict:
    """The shared cache's counters (see :meth:`HostCache.stats`)."""
    return _default.stats()


def set_max_cached_bytes(nbytes: int) -> None:
    """Cap the shared cache's freed bytes (``JITORCH_ALLOC_CONF=host_cache_max_mb:N`` sets it at start-up)."""
    _default.set_max_cached_bytes(nbytes)


def get_max_cached_bytes() -> int:
    return _default.get_max_cached_bytes()
