"""Eager CPU softmax, log_softmax, their backward rows and layer norm as generated row kernels (one per row op).

NumPy makes each of these four to seven passes over the data with a temporary per pass; torch's native kernels make
two or three, and so do these: the compiled path's own row lowering (`jitorch._compile.lower_rows`: the max, then
the exp kept in the output while its sum accumulates, then the rescale), built here for a plain ``(rows, n)``
layout. They take non-empty C-contiguous float32/float64 NumPy arrays reduced over the last dimension(s), and
return None for anything else (the caller keeps its NumPy code). Kernels are size-generic and cached on disk; rows
are split over jitorch's threads.

>>> import numpy as np
>>> x = np.random.default_rng(0).standard_normal((64, 100)).astype(np.float32)
>>> y = softmax(x)
>>> bool(np.allclose(y, np.exp(x) / np.exp(x).sum(1, keepdims=True), rtol=1e-6))
True
>>> softmax(x[:, :0]) is None  # empty: nothing for a kernel to do
True
"""
from __future__ import annotations

import numpy as np

from ..codegen.ir import FLOAT_IR_DTYPES, Buffer, Kernel, Store, const, load, op, simplify
from ..codegen.llvm_compile import compile_kernel
from ..codegen.llvm_objcache import default_cache
from ..runtime import host_cache
from ..runtime.host_pointer import data_address
from ..runtime.threads import parallel_for
from . import half_log_softmax
from .cascade_sum import NAIVE_ROWS, sum_rows
from .native_eager import HELD_MAX, launch_arrays

__all__ = ["softmax", "log_softmax", "softmax_backward", "log_softmax_backward", "layer_norm", "layer_norm_backward",
           "MIN_SIZE"]

# The kernels win at any size: softmax's three NumPy passes took 8.5 us on 32 x 32 against the kernel's 4.1, 4.8
# against 3.2 on 2 x 3 (a short kernel runs through `launch_arrays`' held call). Layer norm's NumPy form is eight
# passes (8 x 128: 16 us against the kernel's 11, the row of a decoding step).
MIN_SIZE = 1
LAYER_NORM_MIN_SIZE = 1
_MAX_KERNELS = 256
_kernels: dict = {}


def _build(name, dt, nin, extras, eps, rows, n, scalars=()):
    """The row kernel of ``name`` over a C-contiguous (rows, n) space. Buffers: the outputs (the full result, then
    per-row values), the inputs, then the ``extras`` present (layer norm's weight and bias, vectors of n). Inputs
    numbered in ``scalars`` are one value for the whole space (a ``sum().backward()`` gradient). Layer norm reads its
    input once more, last, at each row's first element (the shift of its sums: `lower_rows.layer_norm`)."""
    from .._compile import lower_rows  # the compiler package imports the op rows: load it on first use
    from .._compile.lower import Passes

    b = Passes()
    nout = {"layer_norm": 3, "layer_norm_backward": 1 + bool(extras and extras[0])}.get(name, 1)
    xs = [load(nout + i, dt) for i in range(nin)]
    params, slot = [], nout + nin
    for present in extras:
        params.append(load(slot, dt) if present else None)
        slot += present
    if name == "layer_norm":  # the input again after the extras, read at each row's first element
        values = lower_rows.layer_norm(b, xs[0], load(slot, dt), n, *params, eps)
    elif name == "layer_norm_backward":
        values = _layer_norm_grad_input(b, *xs, params[0], n)[:nout]
    else:
        values = (getattr(lower_rows, name)(b, *xs),)
    stores = list(b.stores)
    for j, value in enumerate(values):
        full = j == 0 or name == "layer_norm_backward"
        stores.append(Store(j, value, phase=b._phase(value)) if full else Store(j, value, row=True))
    b.stores = simplify(stores)
    b._stash()
    rows_in = ROW_INPUTS.get(name, ())
    buffers = [Buffer(dt, (n, 1))] + [Buffer(dt, (n, 1) if name == "layer_norm_backward" else (1, 0))] * (nout - 1) + \
        [Buffer(dt, (0, 0) if i in scalars else (1, 0) if i in rows_in else (n, 1)) for i in range(nin)] + \
        [Buffer(dt, (0, 1))] * sum(extras) + [Buffer(dt, (n, 0))] * (name == "layer_norm")
    return compile_kernel(Kernel((rows, n), tuple(buffers), tuple(b.stores), 1), cache=default_cache())


ROW_INPUTS = {"layer_norm_backward": (2, 3)}  # inputs with one value per row (mean, rstd)


def _layer_norm_grad_input(b, g, x, mean, rstd, weight, n):
    """(gx, g * xhat): ``rstd * (gxh - mean(gxh) - xhat * mean(gxh * xhat))`` with ``gxh = g * weight`` and
    ``xhat = (x - mean) * rstd``; ``g * xhat`` is kept for the weight gradient, one column sum (a BLAS product)."""
    dt = x.dtype
    xhat = op("mul", op("sub", x, mean), rstd)
    gxh = g if weight is None else op("mul", g, weight)
    inv_n = const(1 / n, dt)
    c1 = op("mul", b.reduce("sum", gxh), inv_n)
    c2 = op("mul", b.reduce("sum", op("mul", gxh, xhat)), inv_n)
    return op("mul", rstd, op("sub", op("sub", gxh, c1), op("mul", xhat, c2))), op("mul", g, xhat)


def _kernel(name, dt, nin, present, eps, rows, n):
    key = (name, dt, nin, present, eps, rows, n)
    kernel = _kernels.get(key)
    if kernel is None:
        if len(_kernels) >= _MAX_KERNELS:
            _kernels.clear()
        kernel = _kernels[key] = _build(name, dt, nin, present, eps, rows, n)
    return kernel


def _new(shape, dtype, small):
    """A result array; ``small`` (the input is below the host cache's threshold, tested once per plan): straight from
    NumPy, as the host cache's size classes are for blocks it could reuse."""
    return np.empty(shape, dtype) if small else host_cache.empty(shape, dtype)


def _row_plan(name, x, dim):
    """(kernel, small, grain, numel) of the softmax-family row ``name`` over ``x``'s last dim, or None where the kernels
    do not take ``x``'s dtype, dim or size. Kept in `_kernels` per (name, shape, dtype, dim): a short row's kernel
    runs in about a microsecond, and the checks and the kernel's key cost another."""
    if x.dtype not in FLOAT_IR_DTYPES or x.ndim == 0 or x.size < MIN_SIZE or dim not in (-1, x.ndim - 1):
        return None
    n = x.shape[-1]
    rows = x.size // n
    kernel = _kernel(name, FLOAT_IR_DTYPES[x.dtype], 2 if name.endswith("_backward") else 1, (), None, rows, n)
    if len(_kernels) >= _MAX_KERNELS:  # (plans per shape, beside the kernels: bounded together)
        _kernels.clear()
    plan = _kernels[(name, x.shape, x.dtype, dim)] = (kernel, x.nbytes < host_cache.THRESHOLD, max(1, (1 << 15) // n),
                                                      rows * n)
    return plan


def _run(plan, x, *inputs):
    """The plan's kernel on ``x`` (and the backward's second input): a new result of ``x``'s shape."""
    kernel, small, grain, numel = plan
    out = np.empty(x.shape, x.dtype) if small else host_cache.empty(x.shape, x.dtype)  # (`_new`, inline)
    launch_arrays(kernel, [out, x, *inputs], numel, grain)
    return out


def softmax(x, dim=-1):
    """Softmax of a C-contiguous float array over its last dimension, or None (see the module notes)."""
    if type(x) is not np.ndarray or not x.flags.c_contiguous:
        return None
    plan = _kernels.get(("softmax", x.shape, x.dtype, dim)) or _row_plan("softmax", x, dim)
    return None if plan is None else _run(plan, x)


def log_softmax(x, dim=-1):
    """Log-softmax over the last dimension, or None; float16/bfloat16 arrays along any dim with ATen's roundings."""
    if type(x) is not np.ndarray:
        return None
    if x.dtype in half_log_softmax.HALF_DTYPES:
        return half_log_softmax.log_softmax(x, dim)
    if not x.flags.c_contiguous:
        return None
    plan = _kernels.get(("log_softmax", x.shape, x.dtype, dim)) or _row_plan("log_softmax", x, dim)
    return None if plan is None else _run(plan, x)


def _pair_plan(name, g, y, dim):
    """`_row_plan` of a backward row, or None unless ``g`` and ``y`` are C-contiguous arrays of one dtype and shape."""
    if type(g) is not np.ndarray or type(y) is not np.ndarray or y.dtype != g.dtype or y.shape != g.shape or \
            not (g.flags.c_contiguous and y.flags.c_contiguous):
        return None
    return _kernels.get((name, g.shape, g.dtype, dim)) or _row_plan(name, g, dim)


def softmax_backward(g, y, dim=-1):
    """``y * (g - sum(g * y))`` over the last dimension, or None."""
    plan = _pair_plan("softmax_backward", g, y, dim)
    return None if plan is None else _run(plan, g, y)


def log_softmax_backward(g, y, dim=-1):
    """``g - exp(y) * sum(g)`` over the last dimension, or None (float16/bfloat16: any dim, as ATen rounds)."""
    if type(g) is np.ndarray and g.dtype in half_log_softmax.HALF_DTYPES and type(y) is np.ndarray:
        return half_log_softmax.log_softmax_backward(g, y.astype(g.dtype), dim)
    plan = _pair_plan("log_softmax_backward", g, y, dim)
    return None if plan is None else _run(plan, g, y)


def _plan(name, x, k, eps, present, scalars=()):
    """(kernel, row size, rows, statistics' shape, small, scratch statistics) of a layer norm row over the last ``k``
    dims of ``x``, or None where the kernels do not take ``x``'s dtype or dims. Kept in `_kernels` per input shape: a
    small call's kernel runs in about a microsecond, so the checks and shape arithmetic are done once per shape."""
    key = (name, x.shape, x.dtype, k, eps, present, scalars)
    plan = _kernels.get(key)
    if plan is None:
        if x.dtype not in FLOAT_IR_DTYPES or not 1 <= k <= x.ndim or x.size < LAYER_NORM_MIN_SIZE:
            return None
        n = 1
        for s in x.shape[x.ndim - k:]:
            n *= s
        rows = x.size // n
        if len(_kernels) >= _MAX_KERNELS:
            _kernels.clear()
        kernel = _build(name, FLOAT_IR_DTYPES[x.dtype], 1 if name == "layer_norm" else 4, present,
                        None if eps is None else float(eps), rows, n, scalars)
        small = x.nbytes < host_cache.THRESHOLD  # small results straight from NumPy (see `_new`)
        stat_shape = x.shape[:x.ndim - k] + (1,) * k
        scratch = (np.empty(stat_shape, x.dtype), np.empty(stat_shape, x.dtype)) \
            if name == "layer_norm" and x.size < HELD_MAX else None
        plan = _kernels[key] = (kernel, n, rows, stat_shape, small, scratch)
    return plan


def _param_ok(p, dtype, n):
    return type(p) is np.ndarray and p.dtype == dtype and p.size == n and p.flags.c_contiguous


def layer_norm(x, weight, bias, k, eps, stats=True):
    """(out, mean, rstd) of layer norm over the last ``k`` dimensions (statistics shaped as the row's), or None.
    ``stats=False`` (no autograd node keeps them): a short call writes the statistics to its plan's scratch arrays,
    two allocations fewer (a third of a microsecond each, on an 8 x 32 call of 4)."""
    if type(x) is not np.ndarray or not x.flags.c_contiguous:
        return None
    # The plan under a key of its own: `_plan`'s, with its name and nested tuples, took twice as long to hash.
    key = (x.shape, x.dtype, k, eps, weight is not None, bias is not None)
    plan = _kernels.get(key)
    if plan is None:
        plan = _plan("layer_norm", x, k, eps, key[4:])
        if plan is None:
            return None
        _kernels[key] = plan
    kernel, n, rows, stat_shape, small, scratch = plan
    dtype = x.dtype
    arrays = [None, None, None, x]
    for p in (weight, bias):
        if p is not None:  # (`_param_ok` inline: a call per parameter is a tenth of a microsecond)
            if type(p) is not np.ndarray or p.dtype != dtype or p.size != n or not p.flags.c_contiguous:
                return None
            arrays.append(p)
    arrays.append(x)  # read at each row's first element
    out = arrays[0] = np.empty(x.shape, dtype) if small else host_cache.empty(x.shape, dtype)
    if stats or scratch is None:
        mean, rstd = arrays[1], arrays[2] = np.empty(stat_shape, dtype), np.empty(stat_shape, dtype)
    else:  # (written, never read: calls sharing them need no order)
        mean, rstd = arrays[1], arrays[2] = scratch
    launch_arrays(kernel, arrays, rows * n, max(1, (1 << 15) // n))
    return out, mean, rstd


def _one_value(g):
    """The single value behind ``g`` when it is a broadcast scalar (``sum().backward()``'s gradient), else None."""
    if g.size > 1 and not any(g.strides):
        return g[(0,) * (g.ndim - 1)][:1]  # a view of the one value
    return None


def _column_sums(a, rows, dtype):
    """Column sums of a (rows, n) array: a few rows added one after another by NumPy (as exact as torch's tree over
    so few, and cheaper than BLAS's setup), long rows as a cascade, else one BLAS product with ones: one pass, where
    ``einsum`` over ``g`` and ``xhat`` took three times as long (32 x 128 x 768), accumulating row after row per
    column as the einsum did."""
    if rows <= NAIVE_ROWS:
        return a.sum(axis=0)  # (`sum_rows`'s own sum of a few rows, without its checks)
    if a.shape[1] > 4096:
        return sum_rows(np, a)
    return np.ones(rows, dtype) @ a


def layer_norm_backward(g, x, mean, rstd, weight, k):
    """(gx, gw, gb) of layer norm over the last ``k`` dimensions from the forward's statistics, or None: gx in one
    row kernel (which also writes ``g * xhat`` when there is a weight), the parameter gradients as column sums."""
    if type(x) is not np.ndarray or not x.flags.c_contiguous or type(g) is not np.ndarray or g.dtype != x.dtype or \
            g.shape != x.shape:
        return None
    # ``sum().backward()`` hands in a broadcast scalar: the kernel reads its one value (no copy, no pass over it).
    scalar = _one_value(g)
    plan = _plan("layer_norm_backward", x, k, None, (weight is not None,), () if scalar is None else (0,))
    if plan is None:
        return None
    kernel, n, rows, _, small, _ = plan
    dtype = x.dtype
    if weight is not None and not _param_ok(weight, dtype, n):
        return None
    g = np.ascontiguousarray(g) if scalar is None else scalar
    mean, rstd = np.ascontiguousarray(mean, dtype), np.ascontiguousarray(rstd, dtype)
    if mean.size != rows or rstd.size != rows:
        return None
    shape = x.shape[x.ndim - k:]
    if scalar is None and NAIVE_ROWS < rows and n <= 4096 and x.nbytes >= 2 * _BLOCK_BYTES:
        gx, gw, gb = _backward_blocked(kernel, g, x, mean, rstd, weight, rows, n, small)
        return gx, (np.zeros(n, dtype) if gw is None else gw).reshape(shape), gb.reshape(shape)
    gx = _new(x.shape, dtype, small)
    arrays = [gx, g, x, mean, rstd]
    if weight is not None:
        g_xhat = _new((rows, n), dtype, small)
        arrays[1:1] = [g_xhat]
        arrays.append(weight)
    launch_arrays(kernel, arrays, rows * n, max(1, (1 << 15) // n))
    if scalar is None:
        gb = _column_sums(g.reshape(rows, n), rows, dtype)
    else:  # ``rows`` equal values: their sum, rounded once (``fill``: half np.full's call cost)
        gb = np.empty(n, dtype)
        gb.fill(float(scalar[0]) * rows)
    gw = np.zeros(shape, dtype) if weight is None else _column_sums(g_xhat, rows, dtype)
    return gx, gw.reshape(shape), gb.reshape(shape)


_BLOCK_BYTES = 1 << 19  # a block's g * xhat, column-summed while it is still in the core's cache


def _backward_blocked(kernel, g, x, mean, rstd, weight, rows, n, small):
    """(gx, gw or None, gb) of `layer_norm_backward` a block of rows at a time: each block's ``g * xhat`` goes to a
    scratch that is column-summed (with the block's ``g``) right after the kernel wrote it, a partial sum per block.
    Written out whole and read back, with ``g`` read again for ``gb``, it made the backward twice as slow (4096 x 1024
    float32: 7 ms, against 3.5 ms in blocks of 128 rows). Blocks run on jitorch's threads, each with its scratch."""
    dtype, item = x.dtype, x.itemsize
    block = max(1, _BLOCK_BYTES // (n * item))
    count = -(-rows // block)
    gx = _new(x.shape, dtype, small)
    g2 = g.reshape(rows, n)
    partial = np.empty((2, count, n), dtype)  # per block: the column sums of g * xhat, of g
    ones = np.ones(block, dtype)
    gx_at, g_at, x_at, mean_at, rstd_at = (data_address(a) for a in (gx, g, x, mean, rstd))
    params = () if weight is None else (data_address(weight),)
    row_bytes = n * item

    def run(first, stop):
        scratch = None if weight is None else np.empty((block, n), dtype)
        for b in range(first, stop):
            start = b * block
            size = min(rows, start + block) - start
            at = start * row_bytes
            rows_out = (gx_at + at,) if weight is None else (gx_at + at, data_address(scratch))
            kernel(0, size, *rows_out, g_at + at, x_at + at, mean_at + start * item, rstd_at + start * item, *params)
            np.dot(ones[:size], g2[start:start + size], out=partial[1, b])
            if weight is not None:
                np.dot(ones[:size], scratch[:size], out=partial[0, b])

    parallel_for(run, count)
    return gx, None if weight is None else np.add.reduce(partial[0], axis=0), np.add.reduce(partial[1], axis=0)
