"""``jitorch.cuda.nvtx``: NVTX ranges and marks for Nsight timelines, through CuPy's NVTX bindings.

Without a CUDA device there is no NVTX library to call; every function raises torch's RuntimeError, as CPU-only
PyTorch does, so a script that guards its annotations with ``jitorch.cuda.is_available()`` runs unchanged.

>>> import jitorch
>>> if jitorch.cuda.is_available():
...     with jitorch.cuda.nvtx.range("forward"):
...         pass
"""
from __future__ import annotations

from contextlib import contextmanager

from ._lazy import cupy, has_cuda

__all__ = ["range_push", "range_pop", "range_start", "range_end", "mark", "range"]

_NOT_INSTALLED = "NVTX functions not installed. Are you sure you have a CUDA build?"
_depth = -1  # of the innermost pushed range: torch returns it, CuPy's RangePush returns nothing


def _nvtx():
    if not has_cuda():
        raise RuntimeError(_NOT_INSTALLED)
    nvtx = cupy().cuda.nvtx
    if not getattr(nvtx, "available", True):
        raise RuntimeError(_NOT_INSTALLED)
    return nvtx


def range_push(msg):
    """Open a nested range named ``msg``; returns its depth (0-based), as torch's."""
    global _depth
    _nvtx().RangePush(str(msg))
    _depth += 1
    return _depth


def range_pop():
    """Close the innermost open range; returns its depth."""
    global _depth
    _nvtx().RangePop()
    _depth -= 1
    return _depth + 1


def range_start(msg) -> int:
    """Open a range that may end out of nesting order; returns its id for `range_end`."""
    nvtx = _nvtx()
    start = getattr(nvtx, "RangeStart", None)
    if start is None:  # older CuPy: a pushed range is the closest equivalent
        nvtx.RangePush(str(msg))
        return 0
    return int(start(str(msg)))


def range_end(range_id) -> None:
    nvtx = _nvtx()
    end = getattr(nvtx, "RangeEnd", None)
    if end is None:
        nvtx.RangePop()
    else:
        end(int(range_id))


def mark(msg) -> None:
    """An instantaneous event named ``msg``."""
    _nvtx().Mark(str(msg))


@contextmanager
def range(msg, *args, **kwargs):
    """A range around a block (also a decorator); ``msg`` is formatted with ``args``/``kwargs`` as torch's."""
    range_push(msg.format(*args, **kwargs))
    try:
        yield
    finally:
        range_pop()
