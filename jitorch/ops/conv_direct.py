"""Stride-1 1-D and 2-D CPU convolutions through the generated direct kernel (`codegen.llvm_conv`), no im2col.

The window copy of im2col writes ``prod(kernel)`` times the input before BLAS sees it; the direct kernel reads the
padded input in place, so a 3x3 layer of a small-image CNN runs 2-4x faster than copy + GEMM (measured in
``bench/bench_conv.py``). It computes whole register chunks of output columns, so rows that fill too little of the
last chunk (7 or 8 columns in 16 lanes) stay with the GEMM, as do strided convolutions, 3-D ones and device arrays.

>>> import numpy as np
>>> x, w = np.ones((1, 1, 4, 16), np.float32), np.ones((8, 1, 3, 3), np.float32)
>>> direct_forward(np, x, w, None, (1, 1), [(1, 1), (1, 1)], (1, 1), 1, (4, 16))[0, 0, :2, :3]
array([[4., 6., 6.],
       [6., 9., 9.]], dtype=float32)
>>> direct_forward(np, x, w, None, (2, 2), [(1, 1), (1, 1)], (1, 1), 1, (2, 8)) is None  # strided: the GEMM's
True
"""
from __future__ import annotations

import math

import numpy as np

from ..codegen.llvm_conv import DirectConv, conv_lanes, conv_registers
from ..codegen.llvm_conv_weight import DirectConvWeight
from ..codegen.llvm_objcache import default_cache
from ..runtime.threads import get_num_threads, parallel_for

__all__ = ["direct_forward", "direct_weight"]

_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_MIN_LANE_USE = 0.75  # the share of the row's register lanes that must hold output columns
_MAX_TAPS = 64  # the taps are unrolled: a larger kernel would make an oversized function
_PARALLEL_MIN_FLOPS = 2_000_000
_kernels: dict = {}


def _block(per_group):
    """Output channels per register tile: 8 where the group's channel count allows."""
    return next(b for b in (8, 4, 2, 1) if per_group % b == 0)


def _applies(xp, x, other, stride, outs, taps):
    """The element type's name when the direct kernels take this convolution, else None."""
    dtype = _DTYPES.get(x.dtype)
    if (xp is not np or type(x) is not np.ndarray or dtype is None or other.dtype != x.dtype
            or len(outs) not in (1, 2) or any(s != 1 for s in stride) or min(outs) < 1 or taps > _MAX_TAPS):
        return None
    lanes = conv_lanes(dtype)
    return dtype if outs[-1] / (-(-outs[-1] // lanes) * lanes) >= _MIN_LANE_USE else None


def _as_2d(pads, dilation, *arrays):
    """A 1-D convolution's operands as 2-D ones of height 1."""
    return [a[:, :, None, :] for a in arrays] + [[(0, 0), tuple(pads[0])], (1, dilation[0])]


def _kernel(cls, dtype, kernel, block):
    key = (cls, dtype, tuple(kernel), conv_lanes(dtype), block)
    fn = _kernels.get(key)
    if fn is None:
        fn = _kernels[key] = cls(dtype, key[2], key[3], block, cache=default_cache())
    return fn


def _parallel(flops):
    return parallel_for if get_num_threads() > 1 and flops >= _PARALLEL_MIN_FLOPS else None


def direct_forward(xp, x, w, b, stride, pads, dilation, groups, outs):
    """`conv_layouts.conv_forward` 's result through the direct kernel, or None when this path does not apply."""
    dtype = _applies(xp, x, w, stride, outs, math.prod(w.shape[2:]))
    if dtype is None:
        return None
    if len(outs) == 1:
        x, w, pads, dilation = _as_2d(pads, dilation, x, w)
    n, o = x.shape[0], w.shape[0]
    fn = _kernel(DirectConv, dtype, w.shape[2:], _block(o // groups))
    bias = np.zeros(o, x.dtype) if b is None else b
    out = fn(x, w, bias, [tuple(p) for p in pads], groups, tuple(dilation),
             _parallel(2 * n * o * w[0].size * math.prod(outs)))
    return out.reshape((n, o) + tuple(outs))


def direct_weight(xp, x, g, kernel, stride, pads, dilation, groups):
    """`conv_layouts.conv_weight` 's result (the weight gradient) through the direct kernel, or None.

    Its accumulators are ``block * prod(kernel)`` vector registers, plus the loaded values: the block is 2 where
    that fits the host's registers (16 or 32), 1 otherwise, and a kernel too large for either stays with the GEMM.
    """
    taps, outs = math.prod(kernel), tuple(g.shape[2:])
    dtype = _applies(xp, x, g, stride, outs, taps)
    if dtype is None:
        return None
    per_group, regs = g.shape[1] // groups, conv_registers()
    block = next((b for b in (2, 1) if per_group % b == 0 and b * (taps + 1) + 2 <= regs), None)
    if block is None:
        return None
    if len(outs) == 1:
        x, g, pads, dilation = _as_2d(pads, dilation, x, g)
        kernel = (1,) + tuple(kernel)
    fn = _kernel(DirectConvWeight, dtype, kernel, block)
    gw = fn(x, g, [tuple(p) for p in pads], groups, tuple(dilation),
            _parallel(2 * g.size * (x.shape[1] // groups) * taps))
    return gw.reshape(gw.shape[:2] + tuple(kernel)[-len(outs):])
