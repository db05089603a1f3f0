"""Max pooling and its disjoint-window gradient as elementwise IR kernels, shared by CPU graphs and compiled graphs.

Both rows are window scans that NumPy runs as several passes over strided views (the 2x2 pool: a de-interleaving copy,
three compare-and-select passes and an index build). Here each is one loop:

- ``max_pool`` iterates over the output; each of the window's ``prod(kernel)`` positions is a load of the input at a
  fixed offset, scanned in window order with PyTorch's rule ``take = v > best || isnan(v)`` (the first of equal
  maxima, the last NaN). The index is the winning position's constant offset plus the window origin, read from a
  constant array broadcast over batch and channels. Unpadded pools whose windows stay inside the input only.
- ``max_pool_scatter`` iterates over the input as ``(N, C, out_0, stride_0, ..., stride_last, out_last)`` tiles: an
  input position takes its tile's gradient when the tile's index names it, else 0. Each position is written once,
  no scatter, and an index never becomes an address. Unpadded pools whose strides tile the input exactly.

Each returns ``[(kernel, arrays per IR buffer, written arrays)]``; the constant arrays are returned among the arrays
and the caller keeps them alive (a CPU graph holds them; a compiled graph registers them with ``constant``).

>>> import numpy as np
>>> from jitorch.ops.table import OPS
>>> from jitorch.cpu._recorder import Record
>>> x = np.arange(16, dtype=np.float64).reshape(1, 1, 4, 4)
>>> v, i = np.empty((1, 1, 2, 2), np.float64), np.empty((1, 1, 2, 2), np.int64)
>>> attrs = dict(kernel=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), out_sizes=(2, 2))
>>> [(k.shape, len(arrays)) for k, arrays, _ in max_pool(Record("kernel", None, "", OPS["max_pool"], [x], (), None,
...                                                              attrs, [v, i]))]
[((1, 1, 2, 2), 7)]
>>> x, v = x.astype(np.float32), v.astype(np.float32)  # the 2x2 float32 pool: a generated function
>>> [k.name for k, _, _ in max_pool(Record("kernel", None, "", OPS["max_pool"], [x], (), None, attrs, [v, i]))]
['maxpool2_forward']
"""
from __future__ import annotations

import itertools
import math
from functools import partial

import numpy as np

from .._compile.lower import IR_DTYPES
from ..codegen.ir import Buffer, Kernel, Store, const, load, op
from ..codegen.llvm_maxpool2 import pool_address
from ..codegen.llvm_objcache import default_cache
from ..codegen.llvm_pool import SPLIT_WORK
from ..codegen.llvm_program import Function
from ._lower import NotLowerable, element_strides

__all__ = ["POOL_OPS", "max_pool", "max_pool_scatter", "MAX_WINDOW"]

# Window positions one loop loads (each is a buffer): 3x3 and smaller pools.
MAX_WINDOW = 9


def _trailing(spatial):
    """Element strides of a C-contiguous array of shape ``spatial``."""
    return [math.prod(spatial[i + 1:]) for i in range(len(spatial))]


def _float_or_int(array, name):
    dt = IR_DTYPES.get(array.dtype)
    if dt not in ("f32", "f64", "i32", "i64"):
        raise NotLowerable(f"{name} of {array.dtype}")
    return dt


def max_pool(rec, constant=lambda a: a):
    """The values and flat indices of an unpadded max pool as one elementwise kernel (see the module notes)."""
    x = rec.datas[0]
    values, indices = rec.outs
    a = rec.attrs
    kernel, stride, padding, dilation, outs = (tuple(a[k]) for k in ("kernel", "stride", "padding", "dilation",
                                                                       "out_sizes"))
    if not isinstance(x, np.ndarray) or values is None or indices is None or rec.casts:
        raise NotLowerable("max_pool with aliased outputs or cast operands")
    dt = _float_or_int(x, "max_pool")
    if any(padding):
        raise NotLowerable(f"max_pool with padding {padding}")
    if math.prod(kernel) > MAX_WINDOW:
        raise NotLowerable(f"max_pool over a {kernel} window (the loop loads at most {MAX_WINDOW} positions)")
    spatial = x.shape[2:]
    if x.size == 0 or values.size == 0 or any((o - 1) * s + d * (k - 1) >= n
                                               for o, s, d, k, n in zip(outs, stride, dilation, kernel, spatial)):
        raise NotLowerable("max_pool of an empty input or with windows past its edge (ceil_mode)")
    if (dt == "f32" and kernel == (2, 2) and stride == (2, 2) and dilation == (1, 1)
            and all(a.flags.c_contiguous for a in (x, values, indices))):
        return [(_pool_function("forward", x.shape, values.shape), [x, values, indices], [values, indices])]
    plane = _trailing(spatial)
    views, offsets = [], []
    for position in itertools.product(*(range(k) for k in kernel)):
        start = [p * d for p, d in zip(position, dilation)]
        key = tuple(slice(s0, s0 + s * (o - 1) + 1, s) for s0, s, o in zip(start, stride, outs))
        views.append(x[(slice(None), slice(None)) + key])
        offsets.append(sum(s0 * p for s0, p in zip(start, plane)))
    origins = np.zeros(outs, np.int64)
    for i, (o, s) in enumerate(zip(outs, stride)):
        shape = [1] * len(outs)
        shape[i] = o
        origins += (np.arange(o, dtype=np.int64) * (s * plane[i])).reshape(shape)
    origins = constant(origins)
    best, index = load(0, dt), const(offsets[0], "i64")
    for j in range(1, len(views)):
        v = load(j, dt)
        take = op("gt", v, best)
        if dt in ("f32", "f64"):
            take = op("or", take, op("ne", v, v))
        best, index = op("where", take, v, best), op("where", take, const(offsets[j], "i64"), index)
    n = len(views)
    index = op("add", index, load(n, "i64"))
    buffers = [Buffer(dt, element_strides(v)) for v in views]
    buffers.append(Buffer("i64", (0, 0) + element_strides(origins)))
    buffers += [Buffer(dt, element_strides(values)), Buffer("i64", element_strides(indices))]
    k = Kernel(tuple(values.shape), tuple(buffers), (Store(n + 1, best), Store(n + 2, index)))
    return [(k, views + [origins, values, indices], [values, indices])]


def max_pool_scatter(rec, constant=lambda a: a):
    """The input gradient of an unpadded disjoint-window max pool as one elementwise kernel over the input's tiles."""
    g, indices = rec.datas
    out = rec.outs[0]
    stride, padding = rec.attrs.get("stride"), rec.attrs.get("padding")
    if not isinstance(g, np.ndarray) or not isinstance(indices, np.ndarray) or out is None or rec.casts:
        raise NotLowerable("max_pool_scatter with aliased output or cast operands")
    if stride is None or padding is None or any(padding):
        raise NotLowerable("max_pool_scatter without the pool's stride, or of a padded pool")
    kernel, dilation = rec.attrs.get("kernel"), rec.attrs.get("dilation")
    if kernel is not None and any(s < d * (k - 1) + 1 for k, s, d in zip(kernel, stride, dilation)):
        raise NotLowerable(f"max_pool_scatter of overlapping windows (kernel {tuple(kernel)}, stride {tuple(stride)}):"
                           " a position takes the sum of several windows' gradients")
    dt = _float_or_int(out, "max_pool_scatter")
    if g.dtype != out.dtype or IR_DTYPES.get(indices.dtype) != "i64" or out.size == 0:
        raise NotLowerable("max_pool_scatter of mixed dtypes or an empty input")
    spatial, outs = out.shape[2:], g.shape[2:]
    if len(stride) != len(spatial) or any(o * s != n for o, s, n in zip(outs, stride, spatial)):
        raise NotLowerable(f"max_pool_scatter: strides {tuple(stride)} do not tile {tuple(spatial)} exactly")
    if (dt == "f32" and tuple(stride) == (2, 2)
            and all(a.flags.c_contiguous for a in (g, indices, out))):
        return [(_pool_function("backward", out.shape, g.shape), [g, indices, out], [out])]
    plane = _trailing(spatial)
    positions = constant(np.arange(math.prod(spatial), dtype=np.int64).reshape(spatial))
    # Dims (N, C, out_0, stride_0, ..., stride_last, out_last): within-tile before tile along the last dim, so the
    # inner loop runs along an output row (the gradient contiguous, the input at the stride) instead of over a
    # tile's few positions.
    nd = len(outs)

    def dims(batch, tile, within):
        """Strides over the kernel's dims from a buffer's batch strides and its per-dim tile and within-tile ones."""
        pairs = [(tile[i], within[i]) for i in range(nd - 1)] + [(within[-1], tile[-1])]
        return tuple(batch) + tuple(x for pair in pairs for x in pair)

    g_st, i_st, o_st = element_strides(g), element_strides(indices), element_strides(out)
    g_strides = dims(g_st[:2], g_st[2:], [0] * nd)
    i_strides = dims(i_st[:2], i_st[2:], [0] * nd)
    o_strides = dims(o_st[:2], [o_st[2 + i] * s for i, s in enumerate(stride)], o_st[2:])
    p_strides = dims((0, 0), [plane[i] * s for i, s in enumerate(stride)], plane)
    shape = dims(out.shape[:2], outs, tuple(stride))
    value = op("where", op("eq", load(1, "i64"), load(2, "i64")), load(0, dt), const(0, dt))
    buffers = (Buffer(dt, g_strides), Buffer("i64", i_strides), Buffer("i64", p_strides), Buffer(dt, o_strides))
    return [(Kernel(shape, buffers, (Store(3, value),)), [g, indices, positions, out], [out])]


def _pool_function(direction, input_shape, output_shape):
    """The 2x2 stride-2 float32 pool function (`codegen.llvm_maxpool2`) over C-contiguous NCHW arrays: rows of
    vectors where the IR kernels above gather (forward 1.14 -> 0.31 ms, backward 1.28 -> 0.25 ms for
    128 x 16 x 28 x 28 on one Zen 4 core)."""
    n, c, h, w = input_shape
    oh, ow = output_shape[2:]
    return Function(f"maxpool2_{direction}", partial(pool_address, direction, default_cache()), 3, (h, w, oh, ow),
                    n * c * oh, n * c * h * w >= SPLIT_WORK)


# Row name -> its lowering (``constant`` keyword: how the caller keeps a constant array).
POOL_OPS = {"max_pool": max_pool, "max_pool_scatter": max_pool_scatter}
