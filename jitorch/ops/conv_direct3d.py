"""3-D CPU convolutions, their input and weight gradients through the 2-D direct kernels, the depth taps stacked as
input channels (no window copy, no new kernel).

The padded input is laid out as frames, ``(N * Dp, C, Hp, Wp)`` (depth moved next to the batch). A 2-D direct
kernel told that an image is ``sd * C`` channels long (its image stride) but reading ``kd * C`` channels from where
the image starts sees, for image ``f``, the ``kd`` consecutive frames ``sd * f .. sd * f + kd - 1``: exactly the
depth window of output depth ``f`` at depth stride ``sd``, with the weight ``(O, C, kd, kh, kw)`` as ``(O, kd * C,
kh, kw)``. Each image's ``Dp`` (rounded up to the depth stride) frames give ``Dp / sd`` such windows, of which the
first ``Do`` are outputs; the forward computes the few windows that straddle two images and drops them, the weight
gradient runs only the outputs' windows. A strided input gradient (the transposed convolution) is one such
forward per phase (`conv_direct._phases`) over one padded frame buffer of the gradient. Groups run one at a time;
depth dilation stays with the GEMM.

Measured (one thread, ``Conv3d(8, 16, 3, padding=1)`` on 4x8x16x16x16): forward 8.8 -> 1.3 ms, input gradient
15 -> 1.3 ms, weight gradient 8.0 -> 1.4 ms (torch 1.4, 2.1 and 3.8).

>>> import numpy as np
>>> x, w = np.ones((1, 1, 3, 4, 16), np.float32), np.ones((8, 1, 3, 3, 3), np.float32)
>>> forward_3d("f32", x, w, None, (1, 1, 1), [(1, 1)] * 3, (1, 1, 1), (3, 4, 16))[0, 0, :, 0, :2]
array([[ 8., 12.],
       [12., 18.],
       [ 8., 12.]], dtype=float32)
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..codegen.llvm_conv import DirectConv, conv_lanes, pack_weight
from ..codegen.llvm_conv_weight import DirectConvWeight
from ..codegen.llvm_pool import split_call
from .conv_direct import _MAX_KERNEL_STRIDE, _block, _kernel, _parallel, _sub_kernel, _weight_block

__all__ = ["forward_3d", "transpose_3d", "weight_3d", "applies_3d"]

_CHUNK_BYTES = 1 << 19  # the weight gradient's images per call: their input and gradient in half of a 1 MB L2


def applies_3d(dilation):
    """Whether the stacked-depth kernels take a 3-D convolution of this dilation (its depth taps must be adjacent
    frames)."""
    return dilation[0] == 1


def _group(a, axis, i, groups):
    """Group ``i`` 's slice of ``a`` along ``axis`` (None stays None): the kernels see one group at a time, so its
    channels and their stacked depth taps are adjacent."""
    if a is None:
        return None
    size = a.shape[axis] // groups
    return a[(slice(None),) * axis + (slice(i * size, (i + 1) * size),)]


def _extent(out, stride, dilation, kernel):
    """The padded input rows the ``out`` windows of one dimension read."""
    return (out - 1) * stride + dilation * (kernel - 1) + 1


def _frames(x, pads, lengths, extra, slack):
    """``x`` ``(N, C, D, H, W)`` zero-padded into a flat frame buffer ``(N, depth, C, H', W')`` (``lengths``: the
    three padded sizes) with ``extra`` zero frames after the last image and ``slack`` zero elements after those, for
    the kernels' reads past the end. ``pads``' left ends place ``x``; what lies past ``lengths`` is never read and
    is cut (a transposed convolution's right pads may be negative)."""
    n, c = x.shape[:2]
    frame = c * lengths[1] * lengths[2]
    buf = np.zeros((n * lengths[0] + extra) * frame + slack, x.dtype)
    view = buf[:n * lengths[0] * frame].reshape((n, lengths[0], c) + tuple(lengths[1:]))
    dst, src = [slice(None)], [slice(None), slice(None)]
    for size, (lo, _), length in zip(x.shape[2:], pads, lengths):
        first, stop = max(lo, 0), min(lo + size, length)
        if stop <= first:
            return buf  # x lies wholly in the cut: zeros
        dst.append(slice(first, stop))
        src.append(slice(first - lo, stop - lo))
    view[(dst[0], dst[1], slice(None)) + tuple(dst[2:])] = x[tuple(src)].transpose(0, 2, 1, 3, 4)
    return buf


def _conv_frames(dtype, buf, offset, lengths, images, step, w, bias, sizes, dilation, stride=(1, 1)):
    """The 2-D direct kernel over ``images`` images of a frame buffer (`_frames`) whose planes are ``lengths``
    ``(H', W')``: image ``f`` starts ``offset`` elements plus ``f * step`` frames into ``buf`` and reads
    ``w.shape[1]`` channels (the stacked depth taps of ``w`` ``(O, kd * C, kh, kw)``). Returns ``(images, O,
    *sizes)``."""
    o, cg, kh, kw = w.shape
    fn = _kernel(DirectConv, dtype, (kh, kw), _block(o), None if tuple(stride) == (1, 1) else tuple(stride))
    packed = pack_weight(w, fn.block)
    bias = np.zeros(o, buf.dtype) if bias is None else np.ascontiguousarray(bias, buf.dtype)
    out = np.empty((images, o) + tuple(sizes), buf.dtype)
    blocks = o // fn.block
    ints = (cg, lengths[0], lengths[1], sizes[0], sizes[1], blocks, blocks, step, o, dilation[0], dilation[1])
    ptrs = [buf.__array_interface__["data"][0] + offset * buf.itemsize] + \
        [a.__array_interface__["data"][0] for a in (packed, bias, out)]
    parallel = _parallel(2 * out.size * cg * kh * kw)
    split_call(parallel, fn._fn, fn.address, ["ptr"] * 4 + ["i64"] * len(ints), (*ptrs, *ints), images * blocks)
    return out


def _stacked(w):
    """``(O, C, kd, kh, kw)`` -> ``(O, kd * C, kh, kw)``: the depth taps as input channels, tap-major."""
    o, c, kd, kh, kw = w.shape
    return np.ascontiguousarray(w.transpose(0, 2, 1, 3, 4)).reshape(o, kd * c, kh, kw)


def _depth(outs, stride, kernel):
    """(frames per image, rounded up to the depth stride; zero frames after the last image)."""
    reach = _extent(outs[0], stride[0], 1, kernel[0])
    depth = -(-reach // stride[0]) * stride[0]
    return depth, max(kernel[0] - stride[0], 0)


def forward_3d(dtype, x, w, b, stride, pads, dilation, outs, groups=1):
    """The 3-D convolution of ``x`` ``(N, C, D, H, W)`` padded by ``pads`` (``(left, right)`` pairs) with ``w``
    ``(O, C / groups, kd, kh, kw)`` (plus ``b``): ``(N, O, *outs)``, C-contiguous; None where the kernels do not
    apply (`applies_3d`, a column stride over the kernel's)."""
    if not applies_3d(dilation) or w.shape[1] * groups != x.shape[1] or stride[2] > _MAX_KERNEL_STRIDE:
        return None
    if groups > 1:
        return np.concatenate([forward_3d(dtype, _group(x, 1, i, groups), _group(w, 0, i, groups),
                                          _group(b, 0, i, groups), stride, pads, dilation, outs)
                               for i in range(groups)], 1)
    n, c = x.shape[:2]
    planes = [_extent(outs[i], stride[i], dilation[i], w.shape[2 + i]) for i in (1, 2)]
    depth, extra = _depth(outs, stride, w.shape[2:])
    buf = _frames(x, pads, [depth] + planes, extra, stride[2] * conv_lanes(dtype))
    per_image = depth // stride[0]
    out = _conv_frames(dtype, buf, 0, planes, n * per_image, stride[0] * c, _stacked(w), b, outs[1:], dilation[1:],
                       stride[1:])
    out = out.reshape((n, per_image) + out.shape[1:])
    return np.ascontiguousarray(out[:, :outs[0]].transpose(0, 2, 1, 3, 4))


def transpose_3d(dtype, g, w, spatial, plans, groups=1):
    """The transposed 3-D convolution (`conv_direct.direct_transpose`) of ``g`` ``(N, O, *outs)`` with ``w``
    ``(O, C, *kernel)`` into ``(N, C, *spatial)``, given its phases' ``plans`` (`conv_direct._transpose_plan`, each
    with its phase; depth dilation 1). ``g`` is padded into frames once, wide enough for every phase; each phase's
    correlation starts at its own offset in it and is stored into its strided slice of the result."""
    if groups > 1:
        return np.concatenate([transpose_3d(dtype, _group(g, 1, i, groups), _group(w, 0, i, groups), spatial, plans)
                               for i in range(groups)], 1)
    n, o = g.shape[:2]
    c = w.shape[1]
    reach = [max(phase[i][5] * (phase[i][3] - 1) for _, phase in plans) for i in range(3)]
    lengths = [r + max(plan[0][i][1] for plan, _ in plans) for i, r in enumerate(reach)]
    starts = [[plan[0][i][0] - phase[i][5] * (phase[i][3] - 1) + reach[i] for i in range(3)] for plan, phase in plans]
    extra = max(start[0] + phase[0][3] - 1 for start, (_, phase) in zip(starts, plans))
    buf = _frames(g, [(r, 0) for r in reach], lengths, extra, conv_lanes(dtype))
    written = sum(math.prod(hi - lo for lo, hi in plan[0]) for plan, _ in plans)
    # Each position of the result belongs to one phase; positions no phase's taps reach stay zero. Written as frames
    # (N, D, C, H, W), the phases' stores keep their rows' order; one transposing copy at the end (8 phases of a
    # 4x16x32^3 result: 1.6 ms against 2.8 storing each into the transposed result).
    gx = (np.empty if written == math.prod(spatial) else np.zeros)((n, spatial[0], c) + tuple(spatial[1:]), g.dtype)
    for start, ((ranges, _, _, targets), phase) in zip(starts, plans):
        ws = _sub_kernel(w, phase)[..., ::-1, ::-1, ::-1].swapaxes(0, 1)  # (C, O, *sub-kernel), flipped
        sizes = [hi - lo for lo, hi in ranges]
        offset = (start[0] * o * lengths[1] + start[1]) * lengths[2] + start[2]
        y = _conv_frames(dtype, buf, offset, lengths[1:], n * lengths[0], o, _stacked(ws), None, sizes[1:],
                         [phase[1][5], phase[2][5]])
        y = y.reshape((n, lengths[0]) + y.shape[1:])[:, :sizes[0]]
        gx[(slice(None), targets[0], slice(None)) + targets[1:]] = y
    return np.ascontiguousarray(gx.transpose(0, 2, 1, 3, 4))


def weight_3d(dtype, x, g, kernel, stride, pads, dilation, groups=1):
    """The weight gradient ``(O, C, *kernel)`` of `forward_3d` 's convolution given its output gradient ``g``
    ``(N, O, *outs)``; the weight kernel reads strided rows and columns itself. None where the kernels do not
    apply."""
    if not applies_3d(dilation) or _weight_block(g.shape[1] // groups, kernel[1] * kernel[2]) is None:
        return None
    if groups > 1:
        return np.concatenate([weight_3d(dtype, _group(x, 1, i, groups), _group(g, 1, i, groups), kernel, stride,
                                         pads, dilation) for i in range(groups)], 0)
    n, c = x.shape[:2]
    o, outs = g.shape[1], tuple(g.shape[2:])
    kd = kernel[0]
    planes = [_extent(outs[i], stride[i], dilation[i], kernel[i]) for i in (1, 2)]
    depth, _ = _depth(outs, stride, kernel)  # no window past an image runs: no frames after the last
    hw_stride = tuple(stride[1:])
    block = _weight_block(o, kernel[1] * kernel[2])
    frames = _frames(x, pads, [depth] + planes, 0, 0).reshape((n * depth, c) + tuple(planes))
    per_image = depth // stride[0]
    gf = np.ascontiguousarray(g.transpose(0, 2, 1, 3, 4))  # (N, Do, O, Ho, Wo): an image per output depth
    parallel = _parallel(2 * g.size * c * math.prod(kernel))
    kern = _kernel(DirectConvWeight, dtype, tuple(kernel[1:]), block, None if hw_stride == (1, 1) else hw_stride)
    fn, address = kern._function(outs[2] <= conv_lanes(dtype))
    # The kernel runs all its images for one channel pair at a time: in chunks whose input and gradient stay in L2,
    # the partial sums added. Only the output depths' windows run: one straddling two images would add an
    # input's inf times a zero gradient (nan) where torch sums real products only.
    x_step, g_step = stride[0] * c * math.prod(frames.shape[2:]), o * math.prod(outs[1:])
    chunk = max(1, _CHUNK_BYTES // ((x_step + g_step) * x.itemsize))
    gw = np.zeros((o, kd * c) + tuple(kernel[1:]), x.dtype)
    part = np.empty_like(gw)
    for image, first in itertools.product(range(n), range(0, outs[0], chunk)):
        ints = (min(chunk, outs[0] - first), kd * c, frames.shape[-2], frames.shape[-1], outs[1], outs[2],
                o // block, stride[0] * c, o, dilation[1], dilation[2])
        ptrs = [frames.ctypes.data + (image * per_image + first) * x_step * x.itemsize,
                gf.ctypes.data + (image * outs[0] + first) * g_step * x.itemsize, part.ctypes.data]
        split_call(parallel, fn, address, ["ptr"] * 3 + ["i64"] * len(ints), (*ptrs, *ints), (o // block) * kd * c)
        gw += part
    gw = gw.reshape((o, kd, c) + tuple(kernel[1:]))
    return np.ascontiguousarray(gw.transpose(0, 2, 1, 3, 4))
