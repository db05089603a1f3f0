"""``jitorch.cuda`` memory queries: ``memory_allocated``, ``memory_stats``, ``empty_cache``, ...

Without CUDA these do what CPU-only PyTorch 2.13 does: the counters read 0, ``memory_stats`` is an empty dict,
``empty_cache`` is a no-op, and the calls that need a driver raise the same exception types torch raises there.
With CUDA the numbers come from CuPy's default memory pool, which backs jitorch's CUDA arrays.

>>> import jitorch.cuda
>>> jitorch.cuda.memory_allocated()
0
>>> jitorch.cuda.memory_stats()
OrderedDict()
"""
from __future__ import annotations

import collections
import warnings

from ._lazy import NOT_COMPILED, cupy, has_cuda, require_cuda

__all__ = ["empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
           "memory_cached", "max_memory_cached", "reset_peak_memory_stats", "reset_max_memory_allocated",
           "reset_max_memory_cached", "reset_accumulated_memory_stats", "memory_stats", "memory_stats_as_nested_dict",
           "memory_summary", "mem_get_info", "set_per_process_memory_fraction", "get_per_process_memory_fraction"]

# Peaks are tracked here because CuPy's pool keeps only current figures; updated whenever a figure is read.
_peaks = {"allocated": 0, "reserved": 0}
_fraction = {"value": 1.0}


def _current() -> tuple[int, int]:
    """(allocated, reserved) bytes on the GPU, updating the recorded peaks."""
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
    """Release cached, unused GPU memory back to the driver; a no-op without CUDA."""
    if has_cuda():
        cupy().get_default_memory_pool().free_all_blocks()


def memory_allocated(device=None) -> int:
    """Bytes currently held by tensors: 0 without CUDA."""
    return _current()[0] if has_cuda() else 0


def max_memory_allocated(device=None) -> int:
    """Peak of ``memory_allocated`` since start or the last ``reset_peak_memory_stats``: 0 without CUDA."""
    if not has_cuda():
        return 0
    _current()
    return _peaks["allocated"]


def memory_reserved(device=None) -> int:
    """Bytes held by the caching allocator (in use or cached): 0 without CUDA."""
    return _current()[1] if has_cuda() else 0


def max_memory_reserved(device=None) -> int:
    """Peak of ``memory_reserved``: 0 without CUDA."""
    if not has_cuda():
        return 0
    _current()
    return _peaks["reserved"]


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
    _peaks["allocated"] = _peaks["reserved"] = 0
    _current()


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
    """Reset cumulative counters; raises ``AttributeError`` without CUDA, like torch."""
    if not has_cuda():
        raise _no_driver("reset_accumulated_memory_stats")


def memory_stats_as_nested_dict(device=None) -> dict:
    """The allocator's statistics as nested dicts: ``{}`` without CUDA."""
    if not has_cuda():
        return {}
    allocated, reserved = _current()

    def stat(current, peak):
        return {"all": {"current": current, "peak": peak, "allocated": peak, "freed": peak - current}}

    return {"allocated_bytes": stat(allocated, _peaks["allocated"]),
            "reserved_bytes": stat(reserved, _peaks["reserved"]),
            "active_bytes": stat(allocated, _peaks["allocated"]), "num_ooms": 0, "num_alloc_retries": 0}


def memory_stats(device=None) -> collections.OrderedDict:
    """Flat, sorted ``"allocated_bytes.all.current"``-style statistics: an empty ``OrderedDict`` without CUDA."""
    flat = []

    def walk(prefix, value):
        if isinstance(value, dict):
            for key, sub in value.items():
                walk(f"{prefix}.{key}" if prefix else key, sub)
        else:
            flat.append((prefix, value))

    walk("", memory_stats_as_nested_dict(device))
    return collections.OrderedDict(sorted(flat))


def memory_summary(device=None, abbreviated=False) -> str:
    """A human-readable table of ``memory_stats``; CPU-only torch raises ``KeyError`` (its stats are empty)."""
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


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes on the device from the driver; raises ``AssertionError`` without CUDA, like torch."""
    require_cuda()
    free, total = cupy().cuda.runtime.memGetInfo()
    return int(free), int(total)


def set_per_process_memory_fraction(fraction, device=None) -> None:
    """Cap this process's share of GPU memory (``0 <= fraction <= 1``)."""
    if not has_cuda():
        raise AssertionError(NOT_COMPILED)
    if not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _fraction["value"] = float(fraction)
    total = cupy().cuda.runtime.memGetInfo()[1]
    cupy().get_default_memory_pool().set_limit(size=int(total * fraction))


def get_per_process_memory_fraction(device=None) -> float:
    """The fraction set by ``set_per_process_memory_fraction`` (1.0 by default)."""
    require_cuda()
    return _fraction["value"]
