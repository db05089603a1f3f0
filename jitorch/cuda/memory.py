"""``jitorch.cuda`` memory queries: ``memory_allocated``, ``memory_stats``, ``empty_cache``, ``memory_snapshot``, ...

With CUDA the figures come from jitorch's caching allocator (:mod:`jitorch.runtime.allocator`), through which CuPy
allocates every jitorch CUDA array (:mod:`jitorch.runtime.cuda_memory`); with ``JITORCH_ALLOC_CONF=backend:cupy``
they come from CuPy's default memory pool instead (current figures and peaks only). Without CUDA these do what
CPU-only PyTorch 2.13 does: the counters read 0, ``memory_stats`` is an empty dict, ``empty_cache`` is a no-op, and
the calls that need a driver raise the same exception types torch raises there.

>>> import jitorch.cuda
>>> jitorch.cuda.memory_allocated()
0
>>> jitorch.cuda.memory_stats()
OrderedDict()
"""
from __future__ import annotations

import collections
import warnings

from ._lazy import NOT_COMPILED, cupy, device_index, has_cuda, require_cuda
from ._plot import plot_snapshot

__all__ = ["empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
           "memory_cached", "max_memory_cached", "reset_peak_memory_stats", "reset_max_memory_allocated",
           "reset_max_memory_cached", "reset_accumulated_memory_stats", "memory_stats", "memory_stats_as_nested_dict",
           "memory_summary", "memory_snapshot", "plot_snapshot", "mem_get_info", "set_per_process_memory_fraction",
           "get_per_process_memory_fraction", "caching_allocator_alloc", "caching_allocator_delete"]

# Peaks of CuPy's pool (backend:cupy only), which keeps only current figures; updated whenever a figure is read.
_peaks = {"allocated": 0, "reserved": 0}
_fraction = {}  # device index -> fraction set by set_per_process_memory_fraction


def _allocator(device=None):
    """The device's caching allocator (pending frees applied), or None under ``backend:cupy``. Needs CUDA."""
    from ..runtime.cuda_memory import installed_hook

    hook = installed_hook()
    return None if hook is None else hook.synced().allocator(device_index(device))


def _pool_current() -> tuple[int, int]:
    """(allocated, reserved) bytes of CuPy's default pool (``backend:cupy``), updating the recorded peaks."""
    pool = cupy().get_default_memory_pool()
    allocated, reserved = int(pool.used_bytes()), int(pool.total_bytes())
    _peaks["allocated"] = max(_peaks["allocated"], allocated)
    _peaks["reserved"] = max(_peaks["reserved"], reserved)
    return allocated, reserved


def _no_driver(name: str):
    # CPU-only torch fails in these with an AttributeError (its _C module lacks the CUDA hook); same type here,
    # with a message that says what is actually missing.
    return AttributeError(f"jitorch.cuda.{name}() needs a CUDA device, and none is available")


def empty_cache() -> None:
    """Release cached, unused GPU memory (whole free segments) back to the driver; a no-op without CUDA."""
    if has_cuda():
        from ..runtime.cuda_memory import installed_hook

        hook = installed_hook()
        if hook is not None:
            hook.empty_cache()
        cupy().get_default_memory_pool().free_all_blocks()


def _figure(device, name, peak=False):
    """One byte figure: ``name`` is ``"allocated"`` or ``"reserved"``; 0 without CUDA."""
    if not has_cuda():
        return 0
    alloc = _allocator(device)
    if alloc is None:
        current = dict(zip(("allocated", "reserved"), _pool_current()))
        return _peaks[name] if peak else current[name]
    stats = alloc.memory_stats()
    return stats[f"{name}_bytes.all.{'peak' if peak else 'current'}"]


def memory_allocated(device=None) -> int:
    """Bytes currently held by tensors (rounded block sizes): 0 without CUDA."""
    return _figure(device, "allocated")


def max_memory_allocated(device=None) -> int:
    """Peak of ``memory_allocated`` since start or the last ``reset_peak_memory_stats``: 0 without CUDA."""
    return _figure(device, "allocated", peak=True)


def memory_reserved(device=None) -> int:
    """Bytes held by the caching allocator (in use or cached): 0 without CUDA."""
    return _figure(device, "reserved")


def max_memory_reserved(device=None) -> int:
    """Peak of ``memory_reserved``: 0 without CUDA."""
    return _figure(device, "reserved", peak=True)


def memory_cached(device=None) -> int:
    """Deprecated name of ``memory_reserved`` (warns like torch)."""
    warnings.warn("`torch.cuda.memory_cached` has been renamed to `torch.cuda.memory_reserved`", FutureWarning,
                  stacklevel=2)
    return memory_reserved(device)


def max_memory_cached(device=None) -> int:
    """Deprecated name of ``max_memory_reserved`` (warns like torch)."""
    warnings.warn("`torch.cuda.max_memory_cached` has been renamed to `torch.cuda.max_memory_reserved`",
                  FutureWarning, stacklevel=2)
    return max_memory_reserved(device)


def reset_peak_memory_stats(device=None) -> None:
    """Restart peak tracking from the current figures; raises ``AttributeError`` without CUDA, like torch."""
    if not has_cuda():
        raise _no_driver("reset_peak_memory_stats")
    alloc = _allocator(device)
    if alloc is not None:
        alloc.reset_peak_memory_stats()
        return
    _peaks["allocated"] = _peaks["reserved"] = 0
    _pool_current()


def reset_max_memory_allocated(device=None) -> None:
    """Deprecated: same as ``reset_peak_memory_stats``."""
    warnings.warn("torch.cuda.reset_max_memory_allocated now calls torch.cuda.reset_peak_memory_stats, which resets "
                  "/all/ peak memory stats.", FutureWarning, stacklevel=2)
    return reset_peak_memory_stats(device)


def reset_max_memory_cached(device=None) -> None:
    """Deprecated: same as ``reset_peak_memory_stats``."""
    warnings.warn("torch.cuda.reset_max_memory_cached now calls torch.cuda.reset_peak_memory_stats, which resets "
                  "/all/ peak memory stats.", FutureWarning, stacklevel=2)
    return reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device=None) -> None:
    """Zero the cumulative counters (allocations, frees, ``num_ooms``...); raises ``AttributeError`` without CUDA."""
    if not has_cuda():
        raise _no_driver("reset_accumulated_memory_stats")
    alloc = _allocator(device)
    if alloc is not None:
        alloc.reset_accumulated_memory_stats()


def memory_stats(device=None) -> collections.OrderedDict:
    """Flat, sorted ``"allocated_bytes.all.current"``-style statistics: an empty ``OrderedDict`` without CUDA."""
    if not has_cuda():
        return collections.OrderedDict()
    alloc = _allocator(device)
    if alloc is not None:
        return collections.OrderedDict(sorted(alloc.memory_stats().items()))
    allocated, reserved = _pool_current()
    flat = {}
    for key, current, peak in (("allocated_bytes", allocated, _peaks["allocated"]),
                               ("reserved_bytes", reserved, _peaks["reserved"]),
                               ("active_bytes", allocated, _peaks["allocated"])):
        flat.update({f"{key}.all.current": current, f"{key}.all.peak": peak})
    flat.update(num_ooms=0, num_alloc_retries=0)
    return collections.OrderedDict(sorted(flat.items()))


def memory_stats_as_nested_dict(device=None) -> dict:
    """The allocator's statistics as nested dicts (``stats["allocated_bytes"]["all"]["peak"]``): ``{}`` without
    CUDA."""
    nested: dict = {}
    for key, value in memory_stats(device).items():
        node = nested
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def memory_summary(device=None, abbreviated=False) -> str:
    """A human-readable table of ``memory_stats``; CPU-only torch raises ``KeyError`` (its stats are empty)."""
    alloc = _allocator(device) if has_cuda() else None
    if alloc is not None:
        return alloc.memory_summary(abbreviated)
    stats = memory_stats(device)
    rows = [("Allocated memory", "allocated_bytes"), ("Active memory", "active_bytes"),
            ("GPU reserved memory", "reserved_bytes")]
    lines = ["|" + "=" * 75 + "|", "|{:^75}|".format("PyTorch CUDA memory summary, device ID 0"),
             "|" + "-" * 75 + "|", "| {:<28}| {:>20} | {:>20} |".format("Metric", "Cur Usage", "Peak Usage")]
    for label, key in rows:
        current, peak = stats[f"{key}.all.current"], stats[f"{key}.all.peak"]  # KeyError without CUDA, as in torch
        lines.append("| {:<28}| {:>17} B | {:>17} B |".format(label, current, peak))
    lines.append("|" + "=" * 75 + "|")
    return "\n".join(lines) + "\n"


def memory_snapshot(mempool_id=None, include_traces=True) -> list:
    """Every segment of every device's allocator with its blocks, in ``torch.cuda.memory_snapshot`` format.

    Raises ``AttributeError`` without CUDA, like CPU-only torch. Draw it with :func:`plot_snapshot`.
    """
    if not has_cuda():
        raise _no_driver("memory_snapshot")
    from ..runtime.cuda_memory import installed_hook

    hook = installed_hook()
    if hook is None:
        return []
    hook.synced()
    segments = []
    for _, alloc in sorted(hook.allocators().items()):
        segments.extend(seg for seg in alloc.memory_snapshot()
                        if mempool_id is None or tuple(seg["segment_pool_id"]) == tuple(mempool_id))
    return segments


def caching_allocator_alloc(size, device=None, stream=None) -> int:
    """A raw device pointer of ``size`` bytes from the caching allocator (free it with ``caching_allocator_delete``)."""
    require_cuda()
    alloc = _allocator(device)
    if alloc is None:
        raise RuntimeError("caching_allocator_alloc: JITORCH_ALLOC_CONF=backend:cupy bypasses jitorch's allocator")
    handle = stream if isinstance(stream, int) else (stream.cuda_stream if stream is not None
                                                     else int(cupy().cuda.get_current_stream().ptr))
    block = alloc.malloc(int(size), handle)
    _raw_blocks[block.ptr] = (alloc, block)
    return block.ptr


def caching_allocator_delete(mem_ptr) -> None:
    """Free a pointer from ``caching_allocator_alloc``."""
    entry = _raw_blocks.pop(int(mem_ptr), None)
    if entry is None:
        raise RuntimeError(f"caching_allocator_delete: {int(mem_ptr):#x} was not allocated by caching_allocator_alloc")
    entry[0].free(entry[1])


_raw_blocks: dict = {}


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes on the device from the driver; raises ``AssertionError`` without CUDA, like torch."""
    require_cuda()
    free, total = cupy().cuda.runtime.memGetInfo()
    return int(free), int(total)


def set_per_process_memory_fraction(fraction, device=None) -> None:
    """Cap this process's share of GPU memory (``0 <= fraction <= 1``): allocations beyond it raise
    ``OutOfMemoryError`` after the allocator has freed what it can."""
    if not has_cuda():
        raise AssertionError(NOT_COMPILED)
    if not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    index = device_index(device)
    _fraction[index] = float(fraction)
    alloc = _allocator(index)
    if alloc is not None:
        alloc.set_per_process_memory_fraction(float(fraction))
    else:
        total = cupy().cuda.runtime.memGetInfo()[1]
        cupy().get_default_memory_pool().set_limit(size=int(total * fraction))


def get_per_process_memory_fraction(device=None) -> float:
    """The fraction set by ``set_per_process_memory_fraction`` (1.0 by default)."""
    require_cuda()
    return _fraction.get(device_index(device), 1.0)
