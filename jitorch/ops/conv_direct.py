"""1-D and 2-D CPU convolutions through the generated direct kernels (`codegen.llvm_conv`, `llvm_conv_weight`); 3-D
ones through the same kernels in `conv_direct3d`.

The window copy of im2col writes ``prod(kernel)`` times the input before BLAS sees it; the direct kernels read the
padded input in place, so a 3x3 layer of a small-image CNN runs 2-4x faster than copy + GEMM (measured in
``bench/bench_conv.py``). A strided forward reads its windows in the kernel; the weight gradient and the transposed
convolution (the input gradient) of a strided one are split into stride-1 kernels by phase (`_phases`), so all
three run as direct kernels, with no copy per phase: the transposed convolution's phases read windows of one
padded copy of the gradient and store into their strided slices of the result, the weight gradient's read their
planes of one phase-split copy of the input (`_phase_planes`). The kernels compute
whole register chunks of output columns, so rows that fill too little of the last chunk (7 or 8 columns in 16
lanes) stay with the GEMM, as do device arrays.

>>> import numpy as np
>>> x, w = np.ones((1, 1, 4, 16), np.float32), np.ones((8, 1, 3, 3), np.float32)
>>> direct_forward(np, x, w, None, (1, 1), [(1, 1), (1, 1)], (1, 1), 1, (4, 16))[0, 0, :2, :3]
array([[4., 6., 6.],
       [6., 9., 9.]], dtype=float32)
>>> x = np.ones((1, 1, 4, 32), np.float32)
>>> direct_forward(np, x, w, None, (2, 2), [(1, 1), (1, 1)], (1, 1), 1, (2, 16))[0, 0, :, :3]  # by phase
array([[4., 6., 6.],
       [6., 9., 9.]], dtype=float32)
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..codegen.ir import FLOAT_IR_DTYPES
from ..codegen.llvm_conv import DirectConv, conv_lanes, conv_registers
from ..codegen.llvm_conv_weight import DirectConvWeight
from ..codegen.llvm_objcache import default_cache
from ..codegen.llvm_pool import shared_pool
from ..runtime.threads import get_num_threads, parallel_for
from .conv_layouts import pad_contiguous

__all__ = ["direct_forward", "direct_transpose", "direct_weight"]

_MIN_LANE_USE = 0.75  # the share of the row's register lanes that must hold output columns
# A strided transposed convolution's phases write one column more than the output has (17 of a 16-wide row): a
# second, nearly empty chunk still beats its GEMM + col2im.
_MIN_LANE_USE_TRANSPOSED = 0.5
_MAX_TAPS = 64  # the taps are unrolled: a larger kernel would make an oversized function
# Column strides the kernel reads itself (``stride * lanes`` adjacent elements, every stride-th kept); wider ones
# run as a sum of stride-1 kernels by phase. Measured on 64 -> 64 channels, 3x3 at stride 2, 32x32, batch 32: the
# phases took 9.5 ms, the strided kernel about 5.5.
_MAX_KERNEL_STRIDE = 4
_PARALLEL_MIN_FLOPS = 2_000_000  # about 0.1 ms of one core: below it, waking a second thread costs what it saves
# The weight kernel pays per output row (its accumulators are set up for each): on rows of one register chunk it
# loses to im2col + GEMM once the GEMM is deep (measured: 14x14, 128 -> 128 channels, 3x3: 54 ms against 32 ms; 16 ->
# 32 channels: 6.4 against 8.0 ms).
_WEIGHT_GEMM_DEPTH = 256
_MAX_WIDE_ACCUMULATORS = 16  # the weight kernel's accumulators in blocks of 4 or 8 output channels (`_weight_block`)
_WEIGHT_GEMM_DEPTH_LONG = 1024  # any rows: 256 -> 256 channels at 32x32, 129 ms against the GEMM's 112
_kernels: dict = {}


def _block(per_group):
    """Output channels per register tile: 8 where the group's channel count allows."""
    return next(b for b in (8, 4, 2, 1) if per_group % b == 0)


def _lanes_ok(width, dtype, least=_MIN_LANE_USE):
    """Whether rows of ``width`` output columns fill at least ``least`` of the register chunks that hold them."""
    lanes = conv_lanes(dtype)
    return width / (-(-width // lanes) * lanes) >= least


def _applies(xp, x, other, outs, taps, least=_MIN_LANE_USE):
    """The element type's name when the direct kernels take this convolution (rows of ``outs[-1]`` columns filling
    at least ``least`` of their register chunks), else None."""
    dtype = FLOAT_IR_DTYPES.get(x.dtype)
    if (xp is not np or type(x) is not np.ndarray or dtype is None or other.dtype != x.dtype
            or len(outs) not in (1, 2, 3) or min(outs) < 1 or taps > _MAX_TAPS):
        return None
    return dtype if _lanes_ok(outs[-1], dtype, least) else None


def _as_2d(pads, dilation, stride, *arrays):
    """A 1-D convolution's operands as 2-D ones of height 1."""
    return [a[:, :, None, :] for a in arrays] + [[(0, 0), tuple(pads[0])], (1, dilation[0]), (1, stride[0])]


def _phases(k, s, d):
    """The taps of one dimension grouped by phase, as ``(phase, first tap, tap step, taps, first offset,
    dilation)`` for each phase that has taps.

    At stride ``s`` tap ``t`` reads padded row ``s*i + d*t = s*(i + q) + p`` with ``p = d*t mod s``, so the taps of
    phase ``p`` (every ``s / gcd(s, d)``-th one) are a stride-1 convolution of rows ``p, p + s, ...`` with dilation
    ``d / gcd(s, d)``: a strided convolution is a sum of ``s`` stride-1 ones per dimension.

    >>> _phases(3, 2, 1)  # a 3-tap kernel at stride 2: taps 0 and 2 on even rows, tap 1 on odd ones
    [(0, 0, 2, 2, 0, 1), (1, 1, 2, 1, 0, 1)]
    """
    g = math.gcd(s, d)
    found = []
    for p in range(s):
        taps = [t for t in range(k) if d * t % s == p]
        if taps:
            found.append((p, taps[0], s // g, len(taps), d * taps[0] // s, d // g))
    return found


def _phase_grid(kernel, stride, dilation):
    return list(itertools.product(*(_phases(k, s, d) for k, s, d in zip(kernel, stride, dilation))))


def _phase_input(xpad, stride, phase, extent):
    """The rows and columns of the padded input that one phase's stride-1 convolution reads (a strided view)."""
    (py, _, _, _, qy, _), (px, _, _, _, qx, _) = phase
    return xpad[:, :, py::stride[0], px::stride[1]][:, :, qy:qy + extent[0], qx:qx + extent[1]]


def _sub_kernel(w, phase):
    """The taps of ``w`` (any array whose last axes are the kernel's) that one phase applies: a strided view."""
    return w[(Ellipsis,) + tuple(slice(k, None, t) for _, k, t, _, _, _ in phase)]


def _extent(outs, phase):
    """The rows and columns one phase reads for ``outs`` outputs: ``outs + dilation * (taps - 1)``."""
    return tuple(o + d * (m - 1) for o, (_, _, _, m, _, d) in zip(outs, phase))


def _kernel(cls, dtype, kernel, block, stride=None, out_stride=None):
    """The compiled `DirectConv` or `DirectConvWeight` for these parameters, made once per process (its machine
    code comes from the disk cache after the first run). ``stride``: a strided `DirectConv`; ``out_stride``: one
    that stores into a strided slice (`DirectConv.spread_into`)."""
    key = (cls, dtype, tuple(kernel), conv_lanes(dtype), block, stride, out_stride)
    fn = _kernels.get(key)
    if fn is None:
        extra = {} if stride is None else {"stride": stride}
        if out_stride is not None:
            extra["out_stride"] = out_stride
        fn = _kernels[key] = cls(dtype, key[2], key[3], block, cache=default_cache(), **extra)
    return fn


def _parallel(flops):
    """How to split a convolution's blocks when several threads are set and the work is worth splitting: the native
    pool (`codegen.llvm_pool`), else `runtime.threads.parallel_for`; None for one thread."""
    threads = get_num_threads()
    if threads <= 1 or flops < _PARALLEL_MIN_FLOPS:
        return None
    return shared_pool(threads) or parallel_for


def _forward(dtype, x, w, b, pads, dilation, groups, outs, stride=(1, 1)):
    """One 2-D convolution through `DirectConv`."""
    n, o = x.shape[0], w.shape[0]
    fn = _kernel(DirectConv, dtype, w.shape[2:], _block(o // groups), None if stride == (1, 1) else stride)
    bias = np.zeros(o, x.dtype) if b is None else b
    return fn(x, w, bias, [tuple(p) for p in pads], groups, tuple(dilation),
              _parallel(2 * n * o * w[0].size * math.prod(outs)))


def direct_forward(xp, x, w, b, stride, pads, dilation, groups, outs):
    """`conv_layouts.conv_forward` 's result through the direct kernel, or None when this path does not apply.
    A strided one reads its windows in the kernel (`DirectConv` 's stride) up to a column stride of
    `_MAX_KERNEL_STRIDE`; beyond it, it is the sum of its phases' stride-1 ones (`_phases`), the bias added by the
    first."""
    dtype = _applies(xp, x, w, outs, math.prod(w.shape[2:][-2:]))
    if dtype is None:
        return None
    nd = len(outs)
    if nd == 3:
        return forward_3d(dtype, x, w, b, stride, pads, dilation, outs, groups)
    if nd == 1:
        x, w, pads, dilation, stride = _as_2d(pads, dilation, stride, x, w)
        outs = (1,) + tuple(outs)
    if stride[-1] <= _MAX_KERNEL_STRIDE:  # stride 1 included
        out = _forward(dtype, x, w, b, pads, dilation, groups, outs, tuple(stride))
    else:
        xpad, out = pad_contiguous(np, x, pads), None
        for phase in _phase_grid(w.shape[2:], stride, dilation):
            xs = _phase_input(xpad, stride, phase, _extent(outs, phase))
            y = _forward(dtype, xs, _sub_kernel(w, phase), b if out is None else None, [(0, 0), (0, 0)],
                         [p[5] for p in phase], groups, outs)
            out = y if out is None else np.add(out, y, out=out)
    return out.reshape(out.shape[:2] + tuple(outs)[-nd:])


def direct_transpose(xp, g, w, spatial, stride, padding, dilation, groups):
    """The transposed convolution (a convolution's input gradient) of ``g`` ``(N, O, *outs)`` with the convolution's
    weight ``w`` ``(O, C/G, *kernel)`` into ``(N, C, *spatial)``, or None when the direct kernel does not apply.

    Phase by phase (`_phases`), the positions a phase's taps write are a stride-1 correlation of ``g`` with that
    phase's flipped sub-kernel, stored by the kernel straight into their strided slice of the result
    (`_transpose_plan`), each reading its window of one zero-padded copy of ``g``.

    >>> g, w = np.ones((1, 8, 2, 16), np.float32), np.ones((8, 8, 3, 3), np.float32)
    >>> direct_transpose(np, g, w, (4, 32), (2, 2), (1, 1), (1, 1), 1)[0, 0, :2, :4]  # as torch's conv2d_input
    array([[ 8., 16.,  8., 16.],
           [16., 32., 16., 32.]], dtype=float32)
    """
    outs, nd = tuple(g.shape[2:]), len(spatial)
    # The kernels' rows are the phases' slices of the result, not g's rows: their lanes are checked with the plans.
    dtype = _applies(xp, g, w, outs, math.prod(w.shape[2:][-2:]), least=0)
    if dtype is None:
        return None
    if not np.isfinite(w).all():
        # The phases' full correlations multiply the zero padding of g by every weight: 0 * inf would be nan where
        # the GEMM + col2im (and torch) sum only real products.
        return None
    if 2 * w.shape[1] * groups < w.shape[0]:
        # Far fewer output than input channels (an image model's first layer): register blocks of one or two
        # channels; the GEMM + col2im is faster (measured: 3 channels from 32, 6.4 ms against 3.2).
        return None
    pads = [(p, p) for p in padding]
    if nd == 1:
        g, w, pads, dilation, stride = _as_2d(pads, dilation, stride, g, w)
        outs, spatial = (1,) + outs, (1,) + tuple(spatial)
    grid = _phase_grid(w.shape[2:], stride, dilation)
    if nd == 3 and not all(applies_3d([phase[0][5]]) for phase in grid):
        return None
    plans = [(_transpose_plan(phase, outs, spatial, pads, stride), phase) for phase in grid]
    plans = [(plan, phase) for plan, phase in plans if plan is not None]
    if not plans:  # every tap falls in the padding or between the strides: nothing reaches the result
        return np.zeros((g.shape[0], w.shape[1] * groups) + tuple(spatial)[-nd:], g.dtype)
    if any(not _lanes_ok(plan[0][-1][1] - plan[0][-1][0], dtype, _MIN_LANE_USE_TRANSPOSED) for plan, _ in plans):
        return None
    if nd == 3:
        return transpose_3d(dtype, g, w, spatial, plans, groups)
    o, cg = w.shape[:2]
    written = sum(math.prod(hi - lo for lo, hi in plan[0]) for plan, _ in plans)
    # Each position of the result belongs to one phase; positions no phase's taps reach stay zero.
    alloc = np.empty if written == math.prod(spatial) else np.zeros
    gx = alloc((g.shape[0], cg * groups) + tuple(spatial), g.dtype)
    buf, plane, origin = _padded_once(g, [plan for plan, _ in plans], conv_lanes(dtype))
    parallel = _parallel(2 * g.size * cg * math.prod(w.shape[2:]))
    for (ranges, g_slices, g_pads, targets), phase in plans:
        ws = _sub_kernel(w, phase)
        k = ws.shape[2:]
        wf = ws.reshape((groups, o // groups, cg) + k).swapaxes(1, 2).reshape((groups * cg, o // groups) + k)
        start = sum((sl.start - pad[0] + first) * step
                    for sl, pad, first, step in zip(g_slices, g_pads, origin, (plane[1], 1)))
        fn = _kernel(DirectConv, dtype, k, _block(cg), out_stride=tuple(stride))
        fn.spread_into(buf, start, plane, wf[:, :, ::-1, ::-1], gx, [t.start for t in targets],
                       [hi - lo for lo, hi in ranges], groups, [p[5] for p in phase], parallel)
    return gx.reshape(gx.shape[:2] + tuple(spatial)[-nd:])


def _padded_once(g, plans, slack):
    """``g`` ``(N, O, H, W)`` zero-padded once for every phase of `direct_transpose`: (the flat buffer, with
    ``slack`` zeros after it for the kernels' reads past the last row; its plane ``(Hp, Wp)``; where ``g``'s first
    row and column lie in it). A phase reads the window of rows ``g_slices.start - g_pads[0]`` on."""
    before = [max(plan[2][i][0] for plan in plans) for i in (0, 1)]
    after = [max(plan[2][i][1] for plan in plans) for i in (0, 1)]
    plane = tuple(s + lo + hi for s, lo, hi in zip(g.shape[2:], before, after))
    size = g.shape[0] * g.shape[1] * math.prod(plane)
    buf = np.zeros(size + slack, g.dtype)
    buf[:size].reshape(g.shape[:2] + plane)[:, :, before[0]:before[0] + g.shape[2], before[1]:before[1] + g.shape[3]] \
        = g
    return buf, plane, before


def _transpose_plan(phase, outs, spatial, pads, stride):
    """What one phase of `direct_transpose` computes: only the positions of the result it owns, not its full
    correlation (whose extra row and column would make a 17-wide row of a 16-wide result, two register chunks).

    Per dimension, the phase's correlation position ``j`` is padded result position ``p + s * (q + j)``; its
    window reads rows ``j .. j + d * (m - 1)`` of ``g`` padded by ``d * (m - 1)``. Returns ``(ranges, g_slices,
    g_pads, targets)``: the ``j`` ranges, the slices and pads of ``g`` that produce exactly them, and the result's
    strided slices they land in; None when the phase owns no position.
    """
    ranges, g_slices, g_pads, targets = [], [], [], []
    for (p, _, _, m, q, d), n_g, size, (lo, _), s in zip(phase, outs, spatial, pads, stride):
        reach = d * (m - 1)
        first, stop = -(-(lo - p) // s) - q, -(-(lo + size - p) // s) - q  # the j whose position is inside
        first, stop = max(first, 0), min(stop, n_g + reach)
        if stop <= first:
            return None
        g_lo, g_hi = first - reach, stop  # the rows of g those windows read (outside it: zero padding)
        g_slices.append(slice(max(g_lo, 0), min(g_hi, n_g)))
        g_pads.append((max(-g_lo, 0), max(g_hi - n_g, 0)))
        ranges.append((first, stop))
        begin = p + s * (q + first) - lo
        targets.append(slice(begin, begin + s * (stop - first - 1) + 1, s))
    return ranges, tuple(g_slices), g_pads, tuple(targets)


def _weight_block(per_group, taps):
    """The weight kernel's accumulators are ``block * taps`` vector registers plus the loaded values: the largest
    block of 8, 4, 2 or 1 that fits the host's registers (16 or 32), else None (the GEMM's). Larger blocks load
    each input row once for more channels (measured on a 2x2 phase kernel, 64 -> 32 channels: 5.3 -> 3.7 ms), but
    past 16 accumulators they lose (a 5-tap 1-D kernel on 512 columns: 4.8 ms at a block of 2, 7.2 at 4)."""
    return next((b for b in (8, 4, 2, 1) if per_group % b == 0 and b * (taps + 1) + 2 <= conv_registers()
                 and (b <= 2 or b * taps <= _MAX_WIDE_ACCUMULATORS)), None)


def direct_weight(xp, x, g, kernel, stride, pads, dilation, groups):
    """`conv_layouts.conv_weight` 's result (the weight gradient) through the direct kernel, or None; strided
    convolutions phase by phase (`_phases`). Deep products (many input channels) stay with the GEMM, which is
    faster there (`_WEIGHT_GEMM_DEPTH`).

    >>> x, g = np.ones((2, 1, 4, 32), np.float32), np.ones((2, 8, 4, 32), np.float32)
    >>> direct_weight(np, x, g, (3, 3), (1, 1), [(1, 1), (1, 1)], (1, 1), 1)[0, 0]  # windows inside, on an edge
    array([[186., 192., 186.],
           [248., 256., 248.],
           [186., 192., 186.]], dtype=float32)
    """
    outs, nd = tuple(g.shape[2:]), len(kernel)
    dtype = _applies(xp, x, g, outs, math.prod(kernel[-2:]))
    if dtype is None:
        return None
    if nd == 3:
        # No depth limit: a 3-D window matrix is 27 times the input (measured 64 -> 64 channels, 3x3x3 on 8x16x16,
        # batch 2: 16 ms against the GEMM's 26)
        return weight_3d(dtype, x, g, kernel, stride, pads, dilation, groups)
    if nd == 1:
        x, g, pads, dilation, stride = _as_2d(pads, dilation, stride, x, g)
        kernel, outs = (1,) + tuple(kernel), (1,) + outs
    grid = _phase_grid(kernel, stride, dilation)
    # The short-row limit counts the taps of one phase's kernel: a strided gradient runs phase by phase, each a
    # stride-1 kernel of a few taps with larger blocks, where the GEMM copies strided windows (measured, 4x4 at
    # stride 2 on 16x16 outputs, 64 -> 128 channels: 13.5 ms against 17.5; 3x3 at stride 2, 14x14, 128 -> 256
    # channels, phase depth 512: 34 against 25).
    depth = (x.shape[1] // groups) * math.prod(kernel)
    phase_depth = (x.shape[1] // groups) * max(math.prod(p[3] for p in phase) for phase in grid)
    if depth > _WEIGHT_GEMM_DEPTH_LONG or outs[-1] < 1.5 * conv_lanes(dtype) and phase_depth > _WEIGHT_GEMM_DEPTH:
        return None
    blocks = [_weight_block(g.shape[1] // groups, math.prod(m[3] for m in phase)) for phase in grid]
    if None in blocks:
        return None
    parallel = _parallel(2 * g.size * (x.shape[1] // groups) * math.prod(kernel))
    if all(s == 1 for s in stride):
        gw = _kernel(DirectConvWeight, dtype, kernel, blocks[0])(x, g, [tuple(p) for p in pads], groups,
                                                                 tuple(dilation), parallel)
    else:
        planes = _phase_planes(x, pads, stride, grid)
        gw = np.empty(g.shape[1:2] + (x.shape[1] // groups,) + tuple(kernel), x.dtype)
        for phase, block in zip(grid, blocks):
            (py, _, _, my, qy, dy), (px, _, _, mx, qx, dx) = phase
            part = _kernel(DirectConvWeight, dtype, (my, mx), block).from_planes(planes[py, px], (qy, qx), g, groups,
                                                                                 (dy, dx), parallel)
            _sub_kernel(gw, phase)[...] = part
    return gw.reshape(gw.shape[:2] + tuple(kernel)[-nd:])


def _phase_planes(x, pads, stride, grid):
    """``x`` ``(N, C, H, W)`` zero-padded by ``pads`` and split by phase in one pass: ``(sy, sx, N, C, Hq, Wq)``,
    plane ``[py, px]`` the padded rows ``py, py + sy, ...`` and columns ``px, px + sx, ...`` (C-contiguous, so each
    phase's weight kernel reads its own without a copy). Only the phases of ``grid`` are filled."""
    (n, c, h, w), (sy, sx) = x.shape, stride
    (top, bottom), (left, right) = pads
    planes = np.zeros((sy, sx, n, c, -(-(h + top + bottom) // sy), -(-(w + left + right) // sx)), x.dtype)
    for py, px in {(phase[0][0], phase[1][0]) for phase in grid}:
        i0, j0 = (py - top) % sy, (px - left) % sx  # the first input row and column of this phase
        rows, cols = len(range(i0, h, sy)), len(range(j0, w, sx))
        r0, c0 = (i0 + top) // sy, (j0 + left) // sx
        planes[py, px, :, :, r0:r0 + rows, c0:c0 + cols] = x[:, :, i0::sy, j0::sx]
    return planes


from .conv_direct3d import applies_3d, forward_3d, transpose_3d, weight_3d  # noqa: E402 - it builds on the helpers above
