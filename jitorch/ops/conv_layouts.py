"""Window copies (im2col), their adjoint (col2im) and the GEMM layouts behind the convolution rows of conv_ops.py.

A convolution is one GEMM between a window matrix and the weight; on small images what costs time around it is moving
data, and NumPy's strided copies pay per inner run, so the layout is picked for long runs:

- channels-last (``(N * prod(out), prod(kernel) * C)``, rows are output positions): a window row of the padded
  channels-last image is ``kernel[-1] * C`` contiguous elements; for short output rows and many channels (the inner
  layers of a small-image CNN);
- K-major (``(C * prod(kernel), N * prod(frame))``, columns are output positions): a run is an output row, and with
  stride 1 and long rows the "flat frame" makes it one run per kernel offset and image; for few channels (the first
  layer of an image model), long rows, and groups.

``conv_forward`` and ``conv_weight`` compute with either; the input gradient (the transposed convolution) is a forward
convolution of the gradient with the flipped kernel at stride 1, and a BLAS product + ``col2im_T`` otherwise. The
forward's window matrix can be kept for the weight gradient (``STASH``, ``weight_from_cols``).

>>> import numpy as np
>>> x, w = np.ones((1, 1, 3, 3), np.float32), np.ones((1, 1, 2, 2), np.float32)
>>> conv_forward(np, x, w, None, (1, 1), ((0, 0), (0, 0)), (1, 1), 1, (2, 2))[0, 0]
array([[4., 4.],
       [4., 4.]], dtype=float32)
"""
from __future__ import annotations

import itertools
import math
import threading

from ..runtime import strided_view

__all__ = ["STASH", "conv_forward", "conv_weight", "weight_from_cols", "col2im", "col2im_T", "k_major_layout",
           "windows", "pad_contiguous", "to_frame"]

_FLAT_WASTE = 2.0  # the most computed frame positions per output position that the flat layout may take
_CHANNELS_LAST_MAX_WIDTH = 16  # output rows at least this long copy faster K-major


def _prod(values):
    return math.prod(values)


def _pairs(padding):
    return [(p, p) if isinstance(p, int) else tuple(p) for p in padding]


def pad_contiguous(xp, x, pads, fill=0):
    """``x`` padded by ``pads`` (``(left, right)`` pairs of the spatial dims) with ``fill``, C-contiguous."""
    if any(lo or hi for lo, hi in pads):
        # A filled buffer and one slice copy: ``xp.pad`` costs ~100 us of Python per call on these small images.
        out = xp.full(tuple(x.shape[:2]) + tuple(n + lo + hi for n, (lo, hi) in zip(x.shape[2:], pads)), fill,
                      dtype=x.dtype)
        out[(slice(None), slice(None)) + tuple(slice(lo, lo + n) for n, (lo, _) in zip(x.shape[2:], pads))] = x
        return out
    return xp.ascontiguousarray(x)


def windows(xp, x, kernel, stride, padding, dilation, fill=0):
    """A strided view ``(N, C, *out, *kernel)`` of the windows of ``x`` (``(N, C, *S)``) after padding by ``padding``
    (``(left, right)`` pairs or symmetric ints) with ``fill``."""
    x = pad_contiguous(xp, x, _pairs(padding), fill)
    nd = len(kernel)
    st = [s // x.itemsize for s in x.strides]
    out = [(x.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
    shape = tuple(x.shape[:2]) + tuple(out) + tuple(kernel)
    strides = st[:2] + [st[2 + i] * stride[i] for i in range(nd)] + [st[2 + i] * dilation[i] for i in range(nd)]
    return strided_view(xp, x, shape, strides, 0)


# -- channels-last ----------------------------------------------------------------------------------------------------
def channels_last(c, kernel, stride, dilation, outs, groups):
    """Whether to use the channels-last layout: its copy runs (``kernel[-1] * C`` elements with no dilation) are longer
    than K-major's (an output row), and the output rows are short (measured: from 16 columns on, K-major's copies are
    faster, as channels-last also pays a transposing copy of the whole input)."""
    run = c * (kernel[-1] if dilation[-1] == 1 else 1)
    return groups == 1 and outs[-1] < _CHANNELS_LAST_MAX_WIDTH and run > outs[-1]


def _last(ndim):
    """The permutation moving axis 1 last (``moveaxis`` costs ~5 us of Python per call)."""
    return (0,) + tuple(range(2, ndim)) + (1,)


def _second(ndim):
    """The permutation moving the last axis to position 1."""
    return (0, ndim - 1) + tuple(range(1, ndim - 1))


def _channels_last_padded(xp, x, pads):
    """``x`` ``(N, C, *S)`` as a zero-padded C-contiguous channels-last buffer ``(N, *padded, C)``: one copy."""
    moved = x.transpose(_last(x.ndim))
    if not any(lo or hi for lo, hi in pads):
        return xp.ascontiguousarray(moved)
    shape = (x.shape[0],) + tuple(n + lo + hi for n, (lo, hi) in zip(x.shape[2:], pads)) + (x.shape[1],)
    buf = xp.zeros(shape, dtype=x.dtype)
    buf[(slice(None),) + tuple(slice(lo, lo + n) for n, (lo, _) in zip(x.shape[2:], pads)) + (slice(None),)] = moved
    return buf


def _filled(xp, view, into, shape):
    """``view`` as a new C-contiguous array of ``shape``, or copied into ``into`` (``STASH.into``: a CPU graph's
    replay refills the window matrix its capture kept, which the weight gradient's step reads)."""
    if into is None:
        return xp.ascontiguousarray(view).reshape(shape)
    if into.shape != tuple(shape) or into.dtype != view.dtype or not into.flags.c_contiguous:
        raise RuntimeError(f"convolution: the kept window matrix is {into.shape} {into.dtype}, but this call makes "
                           f"{tuple(shape)} {view.dtype}")
    xp.copyto(into.reshape(view.shape), view)
    return into


def _col_cl(xp, x, kernel, stride, pads, dilation, outs, into=None):
    """im2col, channels-last: ``(N * prod(outs), prod(kernel) * C)`` (columns ordered kernel offset, then channel)."""
    n, c = x.shape[:2]
    nd = len(kernel)
    buf = _channels_last_padded(xp, x, pads)
    st = [s // buf.itemsize for s in buf.strides]
    shape = (n,) + tuple(outs) + tuple(kernel) + (c,)
    strides = ([st[0]] + [st[1 + i] * stride[i] for i in range(nd)] + [st[1 + i] * dilation[i] for i in range(nd)]
               + [1])
    return _filled(xp, strided_view(xp, buf, shape, strides, 0), into, (n * _prod(outs), _prod(kernel) * c))


def _weight_cl(xp, w):
    """``(O, C, *kernel)`` -> ``(O, prod(kernel) * C)``, the column order of ``_col_cl`` (a small copy)."""
    return xp.ascontiguousarray(w.transpose(_last(w.ndim))).reshape(w.shape[0], w[0].size)


def _from_cl(xp, m, n, outs):
    """``(N * prod(outs), O)`` -> ``(N, O, *outs)``, C-contiguous."""
    return xp.ascontiguousarray(m.reshape((n,) + tuple(outs) + (m.shape[1],)).transpose(_second(len(outs) + 2)))


def _to_cl(xp, g):
    """``(N, O, *outs)`` -> ``(N * prod(outs), O)``, C-contiguous."""
    return xp.ascontiguousarray(g.transpose(_last(g.ndim))).reshape(-1, g.shape[1])


# -- K-major ----------------------------------------------------------------------------------------------------------
def _flat_ok(spatial, outs, kernel, stride, padding, dilation):
    """Whether the "flat frame" layout applies: stride 1, every output window inside the padded input, and few
    dropped positions (on tiny images, e.g. 4x4 padded to 6x6, the GEMMs would do 1.5x the work: not worth it)."""
    if not all(s == 1 and o + d * (k - 1) <= n + 2 * p
               for n, o, k, s, p, d in zip(spatial, outs, kernel, stride, padding, dilation)):
        return False
    frame = outs[0] * _prod(n + 2 * p for n, p in zip(spatial[1:], padding[1:]))
    return frame <= _FLAT_WASTE * _prod(outs)


def k_major_layout(spatial, outs, kernel, stride, padding, dilation, flat=True):
    """Pads, the frame of computed positions and the strided-view geometry shared by the K-major im2col and col2im.

    The column matrices are K-major, ``(C, *kernel, N, *frame)``: every copy/add then runs over whole rows of the
    image instead of over the 3 elements of a kernel row. With stride 1 and ``flat`` ("flat frame"), a window offset
    is a constant shift of the flattened padded image, so the frame is the first output dim times the full padded
    trailing dims (the few positions past each output row are computed and dropped) and one add per offset is a single
    contiguous run; one extra padded row along the first dim keeps the shifted runs inside the buffer. Otherwise the
    frame is the output itself and the runs are output rows.
    """
    nd = len(kernel)
    flat = flat and _flat_ok(spatial, outs, kernel, stride, padding, dilation)
    pads = [(p, p + (1 if flat and i == 0 and nd > 1 else 0)) for i, p in enumerate(padding)]
    padded = [n + lo + hi for n, (lo, hi) in zip(spatial, pads)]
    sp = [math.prod(padded[i + 1:]) for i in range(nd)]  # element strides of the padded spatial dims
    kstr = [d * s for d, s in zip(dilation, sp)]
    if flat:
        frame = (outs[0],) + tuple(padded[1:])
        return pads, frame, kstr, [1], [_prod(frame)]
    return pads, tuple(outs), kstr, [st * s for st, s in zip(stride, sp)], list(outs)


def _col_k(xp, x, kernel, stride, pads, dilation, groups, outs, flat=False, into=None):
    """im2col, K-major: (``(G, C/G * prod(kernel), N * prod(frame))``, frame), one copy. The frame is the output, or
    with ``flat`` and a layout that allows it, ``k_major_layout``'s flat frame (long rows: the copy is one run per
    kernel offset and image, for a few dropped positions)."""
    n, c = x.shape[:2]
    nd = len(kernel)
    if flat and all(lo == hi for lo, hi in pads):
        lay_pads, frame, kstr, ostr, oshape = k_major_layout(x.shape[2:], outs, kernel, stride,
                                                             [lo for lo, _ in pads], dilation)
        if tuple(frame) != tuple(outs):
            xpad = pad_contiguous(xp, x, lay_pads)
            img = _prod(xpad.shape[2:])
            view = strided_view(xp, xpad, (c,) + tuple(kernel) + (n,) + tuple(oshape), [img] + kstr + [c * img] + ostr,
                                0)
            return _filled(xp, view, into, (groups, (c // groups) * _prod(kernel), n * _prod(frame))), frame
    xpad = pad_contiguous(xp, x, pads)
    st = [s // xpad.itemsize for s in xpad.strides]
    shape = (c,) + tuple(kernel) + (n,) + tuple(outs)
    strides = ([st[1]] + [st[2 + i] * dilation[i] for i in range(nd)] + [st[0]]
               + [st[2 + i] * stride[i] for i in range(nd)])
    view = strided_view(xp, xpad, shape, strides, 0)
    return _filled(xp, view, into, (groups, (c // groups) * _prod(kernel), n * _prod(outs))), tuple(outs)


def to_frame(xp, g, frame, groups):
    """``g`` ``(N, O, *outs)`` as ``(G, O/G, N * prod(frame))``, zero at the frame positions past the outputs."""
    n, o = g.shape[:2]
    nd = g.ndim - 2
    gt = g.transpose((1, 0) + tuple(range(2, 2 + nd)))
    if tuple(g.shape[2:]) != tuple(frame):
        buf = xp.zeros((o, n) + tuple(frame), dtype=g.dtype)
        buf[(slice(None), slice(None)) + tuple(slice(0, s) for s in g.shape[2:])] = gt
        gt = buf
    return xp.ascontiguousarray(gt).reshape(groups, o // groups, n * _prod(frame))


# -- the two GEMM kernels ---------------------------------------------------------------------------------------------
class _Stash(threading.local):
    """The window matrix of the last ``conv_forward`` while ``want`` is set (by conv2d and friends when the weight
    will need its gradient): its backward then skips the window copy. Per thread, so no other call can interleave."""

    want = False
    cols = None
    into = None  # an array to write the window matrix into instead of a new one (see `_filled`)


STASH = _Stash()


def conv_forward(xp, x, w, b, stride, pads, dilation, groups, outs):
    """Cross-correlation of ``x`` ``(N, C, *S)`` padded by ``pads`` (``(left, right)`` pairs) with ``w``
    ``(O, C/G, *kernel)``, plus the bias ``b`` (or None): ``(N, O, *outs)``, C-contiguous, one GEMM."""
    kernel, n, o = tuple(w.shape[2:]), x.shape[0], w.shape[0]
    if channels_last(x.shape[1], kernel, stride, dilation, outs, groups):
        col = _col_cl(xp, x, kernel, stride, pads, dilation, outs, STASH.into)
        if STASH.want:
            STASH.cols = ("channels_last", col)
        out = col @ _weight_cl(xp, w).T  # (N * prod(outs), O)
        if b is not None:
            out += b  # in place on the fresh product, contiguous along O
        return _from_cl(xp, out, n, outs)
    colT, frame = _col_k(xp, x, kernel, stride, pads, dilation, groups, outs, flat=_long_rows(outs), into=STASH.into)
    if STASH.want:
        STASH.cols = ("k_major", colT, frame)
    out = xp.matmul(xp.ascontiguousarray(w).reshape(groups, o // groups, -1), colT)  # (G, O/G, N * prod(frame))
    out = out.reshape(o, n, _prod(frame))
    if b is not None:
        out += b.reshape(o, 1, 1)
    if frame != tuple(outs):
        out = out.reshape((o, n) + tuple(frame))[(slice(None), slice(None)) + tuple(slice(0, k) for k in outs)]
        return xp.ascontiguousarray(out.transpose((1, 0) + tuple(range(2, 2 + len(outs)))))
    return xp.ascontiguousarray(out.transpose(1, 0, 2)).reshape((n, o) + tuple(outs))


def _long_rows(outs):
    return outs[-1] >= _CHANNELS_LAST_MAX_WIDTH


def weight_from_cols(xp, layout, cols, g, kernel, c, groups, frame=None):
    """(weight gradient ``(O, C/G, *kernel)``, bias gradient ``(O,)``) from the window matrix ``cols`` of
    ``conv_forward`` (``layout`` says which; K-major ones come with their ``frame``) and the output gradient ``g``."""
    o = g.shape[1]
    if layout == "channels_last":
        g_cl = _to_cl(xp, g)
        gw = g_cl.T @ cols  # (O, prod(kernel) * C)
        gw = xp.ascontiguousarray(gw.reshape((o,) + tuple(kernel) + (c,)).transpose(_second(len(kernel) + 2)))
        return gw, g_cl.sum(0)
    gT = to_frame(xp, g, g.shape[2:] if frame is None else frame, groups)  # (G, O/G, N * prod(frame))
    if cols.shape[1] >= _SWAP_DEPTH_RATIO * gT.shape[1]:
        # Many more window rows than output channels: OpenBLAS runs the product faster with them as its rows, the
        # transposed result copied back (64 channels by 512 rows over 4096 positions: 4.4 -> 3.3 ms).
        gw = xp.ascontiguousarray(xp.matmul(cols, gT.transpose(0, 2, 1)).transpose(0, 2, 1))
    else:
        gw = xp.matmul(gT, cols.transpose(0, 2, 1))  # (G, O/G, C/G * prod(kernel))
    return gw.reshape((o, c // groups) + tuple(kernel)), gT.reshape(o, -1).sum(1)


# Measured (one thread): at a ratio of 2.25 both orders tie, at 0.25 the swapped one is 7% slower, from 4 on 25-45%
# faster.
_SWAP_DEPTH_RATIO = 4


def conv_weight(xp, x, g, kernel, stride, pads, dilation, groups):
    """The weight gradient ``(O, C/G, *kernel)`` of ``conv_forward`` given its output gradient ``g`` ``(N, O, *outs)``.

    ``g`` may have fewer positions than ``x`` has windows (a transposed convolution's weight gradient): the windows
    follow ``g``.
    """
    c, outs = x.shape[1], tuple(g.shape[2:])
    if channels_last(c, kernel, stride, dilation, outs, groups):
        return weight_from_cols(xp, "channels_last", _col_cl(xp, x, kernel, stride, pads, dilation, outs), g, kernel,
                                c, groups)[0]
    colT, frame = _col_k(xp, x, kernel, stride, pads, dilation, groups, outs, flat=_long_rows(outs))
    return weight_from_cols(xp, "k_major", colT, g, kernel, c, groups, frame)[0]


# -- col2im -----------------------------------------------------------------------------------------------------------
def col2im(xp, col, spatial, kernel, stride, padding, dilation):
    """The adjoint of the window view: ``col`` ``(N, C, *kernel, *out)`` summed back into ``(N, C, *spatial)``.

    One vectorized strided add per kernel offset (9 for a 3x3 kernel), never a loop over positions.
    """
    nd = len(kernel)
    n, c = col.shape[:2]
    outs = col.shape[2 + nd:]
    padded = tuple(s + 2 * p for s, p in zip(spatial, padding))
    out = xp.zeros((n, c) + padded, dtype=col.dtype)
    for offset in itertools.product(*(range(k) for k in kernel)):
        key = tuple(slice(k * d, k * d + s * (o - 1) + 1, s) for k, d, s, o in zip(offset, dilation, stride, outs))
        out[(slice(None), slice(None)) + key] += col[(slice(None), slice(None)) + offset]
    crop = tuple(slice(p, p + s) for p, s in zip(padding, spatial))
    return xp.ascontiguousarray(out[(slice(None), slice(None)) + crop])


def col2im_T(xp, colT, n, spatial, outs, kernel, stride, padding, dilation, flat=True):
    """col2im of a K-major ``(C * prod(kernel), N * prod(frame))`` matrix (``k_major_layout``'s frame, flat or not)
    into ``(N, C, *spatial)``: one add per kernel offset, each over whole (flat: contiguous) runs."""
    pads, frame, kstr, ostr, oshape = k_major_layout(spatial, outs, kernel, stride, padding, dilation, flat)
    c = colT.shape[0] // _prod(kernel)
    if not colT.size:  # an empty batch (or no channels): no strided views of an empty buffer
        return xp.zeros((n, c) + tuple(spatial), dtype=colT.dtype)
    colT = colT.reshape((c,) + tuple(kernel) + (n,) + tuple(oshape))
    padded = tuple(s + lo + hi for s, (lo, hi) in zip(spatial, pads))
    out = xp.zeros((n, c) + padded, dtype=colT.dtype)
    img = _prod(padded)
    for offset in itertools.product(*(range(k) for k in kernel)):
        start = sum(k * s for k, s in zip(offset, kstr))
        dst = strided_view(xp, out, (c, n) + tuple(oshape), [img, c * img] + ostr, start)
        dst += colT[(slice(None),) + offset]
    crop = tuple(slice(lo, lo + s) for (lo, _), s in zip(pads, spatial))
    return xp.ascontiguousarray(out[(slice(None), slice(None)) + crop])
