"""The input gradient of a max pool whose windows overlap (``MaxPool2d(3, 2, 1)``), as one generated gather kernel.

Each input position sums the gradients of the windows whose index names it. NumPy does that as a scatter-add
(``bincount`` over the whole input: 25 ms for ResNet's stem pool on (32, 64, 32, 32), torch 10). Here the kernel
iterates over the (padded) input as tiles of the stride, ``(N, C, tile_0, within_0, ..., within_last, tile_last)``:
a position in tile ``t`` can only belong to windows ``t - j`` for ``j < m`` (``m = ceil(((k - 1) * d + 1) / s)`` per
dimension), so it loads those windows' gradient and index at fixed offsets, and adds a gradient where the index
equals its own flat position. The windows are added in the order torch's backward visits them (ascending), so the
float sums are the same. An index never becomes an address: the gradient and index arrays are copied into buffers
padded by ``m - 1`` windows in front (index -1, which names no position), and padding positions carry -2.

>>> import numpy as np
>>> g = np.ones((1, 1, 2, 2), np.float32)
>>> idx = np.array([[[[5, 5], [5, 15]]]])  # three windows share position 5
>>> gradient(g, idx, (1, 1, 4, 4), (3, 3), (2, 2), (1, 1), (1, 1)).reshape(4, 4)[1].tolist()
[0.0, 3.0, 0.0, 0.0]
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..codegen.ir import FLOAT_IR_DTYPES, Buffer, Kernel, Store, const, load, op
from ..codegen.llvm_compile import compile_kernel
from ..codegen.llvm_objcache import default_cache
from ..codegen.llvm_pool import grain_rows
from ..runtime import host_cache
from ..runtime.host_pointer import data_address
from .native_eager import launch

__all__ = ["gradient", "MAX_CANDIDATES"]

MAX_CANDIDATES = 16  # windows a position loads (4 for a 3x3 stride-2 pool, 8 in 3-d)
_MAX_KERNELS = 64
_kernels: dict = {}


def _layout(spatial, outs, kernel, stride, padding, dilation):
    """Per dim: (candidates m, tiles T, padded window count G)."""
    dims = []
    for n, o, k, s, p, d in zip(spatial, outs, kernel, stride, padding, dilation):
        m = -(-((k - 1) * d + 1) // s)
        tiles = -(-(n + p) // s)
        dims.append((m, tiles, max(tiles, o) + m - 1))
    return dims


def _strides(shape):
    return [math.prod(shape[i + 1:]) for i in range(len(shape))]


def _build(dt, n, c, spatial, outs, kernel, stride, padding, dilation):
    """(compiled kernel, positions array) for this geometry. Buffers: g padded, index padded (one per candidate
    window each), positions, out (padded to whole tiles)."""
    nd = len(spatial)
    dims = _layout(spatial, outs, kernel, stride, padding, dilation)
    gshape = (n, c) + tuple(g for _, _, g in dims)
    oshape = (n, c) + tuple(t * s for (_, t, _), s in zip(dims, stride))
    gst, ost = _strides(gshape), _strides(oshape)
    # Positions over the padded tiles: the flat input index, or -2 in the padding.
    grid = np.full(oshape[2:], -2, np.int64)
    inside = tuple(slice(p, p + size) for p, size in zip(padding, spatial))
    grid[inside] = np.arange(math.prod(spatial), dtype=np.int64).reshape(spatial)
    pst = _strides(oshape[2:])

    def kernel_dims(batch, tile, within):
        pairs = [(tile[i], within[i]) for i in range(nd - 1)] + [(within[-1], tile[-1])]
        return tuple(batch) + tuple(x for pair in pairs for x in pair)

    shape = kernel_dims((n, c), [t for _, t, _ in dims], stride)
    g_strides = kernel_dims(gst[:2], gst[2:], [0] * nd)
    buffers, value = [], const(0, dt)
    for js in itertools.product(*(range(m - 1, -1, -1) for m, _, _ in dims)):  # windows in ascending order
        offset = sum((m - 1 - j) * st for (m, _, _), j, st in zip(dims, js, gst[2:]))
        buffers += [Buffer(dt, g_strides, offset), Buffer("i64", g_strides, offset)]
    count = len(buffers) // 2
    positions, out = 2 * count, 2 * count + 1
    buffers.append(Buffer("i64", kernel_dims((0, 0), [p * s for p, s in zip(pst, stride)], pst)))
    buffers.append(Buffer(dt, kernel_dims(ost[:2], [o * s for o, s in zip(ost[2:], stride)], ost[2:])))
    for i in range(count):
        match = op("eq", load(2 * i + 1, "i64"), load(positions, "i64"))
        value = op("add", value, op("where", match, load(2 * i, dt), const(0, dt)))
    ir = Kernel(shape, tuple(buffers), (Store(out, value),))
    return compile_kernel(ir, cache=default_cache()), grid, count, gshape, oshape


def gradient(g, indices, shape, kernel, stride, padding, dilation):
    """The input gradient ``shape`` of a max pool from its output gradient ``g`` and flat ``indices`` (within each
    plane), for C-contiguous float32/float64 NumPy arrays; None otherwise or past `MAX_CANDIDATES` windows."""
    if type(g) is not np.ndarray or g.dtype not in FLOAT_IR_DTYPES or type(indices) is not np.ndarray or \
            indices.dtype != np.int64 or indices.shape != g.shape or g.ndim != len(shape) or g.ndim < 3:
        return None
    n, c, spatial, outs = shape[0], shape[1], tuple(shape[2:]), g.shape[2:]
    dims = _layout(spatial, outs, kernel, stride, padding, dilation)
    if math.prod(m for m, _, _ in dims) > MAX_CANDIDATES or 0 in g.shape or 0 in shape:
        return None
    key = (g.dtype, tuple(shape), outs, tuple(kernel), tuple(stride), tuple(padding), tuple(dilation))
    found = _kernels.get(key)
    if found is None:
        if len(_kernels) >= _MAX_KERNELS:
            _kernels.clear()
        found = _kernels[key] = _build(FLOAT_IR_DTYPES[g.dtype], n, c, spatial, outs, kernel, stride, padding, dilation)
    compiled, grid, count, gshape, oshape = found
    interior = (slice(None), slice(None)) + tuple(slice(m - 1, m - 1 + o) for (m, _, _), o in zip(dims, outs))
    gp = np.zeros(gshape, g.dtype)
    gp[interior] = g
    ip = np.full(gshape, -1, np.int64)
    ip[interior] = indices
    out = host_cache.empty(oshape, g.dtype)
    addresses = [data_address(a) for _ in range(count) for a in (gp, ip)] + [data_address(grid), data_address(out)]
    launch(compiled, addresses, math.prod(oshape), grain_rows(compiled.source, compiled.outer))
    inside = (slice(None), slice(None)) + tuple(slice(p, p + size) for p, size in zip(padding, spatial))
    return np.ascontiguousarray(out[inside])
