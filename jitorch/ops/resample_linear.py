"""Interpolating resampling along one dim: ``F.interpolate``'s linear, bilinear, trilinear and bicubic modes run one
of these rows per spatial dim, and ``upsample_taps_backward`` is their gradient.

Output ``o`` along the dim is ``sum_k weight_k[o] * x[index_k[o]]`` over two taps (linear) or four (cubic), with the
source coordinates, taps and weights of ATen's CPU kernels, computed in the input's float type. The gradient adds
each output's weighted gradient to its taps' sources; the two rows are each other's adjoint, which gives every
higher derivative.

Two ways to compute the same sums. On the CPU, for dims of up to 256 source positions whose values are all finite
(one sum over the input tells), the dim is resampled by ONE BLAS product with the dense ``(out, in)`` matrix of the
weights: 2-3x faster than gathers at such sizes. An inf or NaN would meet every zero of that matrix (``inf * 0``)
and turn whole rows NaN, so such inputs, longer dims and CuPy arrays take the gathers: each tap gathered, weighted
and added, and the gradient's contributions per source added in ATen's order (output after output, tap after tap;
one ordered scatter-add when a source gets many), so an inf or NaN reaches only the outputs ATen lets it reach.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> apply(UPSAMPLE_LINEAR["linear"], jitorch.tensor([[[1.0, 3.0]]]), dim=2, size=4, scale=None,
...       align_corners=False, round_to=None, cubic=False)
tensor([[[1.0000, 1.5000, 2.5000, 3.0000]]])
"""
from __future__ import annotations

import functools
import math

import ml_dtypes  # noqa: F401 - registers the bfloat16 name ``round_to`` may give
import numpy as np

from ..runtime import is_cupy, scatter_add
from .resample_nearest import scale_ratio
from .table import Opaque, defop

__all__ = ["UPSAMPLE_LINEAR", "UPSAMPLE_TAPS_BACKWARD", "taps"]


def _source_coords(ftype, in_size, out_size, scale, align_corners, cubic):
    o = np.arange(out_size).astype(ftype)
    if align_corners:
        ratio = ftype(in_size - 1) / ftype(out_size - 1) if out_size > 1 else ftype(0)
        return ratio * o
    ratio = scale_ratio(ftype, in_size, out_size, scale)
    # ATen's float32 kernels compute ratio * (o + 0.5) - 0.5 as one fused multiply-add (one rounding): the product of
    # two float32 values is exact in float64, so rounding the float64 result once gives the same source (two
    # roundings put lambda at exactly 0 where ATen has 1e-8, and an inf neighbour then gave NaN instead of inf).
    src = (np.float64(ratio) * (o.astype(np.float64) + 0.5) - 0.5).astype(ftype)
    return src if cubic else np.maximum(src, ftype(0))


def _cubic_coefficients(t, a=-0.75):
    def near(v):  # |v| <= 1
        return ((a + 2) * v - (a + 3)) * v * v + 1

    def far(v):  # 1 < |v| < 2
        return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


@functools.lru_cache(maxsize=512)
def taps(float_name, in_size, out_size, scale, align_corners, cubic, round_to=None):
    """``((index, weight), ...)`` of one dim as ATen computes them in ``float_name`` ("float32"/"float64");
    ``round_to``: a dtype name the weights are rounded through (ATen's half-type bicubic keeps them in that type).

    >>> [(i.tolist(), w.tolist()) for i, w in taps("float32", 2, 4, None, False, False)]
    [([0, 0, 0, 1], [1.0, 0.75, 0.25, 0.75]), ([1, 1, 1, 1], [0.0, 0.25, 0.75, 0.25])]
    """
    ftype = np.float64 if float_name == "float64" else np.float32
    if out_size == in_size and not cubic:  # ATen's linear kernels: x * 1 + x * 0 (an inf there becomes NaN)
        o = np.arange(in_size)
        return _frozen([(o, np.ones(in_size, ftype)), (o, np.zeros(in_size, ftype))])
    src = _source_coords(ftype, in_size, out_size, scale, align_corners, cubic)
    if cubic:
        base = np.floor(src).astype(np.int64)
        t = (src - base.astype(ftype)).astype(ftype)
        out = [(np.clip(base - 1 + k, 0, in_size - 1), c.astype(ftype))
               for k, c in enumerate(_cubic_coefficients(t))]
    else:
        i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
        lam = np.clip(src - i0.astype(ftype), 0, 1).astype(ftype)
        out = [(i0, (1 - lam).astype(ftype)), (i0 + (i0 < in_size - 1), lam)]
    if round_to is not None:
        out = [(i, w.astype(round_to).astype(ftype)) for i, w in out]
    return _frozen(out)


def _frozen(pairs):
    for i, w in pairs:
        i.flags.writeable = w.flags.writeable = False
    return tuple(pairs)


def _along(w, ndim, dim):
    shape = [1] * ndim
    shape[dim] = -1
    return w.reshape(shape)


def _float_name(dtype):
    return "float64" if dtype == np.float64 else "float32"


@functools.lru_cache(maxsize=64)
def _dense(float_name, in_size, out_size, scale, align_corners, cubic, round_to):
    """The ``(out, in)`` matrix of the taps' weights (in ``float_name``; taps on one source add up)."""
    m = np.zeros((out_size, in_size), dtype=np.float64)
    rows = np.arange(out_size)
    for index, weight in taps(float_name, in_size, out_size, scale, align_corners, cubic, round_to):
        np.add.at(m, (rows, index), weight)
    m = m.astype(float_name)
    m.flags.writeable = False
    return m


# The dense product costs in * out per line, the gathers a few passes of out: past 256 source positions (or a
# matrix of 2^18 entries) the gathers win, measured on 1-D and 2-D upsampling, and the matrix stops being small.
_DENSE_IN, _DENSE_ENTRIES = 256, 1 << 18


def _dense_ok(xp, a, in_size, out_size):
    # On a GPU the finiteness test would be a host sync (and CUDA graph capture forbids one): gathers there. A sum
    # that overflows to inf only sends finite values down the gather path, which gives the same sums.
    return (not is_cupy(xp) and in_size <= _DENSE_IN and in_size * out_size <= _DENSE_ENTRIES and a.size > 0
            and bool(xp.isfinite(a.sum(dtype=a.dtype))))


def _product_along(xp, a, m, dim):
    """``a`` resampled along ``dim`` by ``m`` ``(out, in)``, as one product, row-major."""
    m = xp.asarray(m)
    if dim == a.ndim - 1:
        return xp.matmul(a.reshape(-1, a.shape[-1]), m.T).reshape(a.shape[:-1] + (m.shape[0],))
    # One (out, in) @ (in, trailing) product per leading index: 4-8x faster than moving the dim last (tensordot).
    lead, trail = math.prod(a.shape[:dim]), math.prod(a.shape[dim + 1:])
    out = xp.matmul(m, a.reshape(lead, a.shape[dim], trail))
    return out.reshape(a.shape[:dim] + (m.shape[0],) + a.shape[dim + 1:])


def _forward_kernel(xp, x, dim, size, scale, align_corners, round_to, cubic):
    if size == x.shape[dim] and not cubic and _dense_ok(xp, x, 1, 1):  # a kept dim of finite values: a copy
        return x.copy()
    if _dense_ok(xp, x, x.shape[dim], size):
        return _product_along(xp, x, _dense(_float_name(x.dtype), x.shape[dim], size, scale, align_corners, cubic,
                                        round_to), dim)
    out = None
    for index, weight in taps(_float_name(x.dtype), x.shape[dim], size, scale, align_corners, cubic, round_to):
        term = xp.take(x, xp.asarray(index), axis=dim)
        term *= xp.asarray(_along(weight, x.ndim, dim), dtype=term.dtype)
        if out is None:
            out = term
        else:
            out += term
    return out


@functools.lru_cache(maxsize=256)
def _adjoint_plan(float_name, in_size, out_size, scale, align_corners, cubic, round_to):
    """Each input index's contributions in ATen's order (output after output, tap after tap), as positions in the
    taps' weighted gradients laid end to end (``k * out_size + o``): one gather per rank, with a mask where an index
    has fewer contributions than the rank (None when all have)."""
    indices = np.stack([i for i, _ in taps(float_name, in_size, out_size, scale, align_corners, cubic, round_to)])
    k_count = len(indices)
    target = indices.T.reshape(-1)  # (o, k) order
    position = (np.arange(k_count)[None, :] * out_size + np.arange(out_size)[:, None]).reshape(-1)
    order = np.argsort(target, kind="stable")
    target, position = target[order], position[order]
    counts = np.bincount(target, minlength=in_size)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    ranks = []
    for r in range(max(int(counts.max()), 1)):
        has = counts > r
        pick = position[np.minimum(starts + r, len(position) - 1)]
        pick.flags.writeable = has.flags.writeable = False
        ranks.append((pick, None if has.all() else has))
    return tuple(ranks)


_MAX_RANKS = 4  # past this many contributions per source (large upscaling), one scatter-add beats a gather per rank


def _scattered(xp, g, dim, in_size, tap_list):
    """The gradient as ONE scatter-add of every contribution in ATen's order (output after output, tap after tap);
    an accumulating scatter adds repeated positions in the order given."""
    moved = xp.moveaxis(g, dim, 0)
    rest = moved.shape[1:]
    lead = (moved.shape[0],) + (1,) * len(rest)
    terms = xp.stack([moved * xp.asarray(w.reshape(lead), dtype=g.dtype) for _, w in tap_list], axis=1)
    index = xp.asarray(np.stack([i for i, _ in tap_list], axis=1).reshape(-1))
    out = xp.zeros((in_size,) + rest, dtype=g.dtype)
    scatter_add(xp, out, (index,), terms.reshape((-1,) + rest))
    return xp.ascontiguousarray(xp.moveaxis(out, 0, dim))


def _backward_kernel(xp, g, dim, in_size, scale, align_corners, round_to, cubic):
    name = _float_name(g.dtype)
    if in_size == g.shape[dim] and not cubic and _dense_ok(xp, g, 1, 1):
        return g.copy()
    if _dense_ok(xp, g, in_size, g.shape[dim]):
        return _product_along(xp, g, _dense(name, in_size, g.shape[dim], scale, align_corners, cubic, round_to).T, dim)
    tap_list = taps(name, in_size, g.shape[dim], scale, align_corners, cubic, round_to)
    plan = _adjoint_plan(name, in_size, g.shape[dim], scale, align_corners, cubic, round_to)
    if len(plan) > _MAX_RANKS:
        return _scattered(xp, g, dim, in_size, tap_list)
    weighted = xp.concatenate([g * xp.asarray(_along(w, g.ndim, dim), dtype=g.dtype) for _, w in tap_list],
                              axis=dim)
    acc = None
    for pick, has in plan:
        term = xp.take(weighted, xp.asarray(pick), axis=dim)
        if has is not None:
            term = xp.where(xp.asarray(_along(has, g.ndim, dim)), term, xp.zeros((), dtype=term.dtype))
        acc = term if acc is None else acc.__iadd__(term)
    return acc


def _attrs(ctx):
    a = ctx.attrs
    return dict(dim=a["dim"], scale=a["scale"], align_corners=a["align_corners"], round_to=a["round_to"],
                cubic=a["cubic"])


def _forward_backward(ctx, g):
    return _apply(UPSAMPLE_TAPS_BACKWARD, g, in_size=ctx.in_meta[0][0][ctx.attrs["dim"]], **_attrs(ctx))


def _backward_backward(ctx, gg):
    row = UPSAMPLE_LINEAR["bicubic" if ctx.attrs["cubic"] else "linear"]
    return _apply(row, gg, size=ctx.in_meta[0][0][ctx.attrs["dim"]], **_attrs(ctx))


def _apply(op, *args, **attrs):
    from .._dispatch import apply

    return apply(op, *args, **attrs)


# One row per mode only for torch's grad_fn names (the chain of dims ends in the mode's node); ``cubic`` picks the taps.
UPSAMPLE_LINEAR = {
    mode: defop(f"upsample_{mode}", _forward_kernel, _forward_backward, Opaque("weighted gather"),
                meta=True, grad_name=grad_name)
    for mode, grad_name in (("linear", "UpsampleLinear1DBackward0"), ("bilinear", "UpsampleBilinear2DBackward0"),
                            ("trilinear", "UpsampleTrilinear3DBackward0"),
                            ("bicubic", "UpsampleBicubic2DBackward0"))}
UPSAMPLE_TAPS_BACKWARD = defop("upsample_taps_backward", _backward_kernel, _backward_backward,
                               Opaque("weighted scatter-add"), meta=True,
                               grad_name="UpsampleTapsBackwardBackward0")
