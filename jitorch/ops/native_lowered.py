"""Eager CPU rows run through the kernels that CPU graphs and compiled graphs lower them to.

Batch norm and max pooling are per-channel reductions and window scans that the NumPy rows make in many passes over
strided views. Their lowerings (`jitorch.cpu._lower_batch_norm`, `jitorch.cpu._lower_pool`) already write each as
one generated kernel; here an eager call builds the same `Record` a graph would, compiles the lowering once per
layout (kept with its constant arrays) and runs it over the call's arrays, split over jitorch's threads
(`native_eager.launch`). One lowering serves eager, CPU graphs and compiled graphs.

Measured on a (128, 16, 28, 28) float32 input (2 cores, 1 thread): batch norm forward 0.91 ms against 2.96 for the
NumPy row and its backward 1.15 against 5.44.

Each function takes NumPy arrays and returns None where the lowering does not apply (small, non-contiguous, other
dtypes, shapes the lowering refuses); the caller keeps its NumPy code then.

>>> import numpy as np
>>> x = np.random.default_rng(0).standard_normal((8, 3, 16, 16)).astype(np.float32)
>>> out, mean, var = batch_norm(x, None, None, 1e-5)
>>> bool(np.allclose(mean.ravel(), x.mean(axis=(0, 2, 3)), atol=1e-6)), mean.shape
(True, (1, 3, 1, 1))
>>> values, indices = max_pool(x, (2, 2), (2, 2), (0, 0), (1, 1), (8, 8))
>>> bool((values == x.reshape(8, 3, 8, 2, 8, 2).max(axis=(3, 5))).all())
True
"""
from __future__ import annotations

import ctypes
import functools
import math

import numpy as np

from ..codegen.llvm_compile import compile_kernel
from ..codegen.llvm_objcache import default_cache
from ..codegen.llvm_pool import grain_rows, shared_pool, split_call
from ..codegen.llvm_program import Function
from ..runtime.threads import get_num_threads, parallel_for
from ..runtime import host_cache, memory_owner
from ..runtime.host_pointer import data_address
from .conv_layouts import pad_contiguous
from .native_eager import launch

__all__ = ["batch_norm", "batch_norm_backward", "max_pool", "max_pool_scatter", "MIN_SIZE", "MIN_SPATIAL"]

MIN_SIZE = 4096  # below this the NumPy rows' passes cost less than a kernel call
MIN_SPATIAL = 8  # batch norm: a shorter inner loop (per image and channel) does not vectorize
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_MAX_PLANS = 128
_plans: dict = {}


def _plan(name, inputs, outs, attrs):
    """The compiled steps of row ``name``'s lowering for this layout: ``[(kernel, sources)]``, a source per IR
    buffer: ``(operand index, byte offset)`` into ``outs + inputs`` (views of operands), or ``(None, array)`` for
    a constant the lowering made. False where the lowering refuses these operands."""
    from ..cpu._lower import NotLowerable  # the CPU graph package imports the op rows: load it on first use
    from ..cpu._lower_batch_norm import BATCH_NORM_OPS
    from ..cpu._lower_pool import POOL_OPS
    from ..cpu._recorder import Record
    from .table import OPS

    try:
        steps = {**BATCH_NORM_OPS, **POOL_OPS}[name](
            Record("kernel", None, "", OPS[name], list(inputs), (), None, dict(attrs), list(outs)))
    except NotLowerable:
        return False
    operands = list(outs) + list(inputs)
    plan = []
    for kernel, arrays, _ in steps:
        sources = []
        for a in arrays:
            j = next((j for j, o in enumerate(operands) if o is not None and memory_owner(o) is memory_owner(a)), None)
            sources.append((j, data_address(a) - data_address(operands[j])) if j is not None else (None, a))
        if isinstance(kernel, Function):
            plan.append((_FunctionRunner(kernel).run, sources))
            continue
        compiled = compile_kernel(kernel, cache=default_cache())
        numel, grain = math.prod(kernel.shape), grain_rows(kernel, compiled.outer)
        plan.append((functools.partial(launch, compiled, numel=numel, grain=grain), sources))
    return plan


class _FunctionRunner:
    """A lowering's `Function` (a generated function such as the 2x2 pool's) called from Python over its rows,
    split over jitorch's threads where the function says it pays (the native pool, else the Python one)."""

    def __init__(self, function):
        self.function, self.address, self.ints = function, function.address(), list(function.ints)
        self.types = function.types
        self.fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64,
                                   *(ctypes.c_void_p if t == "ptr" else ctypes.c_int64 for t in self.types))(
                                       self.address)

    def run(self, addresses):
        f, threads = self.function, get_num_threads()
        parallel = (shared_pool(threads) or parallel_for) if threads > 1 and f.worth and f.rows > 1 else None
        split_call(parallel, self.fn, self.address, self.types, list(addresses) + self.ints, f.rows)


def _run(name, inputs, outs, attrs):
    """Run row ``name``'s lowering into ``outs``; False where it does not apply, or where two operands share memory
    (a plan maps each buffer to an operand by its memory: one made for ``g`` aliasing ``x`` would read ``x`` through
    ``g`` for every later, unrelated pair of the same layout)."""
    roots = [id(memory_owner(a)) for a in list(outs) + list(inputs) if a is not None]
    if len(set(roots)) != len(roots):
        return False
    key = (name, tuple(None if a is None else (a.dtype.str, a.shape, a.strides) for a in inputs),
           tuple((o.dtype.str, o.shape) for o in outs), tuple(sorted(attrs.items())))
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        plan = _plans[key] = _plan(name, inputs, outs, attrs)
    if plan is False:
        return False
    operands = list(outs) + list(inputs)
    for run, sources in plan:
        run([data_address(operands[j]) + offset if j is not None else data_address(offset) for j, offset in sources])
    return True


def _array(a, dtypes=_FLOATS):
    return type(a) is np.ndarray and a.dtype in dtypes and a.flags.c_contiguous


def _batch(x):
    """Whether batch norm's input takes this path: large, with a long spatial part."""
    return _array(x) and x.ndim >= 3 and x.size >= MIN_SIZE and x.size // (x.shape[0] * x.shape[1]) >= MIN_SPATIAL


def _channel_vector(v, x):
    """A per-channel operand (``(C,)``, or any shape of C elements such as ``(1, 1, C)``) as a 1-d vector, None for
    None, False where it does not fit (the lowering reads a vector's first stride as the channel's)."""
    if v is None:
        return None
    if not _array(v, (x.dtype,)) or v.size != x.shape[1]:
        return False
    return v.reshape(-1)


def batch_norm(x, weight, bias, eps):
    """``(out, mean, var)`` of training-mode batch norm (biased variance, statistics shaped ``(1, C, 1, ...)``), or
    None."""
    if not _batch(x):
        return None
    weight, bias = _channel_vector(weight, x), _channel_vector(bias, x)
    if weight is False or bias is False:
        return None
    stat = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    outs = [host_cache.empty(x.shape, x.dtype), np.empty(stat, x.dtype), np.empty(stat, x.dtype)]
    return tuple(outs) if _run("native_batch_norm", [x, weight, bias], outs, {"eps": float(eps)}) else None


def batch_norm_backward(g, x, mean, var, weight, eps):
    """``(gx, gw, gb)`` of training-mode batch norm from the forward's statistics, or None."""
    if not _batch(x) or not _array(g, (x.dtype,)) or g.shape != x.shape:
        return None
    weight = _channel_vector(weight, x)
    stats = [_channel_vector(np.ascontiguousarray(a, x.dtype), x) for a in (mean, var)]
    if weight is False or any(s is None or s is False for s in stats):
        return None
    outs = [host_cache.empty(x.shape, x.dtype), np.empty(x.shape[1], x.dtype), np.empty(x.shape[1], x.dtype)]
    found = _run("native_batch_norm_backward", [g, x, *stats, weight], outs, {"eps": float(eps)})
    return tuple(outs) if found else None


_POOLED = _FLOATS + (np.dtype(np.int32), np.dtype(np.int64))
_MAX_WINDOW = 9  # positions the generated scan loads (`jitorch.cpu._lower_pool.MAX_WINDOW`, checked by a test)


def max_pool(x, kernel, stride, padding, dilation, out_sizes, pads=None, fill=None):
    """(values, flat int64 indices within each plane) of a max pool whose windows fit the input, or None.

    A padded (or ceil-mode) pool passes ``pads`` (``(left, right)`` per spatial dim, the windows' extent) and the
    dtype's lowest value as ``fill``: the scan runs over a filled copy and its indices are mapped back to the
    input's plane. The fill never wins a comparison, but it is where a window's scan starts: a window whose input
    values all equal the fill keeps the fill's position (its index is then meaningless), which the caller replaces
    by the window's first input position, as torch names it (`conv_ops._max_pool_kernel`).
    """
    if not _array(x, _POOLED) or x.size < MIN_SIZE or math.prod(kernel) > _MAX_WINDOW:
        return None  # (before any padded copy)
    spatial = x.shape[2:]
    padded = pads is not None and any(lo or hi for lo, hi in pads)
    src = pad_contiguous(np, x, pads, fill) if padded else x
    outs = [host_cache.empty(x.shape[:2] + tuple(out_sizes), x.dtype),
            host_cache.empty(x.shape[:2] + tuple(out_sizes), np.int64)]
    attrs = dict(kernel=tuple(kernel), stride=tuple(stride), padding=(0,) * len(spatial), dilation=tuple(dilation),
                 out_sizes=tuple(out_sizes))
    if (any(padding) and not padded) or not _run("max_pool", [src], outs, attrs):
        return None
    if padded:
        flat = np.zeros(outs[1].shape, np.int64)
        for c, (lo, _), n in zip(np.unravel_index(outs[1], src.shape[2:]), pads, spatial):
            flat *= n
            flat += c - lo
        outs[1] = flat
    return tuple(outs)


def max_pool_scatter(g, indices, shape, stride, padding):
    """The input gradient of a disjoint-window max pool whose strides tile ``shape`` exactly, or None."""
    if not _array(g, _POOLED) or not _array(indices, (np.dtype(np.int64),)) or math.prod(shape) < MIN_SIZE or \
            stride is None or padding is None:
        return None
    out = host_cache.empty(tuple(shape), g.dtype)
    found = _run("max_pool_scatter", [g, indices], [out], {"stride": tuple(stride), "padding": tuple(padding)})
    return out if found else None
