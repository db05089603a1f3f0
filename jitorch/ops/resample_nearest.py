"""Nearest-neighbour resampling rows: ``upsample_nearest`` (``F.interpolate``'s nearest and nearest-exact modes) and
its gradient ``upsample_nearest_backward``, each one dispatch.

The forward copies (an inf or NaN input stays where ATen copies it): integer upscaling repeats each element, other
sizes gather through flat indices over all the spatial dims at once. The gradient adds each output's gradient to
its source in output order, from a zeroed float32 (or float64) buffer, exactly as ATen's
``cpu_upsample_nearest_backward`` loop, so the sums are bit-identical to torch's, half types rounding once. The two
rows are each other's adjoint, which gives every higher derivative.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> apply(UPSAMPLE_NEAREST, jitorch.tensor([[[1.0, 2.0]]]), sizes=(4,), scales=(None,), exact=False)
tensor([[[1., 1., 2., 2.]]])
"""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from .table import Opaque, defop

__all__ = ["UPSAMPLE_NEAREST", "UPSAMPLE_NEAREST_BACKWARD", "scale_ratio", "source_index"]


def scale_ratio(ftype, in_size, out_size, scale):
    """PyTorch's ``compute_scales_value``: 1 / scale_factor when one was given, else in / out (in ``ftype``)."""
    if scale is not None and scale > 0:
        return ftype(1.0 / scale)
    return ftype(in_size) / ftype(out_size)


@functools.lru_cache(maxsize=512)
def source_index(in_size, out_size, scale, exact, shortcuts):
    """The input index each output position along one dim copies, as ATen's ``nearest_idx`` (``shortcuts``: its 2-D
    kernel takes equal sizes and exact doubling without the float scale) or ``nearest_neighbor_exact_compute_source_
    index``; float32 arithmetic as ATen's. Returns (index, k) with k the repeat factor when the index is
    ``arange // k`` (integer upscaling, or k = 1), else None."""
    o = np.arange(out_size)
    if shortcuts and out_size == in_size:
        index = o
    elif shortcuts and out_size == 2 * in_size:
        index = o >> 1
    else:
        ratio = scale_ratio(np.float32, in_size, out_size, scale)
        src = (o + 0.5) * np.float64(ratio) if exact else o.astype(np.float32) * ratio
        index = np.minimum(np.floor(src.astype(np.float32)).astype(np.int64), in_size - 1)
    k = out_size // in_size
    repeat = k if k * in_size == out_size and np.array_equal(index, o // k) else None
    index.flags.writeable = False
    return index, repeat


def _indices(in_sizes, sizes, scales, exact):
    shortcuts = not exact and len(sizes) == 2
    return [source_index(i, o, s, exact, shortcuts) for i, o, s in zip(in_sizes, sizes, scales)]


@functools.lru_cache(maxsize=128)
def _flat_index(in_sizes, sizes, scales, exact):
    """Flat source index (within one ``(n, c)`` plane) of every output position, row-major."""
    flat = np.zeros((), dtype=np.int64)
    for (index, _), n in zip(_indices(in_sizes, sizes, scales, exact), in_sizes):
        flat = (flat[..., None] * n + index).reshape(flat.shape + index.shape)
    flat = flat.reshape(-1)
    flat.flags.writeable = False
    return flat


def _forward_kernel(xp, x, sizes, scales, exact):
    lead, in_sizes = x.shape[:2], tuple(x.shape[2:])
    taps = _indices(in_sizes, sizes, scales, exact)
    if any(k is None for _, k in taps):
        flat = xp.asarray(_flat_index(in_sizes, tuple(sizes), tuple(scales), exact))
        return xp.take(x.reshape(lead + (math.prod(in_sizes),)), flat, axis=2).reshape(lead + tuple(sizes))
    ks = [k for _, k in taps]
    # Into the (N, C, d0, k0, d1, k1, ...) view of the output: the input copied k times along the last dim (strided
    # writes: ``repeat`` or a broadcast over a trailing k axis run 2-5x slower), then those rows copied along the
    # other dims, last to first, as contiguous blocks.
    out = xp.empty(lead + tuple(v for n, k in zip(in_sizes, ks) for v in (n, k)), dtype=x.dtype)
    last = len(ks) - 1
    at = [slice(None)] * out.ndim
    for d in range(last):
        at[3 + 2 * d] = 0
    for i in range(ks[last]):
        at[3 + 2 * last] = i
        out[tuple(at)] = x
    at[3 + 2 * last] = slice(None)
    for d in reversed(range(last)):
        source = tuple(at)
        for j in range(1, ks[d]):
            at[3 + 2 * d] = j
            out[tuple(at)] = out[source]
        at[3 + 2 * d] = slice(None)
    return out.reshape(lead + tuple(sizes))


def _ordered_sum(xp, terms, acc_type):
    """``((0 + t0) + t1) + ...`` in ``acc_type``, ATen's sum from a zeroed buffer: summed from ``t0`` the partial
    sums only differ where they are -0 instead of +0, which the final ``+ 0`` turns to +0 (one contiguous pass;
    adding to a strided term is ~3x slower)."""
    acc = xp.add(terms[0], terms[1], dtype=acc_type) if len(terms) > 1 else terms[0].astype(acc_type)
    for t in terms[2:]:
        acc += t
    acc += acc_type(0)
    return acc


@functools.lru_cache(maxsize=512)
def _picks(in_size, out_size, scale, exact, shortcuts):
    """Per input index along one dim, its i-th copying output for each i below the most copies any index gets:
    (a strided slice, or (output indices, whether the index has an i-th copy or None when all have))."""
    index, k = source_index(in_size, out_size, scale, exact, shortcuts)
    if k is not None:
        return tuple((slice(i, None, k), None) for i in range(k))
    counts = np.bincount(index, minlength=in_size)
    starts = np.searchsorted(index, np.arange(in_size))
    return tuple((np.minimum(starts + i, len(index) - 1), None if (counts > i).all() else counts > i)
                 for i in range(max(counts.max(), 1)))


@functools.lru_cache(maxsize=128)
def _gather_plan(in_sizes, sizes, scales, exact):
    """For sizes that are not all integer upscaling: every term of the gradient's sums gathered at once, as flat
    output indices ``(terms * prod(in_sizes),)`` (the picks' product in row-major order) and whether each is a real
    copy (None when all are)."""
    flats, masks = [], []
    per_dim = [_picks(n, m, s, exact, not exact) for n, m, s in zip(in_sizes, sizes, scales)]
    for choice in itertools.product(*per_dim):
        flat, mask = np.zeros((), dtype=np.int64), np.ones((), dtype=bool)
        for (where, valid), m in zip(choice, sizes):
            where = np.arange(where.start, m, where.step) if isinstance(where, slice) else where
            flat = flat[..., None] * m + where
            mask = mask[..., None] & (True if valid is None else valid)
        flats.append(flat.reshape(-1))
        masks.append(np.broadcast_to(mask, flat.shape).reshape(-1))
    flat, mask = np.concatenate(flats), np.concatenate(masks)
    flat.flags.writeable = mask.flags.writeable = False
    return len(flats), flat, None if mask.all() else mask


def _backward_kernel(xp, g, in_sizes, scales, exact):
    lead, sizes = g.shape[:2], tuple(g.shape[2:])
    acc_type = np.float64 if g.dtype == np.float64 else np.float32  # ATen's opmath type
    # ATen's 1-D/3-D nearest forward kernels apply the scale to a dim that keeps its size (1.1 maps 7 -> 7 with
    # shifted sources); their backward, as every 2-D kernel, takes such a dim as a copy (``shortcuts``). The i-th
    # picks over all dims, in row-major order of i, are ATen's order of additions (its loop runs over the outputs).
    picks = [_picks(n, m, s, exact, not exact) for n, m, s in zip(in_sizes, sizes, scales)]
    if not all(isinstance(w, slice) for per_dim in picks for w, _ in per_dim):
        terms, flat, mask = _gather_plan(tuple(in_sizes), sizes, tuple(scales), exact)
        t = xp.take(g.reshape(lead + (math.prod(sizes),)), xp.asarray(flat), axis=2)
        if mask is not None:  # adding +0 leaves every sum as it is (the buffer starts at +0, never -0)
            t = xp.where(xp.asarray(mask), t, xp.zeros((), dtype=g.dtype))
        t = t.reshape(lead + (terms, math.prod(in_sizes)))
        acc = _ordered_sum(xp, [t[:, :, i] for i in range(terms)], acc_type)
        return acc.reshape(lead + tuple(in_sizes)).astype(g.dtype, copy=False)
    terms = []
    for choice in itertools.product(*picks):
        terms.append(g[(slice(None),) * 2 + tuple(where for where, _ in choice)])
    return _ordered_sum(xp, terms, acc_type).astype(g.dtype, copy=False)


def _forward_backward(ctx, g):
    x_shape = ctx.in_meta[0][0]
    return _apply(UPSAMPLE_NEAREST_BACKWARD, g, in_sizes=tuple(x_shape[2:]), scales=ctx.attrs["scales"],
                     exact=ctx.attrs["exact"])


def _backward_backward(ctx, gg):
    return _apply(UPSAMPLE_NEAREST, gg, sizes=tuple(ctx.in_meta[0][0][2:]), scales=ctx.attrs["scales"],
                     exact=ctx.attrs["exact"])


def _apply(op, *args, **attrs):
    from .._dispatch import apply

    return apply(op, *args, **attrs)


UPSAMPLE_NEAREST = defop("upsample_nearest", _forward_kernel, _forward_backward, Opaque("indexed copy"), meta=True,
                         grad_name="UpsampleNearestBackward0")
UPSAMPLE_NEAREST_BACKWARD = defop("upsample_nearest_backward", _backward_kernel, _backward_backward,
                                  Opaque("indexed sum"), meta=True, grad_name="UpsampleNearestBackwardBackward0")
