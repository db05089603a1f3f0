"""CuPy's device allocations routed through jitorch's caching allocator (``cupy.cuda.set_allocator``).

Every CuPy array jitorch creates (and every temporary CuPy makes for it: reduction scratch, cuBLAS workspaces) asks
the function installed with ``cupy.cuda.set_allocator`` for memory. :class:`CupyAllocatorHook` answers with a
``cupy.cuda.MemoryPointer`` over a block of a per-device :class:`~jitorch.runtime.allocator.CachingAllocator` built on
:class:`~jitorch.runtime.cupy_driver.CupyDriver`. The pointer's memory is a ``cupy.cuda.UnownedMemory`` whose owner is
a small :class:`_BlockOwner`: CuPy keeps it alive exactly as long as any array viewing the memory, and its
``__del__`` gives the block back. The block's stream is the stream current at allocation, as in PyTorch.

**Reentrancy.** ``__del__`` may run inside a garbage collection triggered in the middle of ``malloc``, or in another
thread. So it only appends the block to a queue and frees directly when it can take the lock without waiting;
otherwise the lock holder, or the next allocation or statistics query, drains the queue. ``memory_allocated`` and
friends drain first, so they read exact figures right after ``del``.

Devices and streams are asked through two callables, so the whole hook runs on a CPU-only machine with
:class:`~jitorch.runtime.driver.FakeDriver` (``UnownedMemory`` needs no device when given its device id).

>>> from jitorch.runtime.allocator import CachingAllocator
>>> from jitorch.runtime.driver import FakeDriver
>>> hook = CupyAllocatorHook(lambda dev: CachingAllocator(FakeDriver(device=dev)),
...                          current_device=lambda: 0, current_stream=lambda: 0)   # doctest: +SKIP
>>> ptr = hook.malloc(1000)                                                       # doctest: +SKIP
>>> hook.allocator(0).memory_allocated(); del ptr; hook.allocator(0).memory_allocated()  # doctest: +SKIP
1024
0
"""
from __future__ import annotations

import threading
from collections import deque

__all__ = ["CupyAllocatorHook", "install", "installed_hook", "uninstall"]


class _BlockOwner:
    """Owns one allocator block on behalf of CuPy; dies with the last array viewing the memory."""

    __slots__ = ("hook", "alloc", "block")

    def __init__(self, hook, alloc, block):
        self.hook, self.alloc, self.block = hook, alloc, block

    def __del__(self):
        try:
            self.hook._release(self.alloc, self.block)
        except Exception:  # interpreter shutdown: the process gives everything back anyway
            pass


class CupyAllocatorHook:
    """The ``cupy.cuda.set_allocator`` function: blocks of jitorch's caching allocator as CuPy memory pointers.

    ``make_allocator(device) -> CachingAllocator`` builds a device's allocator on first use; ``current_device()`` and
    ``current_stream()`` (an int ``cudaStream_t``) default to CuPy's runtime queries.
    """

    def __init__(self, make_allocator=None, current_device=None, current_stream=None):
        import cupy

        self._memory = cupy.cuda.memory
        self._make = make_allocator or _cupy_device_allocator
        self._device = current_device or cupy.cuda.runtime.getDevice
        self._stream = current_stream or (lambda: cupy.cuda.get_current_stream().ptr)
        self._allocators = {}
        self._lock = threading.Lock()
        self._pending = deque()  # (allocator, block) released while the lock was taken

    def allocator(self, device=None):
        """The caching allocator of ``device`` (default: the current one), built on first use."""
        device = self._device() if device is None else int(device)
        alloc = self._allocators.get(device)
        if alloc is None:
            alloc = self._allocators[device] = self._make(device)
        return alloc

    def allocators(self) -> dict:
        """Every allocator built so far, by device index."""
        return dict(self._allocators)

    def malloc(self, size):
        """What CuPy calls for memory: a ``MemoryPointer`` to a block of at least ``size`` bytes."""
        device = self._device()
        alloc = self._allocators.get(device) or self.allocator(device)
        stream = self._stream()
        with self._lock:
            if self._pending:
                self._drain()
            block = alloc.malloc(size, stream)
        mem = self._memory.UnownedMemory(block.ptr, size, _BlockOwner(self, alloc, block), device)
        return self._memory.MemoryPointer(mem, 0)

    __call__ = malloc

    def _release(self, alloc, block):
        self._pending.append((alloc, block))
        if self._lock.acquire(False):
            try:
                self._drain()
            finally:
                self._lock.release()

    def _drain(self):
        pending = self._pending
        while pending:
            alloc, block = pending.popleft()
            alloc.free(block)

    def synced(self):
        """Drain frees queued by ``__del__`` calls that found the lock taken; returns the hook (for chaining)."""
        if self._pending:
            with self._lock:
                self._drain()
        return self

    def block_of(self, array):
        """The allocator block under a CuPy array (any view of it), or None for memory not from this hook."""
        owner = _owner_of(array)
        return None if owner is None else owner.block

    def record_stream(self, array, stream: int) -> None:
        """Mark ``array``'s block as used by ``stream``: once freed, it is reused only after that stream's work
        queued so far (PyTorch's ``Tensor.record_stream``). Memory not from this hook is left alone."""
        owner = _owner_of(array)
        if owner is not None:
            with self._lock:
                owner.alloc.record_stream(owner.block, stream)

    def empty_cache(self) -> None:
        """Release every whole cached segment of every device; a device capturing a graph is left alone, since
        ``cudaFree`` (which synchronises the device) would invalidate the capture."""
        with self._lock:
            self._drain()
            for alloc in self._allocators.values():
                if not alloc.capturing():
                    alloc.empty_cache()

    def pool_capture(self, capturer, device=None):
        """A :class:`~jitorch.runtime.allocator.PoolCapture` on ``device``'s allocator (default: the current device)
        whose allocator calls hold this hook's lock: what ``jitorch.cuda.CUDAGraph`` captures through."""
        from ._allocator_capture import PoolCapture

        return PoolCapture(self.allocator(device), capturer, lock=self._lock)

    def capturing(self) -> bool:
        """Whether any device's allocator is routing allocations to a private pool (a capture is under way)."""
        return any(alloc.capturing() for alloc in self._allocators.values())


def _owner_of(array):
    owner = getattr(getattr(getattr(array, "data", None), "mem", None), "_owner", None)
    return owner if isinstance(owner, _BlockOwner) else None


def _cupy_device_allocator(device):
    from .allocator import CachingAllocator
    from .cupy_driver import CupyDriver

    return CachingAllocator(CupyDriver(device))


_installed = {"hook": None, "previous": None}


def install(hook=None) -> CupyAllocatorHook:
    """Route CuPy's allocations through ``hook`` (a new default hook if None); returns it. Idempotent."""
    import cupy

    if _installed["hook"] is not None and hook is None:
        return _installed["hook"]
    hook = hook or CupyAllocatorHook()
    if _installed["hook"] is None:
        _installed["previous"] = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(hook.malloc)
    _installed["hook"] = hook
    return hook


def installed_hook():
    """The hook CuPy allocates through, or None before :func:`install`."""
    return _installed["hook"]


def uninstall() -> None:
    """Give CuPy back the allocator it had before :func:`install` (blocks already handed out stay valid)."""
    import cupy

    if _installed["hook"] is not None:
        cupy.cuda.set_allocator(_installed["previous"])
        _installed["hook"] = _installed["previous"] = None
