"""``grid_sampler`` rows: ``F.grid_sample``'s bilinear (trilinear), nearest and (4-D) bicubic modes, 4-D or 5-D,
every padding mode, float32/float64, and their gradient row ``grid_sampler_backward``.

The taps of every output position (their flat source index in the channels-last image and their weight, the ones
outside the image dropped as ATen's bounds checks drop them) make one sparse matrix ``S`` (outputs x source pixels):
the output is ``S @ x`` over channels-last rows, the input's gradient ``S.T @ g``, and the grid's gradient the row
dots of ``g`` with ``S_k @ x``, ``S_k`` holding each tap's weight differentiated along spatial dim ``k`` (times
ATen's coordinate gradient: unnormalization scale, reflection sign, zero where clipped). Three sparse products
replace the composite's gathers and their scatter-add backward (9x torch's time at 16x64x32x32). Bicubic's taps
are its 16 padded neighbours with ATen's cubic convolution weights.

A point whose weight is NaN (a NaN or infinite grid coordinate) gives NaN, as ATen's ``weight * masked_value``.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> x = jitorch.arange(4.0).reshape(1, 1, 2, 2)
>>> apply(GRID_SAMPLER, x, jitorch.zeros(1, 1, 1, 2), mode="bilinear", padding_mode="zeros", align_corners=True)
tensor([[[[1.5000]]]])
"""
from __future__ import annotations

import functools
import math

from ..autograd.grad_mode import GradState
import numpy as np

from .sparse_ops import _sparse_module
from .table import Opaque, defop

__all__ = ["GRID_SAMPLER", "GRID_SAMPLER_BACKWARD", "DTYPES"]

DTYPES = ("float32", "float64")  # the sparse products' types; half inputs take the composite


def _coordinates(xp, grid, sizes, padding_mode, align_corners, pad=True):
    """Per spatial dim (outermost first): the source pixel coordinate of each output position ``(N*P,)`` and its
    derivative by the grid value (ATen's ``grid_sampler_compute_source_index_set_grad``; ``pad=False``: only
    unnormalized, as bicubic pads each tap instead)."""
    nd = len(sizes)
    flat = grid.reshape(-1, nd)
    coords, mults = [], []
    for k, size in enumerate(sizes):
        g = flat[:, nd - 1 - k]  # the grid lists (x, y[, z]): x indexes the innermost dim
        if align_corners:
            coord, scale = (g + 1) / 2 * (size - 1), (size - 1) / 2
        else:
            coord, scale = ((g + 1) * size - 1) / 2, size / 2
        mult = xp.full(coord.shape, scale, dtype=coord.dtype)
        if pad:
            coord, mult = _pad(xp, coord, mult, size, padding_mode, align_corners)
        coords.append(coord)
        mults.append(mult)
    return coords, mults


def _pad(xp, coord, mult, size, padding_mode, align_corners):
    """ATen's ``compute_coordinates``: ``coord`` reflected and/or clipped into the image (``zeros``: as is), and
    ``mult`` times the derivative."""
    if padding_mode == "reflection":
        coord, mult = _reflect(xp, coord, mult, *((0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)))
    if padding_mode in ("border", "reflection"):
        # ATen's clip_coordinates_set_grad: the edges themselves pass no gradient
        inside = (coord > 0) & (coord < size - 1)
        mult = xp.where(inside, mult, 0)
        coord = xp.where(inside, coord, xp.clip(coord, 0, size - 1))
    return coord, mult


def _reflect(xp, coord, mult, twice_low, twice_high):
    """ATen's ``reflect_coordinates_set_grad``: ``coord`` folded into ``[low, high]`` by mirror reflections, and the
    gradient's sign flipped for each reflection (written as the composite's arithmetic, whose values torch's tests
    accept)."""
    if twice_low == twice_high:
        return coord * 0, mult * 0
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    shifted = coord - low
    dist = xp.abs(shifted)
    flips = xp.floor(dist / span)
    extra = dist - flips * span
    even = flips % 2 == 0
    sign = xp.where((shifted < 0) != ~even, -1, 1).astype(coord.dtype)
    return xp.where(even, extra + low, span - extra + low), mult * sign


def _cubic(xp, t, a=-0.75):
    """ATen's cubic convolution weights of the four taps at ``t`` (the fraction past the second), and their
    derivatives by ``t``, each ``(4, rows)``."""
    near = lambda v: ((a + 2) * v - (a + 3)) * v * v + 1  # noqa: E731 - |v| <= 1
    far = lambda v: ((a * v - 5 * a) * v + 8 * a) * v - 4 * a  # noqa: E731 - 1 < |v| < 2
    d_near = lambda v: (3 * (a + 2) * v - 2 * (a + 3)) * v  # noqa: E731
    d_far = lambda v: (3 * a * v - 10 * a) * v + 8 * a  # noqa: E731
    weights = xp.stack([far(t + 1), near(t), near(1 - t), far(2 - t)])
    return weights, xp.stack([d_far(t + 1), d_near(t), -d_near(1 - t), -d_far(2 - t)])


def _dim_taps(xp, coord, size, mode, padding_mode, align_corners):
    """One dim's taps: positions, weights and their derivatives by the coordinate, each ``(T, rows)`` (weights
    None for nearest)."""
    if mode == "nearest":
        return xp.rint(coord)[None], None, None
    low = xp.floor(coord)
    if mode == "bilinear":
        sign = xp.asarray([[-1], [1]], dtype=coord.dtype)
        return xp.stack([low, low + 1]), xp.stack([low + 1 - coord, coord - low]), sign
    # bicubic: each tap's integer position padded on its own (ATen's get_value_bounded), no gradient through it
    positions = xp.stack([_pad(xp, low + (i - 1), low, size, padding_mode, align_corners)[0] for i in range(4)])
    weights, derivatives = _cubic(xp, coord - low)
    return positions, weights, derivatives


def _taps(xp, coords, sizes, n, mode, padding_mode, align_corners):
    """The taps of each output row: (valid, flat index, weight, [d weight / d coord_k per dim]), each ``(N*P, T)``
    (views of tap-major arrays: NumPy's loops over a trailing axis of 2 ran 10x slower); weights and derivatives are
    None for nearest (weight 1, no grid gradient)."""
    rows, nd, plane = coords[0].shape[0], len(sizes), math.prod(sizes)
    index_type = xp.int32 if n * plane < 2 ** 31 - 1 else xp.int64
    per_dim = [_dim_taps(xp, c, size, mode, padding_mode, align_corners) for c, size in zip(coords, sizes)]
    valid = index = None
    shapes = []
    for k, (size, (taps, _, _)) in enumerate(zip(sizes, per_dim)):
        shape = (1,) * k + (taps.shape[0],) + (1,) * (nd - 1 - k) + (rows,)
        shapes.append(shape)
        inside = (taps >= 0) & (taps <= size - 1)
        safe = xp.where(inside, taps, 0).astype(index_type).reshape(shape)
        inside = inside.reshape(shape)
        valid = inside if valid is None else valid & inside
        index = safe if index is None else index * index_type(size) + safe
    # each sample's pixels follow the previous sample's
    index = index.reshape(-1, n, rows // n) + xp.arange(n, dtype=index_type)[:, None] * index_type(plane)
    valid, index = valid.reshape(-1, rows).T, index.reshape(-1, rows).T
    if mode == "nearest":
        return valid, index, None, None
    weight = None
    for (_, w, _), shape in zip(per_dim, shapes):
        weight = w.reshape(shape) if weight is None else weight * w.reshape(shape)
    dweights = []
    for k in range(nd):
        d = None
        for j, ((_, w, dw), shape) in enumerate(zip(per_dim, shapes)):
            factor = (dw if j == k else w).reshape(shape[:-1] + (-1,))
            d = factor if d is None else d * factor
        dweights.append(xp.broadcast_to(d, weight.shape).reshape(-1, rows).T)
    return valid, index, weight.reshape(-1, rows).T, dweights


def _compressed(xp, valid, index, datas):
    """CSR parts of the valid taps (one row per output position, in tap order): (indptr, indices, data per entry of
    ``datas``)."""
    index_type = index.dtype
    valid = xp.ascontiguousarray(valid)  # row-major masks select 2-3x faster than the tap-major views
    counts = valid.sum(axis=1, dtype=index_type)
    indptr = xp.concatenate([xp.zeros(1, dtype=index_type), xp.cumsum(counts, dtype=index_type)])
    return indptr, xp.ascontiguousarray(index)[valid], [xp.ascontiguousarray(d)[valid] for d in datas]


def _blocks(n, row_bytes):
    """Sample ranges whose rows stay in cache (about 512 KiB): the copies to and from channels-last rows and the
    sparse products then run at cache speed, where whole-batch passes ran 2-4x slower on a busy machine."""
    step = max(1, (1 << 19) // max(row_bytes, 1))
    return [(s, min(n, s + step)) for s in range(0, n, step)]


@functools.cache
def _sparse_loops():
    """SciPy's compiled sparse loops (private, unchanged for years), or None on a SciPy without them."""
    try:
        from scipy.sparse import _sparsetools
    except ImportError:  # pragma: no cover - another SciPy layout: the matrix classes
        return None
    return _sparsetools if hasattr(_sparsetools, "csr_matvecs") and hasattr(_sparsetools, "csc_matvecs") else None


def _product(xp, parts, data, s, e, per, plane, dense, transpose=False):
    """``S @ dense`` (``S.T @ dense`` when ``transpose``) for the matrix ``S`` of samples ``s:e``: their
    ``(e - s) * per`` output rows over their ``(e - s) * plane`` pixels, entries ``data``."""
    indptr, indices = parts[0], parts[1]
    lo, hi = int(indptr[s * per]), int(indptr[e * per])
    pointers, columns = indptr[s * per:e * per + 1] - indptr[s * per], indices[lo:hi] - indices.dtype.type(s * plane)
    shape = ((e - s) * per, (e - s) * plane)
    loops = _sparse_loops() if xp is np else None
    if loops is not None:
        # SciPy's own product loops, called without building a matrix object per block (its checks cost ~50 us, as
        # much as a block's product); they add into a zeroed result
        out = np.zeros((shape[1] if transpose else shape[0], dense.shape[1]), dtype=dense.dtype)
        kernel = loops.csc_matvecs if transpose else loops.csr_matvecs
        kernel(*(shape[::-1] if transpose else shape), dense.shape[1], pointers, columns, data[lo:hi],
               xp.ascontiguousarray(dense).ravel(), out.ravel())
        return out
    matrix = _sparse_module(xp).csr_matrix((data[lo:hi], columns, pointers), shape=shape)
    return (matrix.T if transpose else matrix) @ dense


def _lost(xp, valid, data):
    """Per row, the sum of ``0 * data`` over the taps outside the image: NaN where such a tap's weight (or weight
    derivative) is NaN or infinite, as ATen multiplies it by the masked 0, else 0."""
    return xp.where(valid, 0, data * 0).sum(axis=1)


def _row_blocks(xp, x):
    """``rows(s, e)``: samples ``s:e`` of ``(N, C, *spatial)`` as contiguous ``((e - s) * prod(spatial), C)`` rows."""
    n, c = x.shape[:2]
    moved = xp.moveaxis(x, 1, -1)
    if moved.flags.c_contiguous:  # a channels-last input already is
        whole = moved.reshape(n, -1, c)
        return lambda s, e: whole[s:e].reshape(-1, c)
    planes = x.reshape(n, c, -1)

    def rows(s, e):
        src = planes[s:e].transpose(0, 2, 1)
        out = xp.empty(src.shape, dtype=x.dtype)
        # Eight channels at a time: one copy reads the channel planes a page apart, and those reads evict each
        # other from the cache (4.5x slower at 16x64x32x32).
        for j in range(0, c, 8):
            out[..., j:j + 8] = src[..., j:j + 8]
        return out.reshape(-1, c)
    return rows


def _plan(xp, x, grid, mode, padding_mode, align_corners):
    n, sizes = x.shape[0], tuple(x.shape[2:])
    coords, mults = _coordinates(xp, grid, sizes, padding_mode, align_corners, pad=mode != "bicubic")
    valid, index, weight, dweights = _taps(xp, coords, sizes, n, mode, padding_mode, align_corners)
    return valid, index, weight, dweights, mults, (coords[0].shape[0] // n, math.prod(sizes))


def _forward_kernel(xp, x, grid, mode, padding_mode, align_corners):
    valid, index, weight, _, _, (per, plane) = _plan(xp, x, grid, mode, padding_mode, align_corners)
    n, c = x.shape[:2]
    weight = xp.ones(index.shape, dtype=x.dtype) if weight is None else weight
    parts = _compressed(xp, valid, index, [weight])
    lost = _lost(xp, valid, weight)
    lost = None if xp.isfinite(lost).all() else lost[:, None]
    out = xp.empty((n, c) + tuple(grid.shape[1:-1]), dtype=x.dtype)
    out_planes, rows = out.reshape(n, c, per), _row_blocks(xp, x)
    for s, e in _blocks(n, c * max(plane, per) * x.itemsize):
        r = _product(xp, parts, parts[2][0], s, e, per, plane, rows(s, e))
        if lost is not None:
            r += lost[s * per:e * per]
        out_planes[s:e] = r.reshape(e - s, per, c).transpose(0, 2, 1)
    return out


def _backward_kernel(xp, g, x, grid, mode, padding_mode, align_corners, needs):
    valid, index, weight, dweights, mults, (per, plane) = _plan(xp, x, grid, mode, padding_mode, align_corners)
    n, c, nd = x.shape[0], x.shape[1], x.ndim - 2
    weight = xp.ones(index.shape, dtype=x.dtype) if weight is None else weight
    grid_grad = needs[1] and mode != "nearest"  # ATen's nearest backward gives the grid zeros
    parts = _compressed(xp, valid, index, [weight] + (dweights if grid_grad else []))
    gx = ggrid = xp.zeros((0,), dtype=x.dtype)  # placeholders for gradients nobody asked for
    if needs[0]:
        gx = xp.empty(x.shape, dtype=x.dtype)
        gx_planes = gx.reshape(n, c, plane)
    if needs[1]:
        ggrid = xp.zeros(grid.shape, dtype=grid.dtype)
        flat = ggrid.reshape(-1, nd)
    g_rows, x_rows = _row_blocks(xp, g), _row_blocks(xp, x)
    for s, e in _blocks(n, c * max(plane, per) * x.itemsize):
        gb = g_rows(s, e)
        if needs[0]:
            r = _product(xp, parts, parts[2][0], s, e, per, plane, gb, transpose=True)
            gx_planes[s:e] = r.reshape(e - s, plane, c).transpose(0, 2, 1)
        if grid_grad:
            xb = x_rows(s, e)
            for k in range(nd):
                u = _product(xp, parts, parts[2][1 + k], s, e, per, plane, xb)
                flat[s * per:e * per, nd - 1 - k] = xp.einsum("ij,ij->i", u, gb)
    if grid_grad:
        for k in range(nd):
            # the taps outside the image add 0 * their weight's derivative (NaN for a NaN grid point)
            flat[:, nd - 1 - k] += _lost(xp, valid, dweights[k])
            flat[:, nd - 1 - k] *= mults[k]
    return gx, ggrid


def _composite_grads(g, x, grid, attrs, needs, create_graph):
    """The composite's gradients (``nn._spatial_sample``), by autograd: ``create_graph`` backwards get a graph."""
    from ..autograd import grad as autograd_grad
    from ..autograd.grad_mode import enable_grad
    from ..nn._spatial_sample import sample_composite

    with enable_grad():
        # fresh aliases: autograd stops at them, not at the inputs' own history
        x, grid = (t.view_as(t) if need else t for t, need in zip((x, grid), needs))
        out = sample_composite(x, grid, attrs["mode"], attrs["padding_mode"], attrs["align_corners"])
        wanted = [t for t, need in zip((x, grid), needs) if need]
        got = iter(autograd_grad(out, wanted, g, create_graph=create_graph, allow_unused=True))
    return tuple(next(got) if need else None for need in needs)


def _backward(ctx, g):
    x, grid = ctx.inputs
    needs = (ctx.needs_grad(0), ctx.needs_grad(1))
    if GradState.enabled:  # create_graph: the composite's gradients, which have a graph of their own
        return _composite_grads(g, x, grid, ctx.attrs, needs, create_graph=True)
    from .._dispatch import apply

    gx, ggrid = apply(GRID_SAMPLER_BACKWARD, g, x, grid, needs=needs, **ctx.attrs)
    return (gx if needs[0] else None), (ggrid if needs[1] else None)


def _backward_backward(ctx, ggx, ggrid):
    # The vector-Jacobian product of the composite's gradients (g, x and grid taken as independent inputs).
    from ..autograd import grad as autograd_grad
    from ..autograd.grad_mode import enable_grad

    g, x, grid = ctx.inputs
    attrs = {k: ctx.attrs[k] for k in ("mode", "padding_mode", "align_corners")}
    with enable_grad():
        leaves = [t.detach().requires_grad_() for t in (g, x, grid)]
        outs = _composite_grads(leaves[0], leaves[1], leaves[2], attrs, ctx.attrs["needs"], create_graph=True)
        pairs = [(o, gg) for o, gg in zip(outs, (ggx, ggrid)) if o is not None and gg is not None]
        if not pairs:
            return None, None, None
        got = autograd_grad([o for o, _ in pairs], leaves, [gg for _, gg in pairs], allow_unused=True,
                            create_graph=GradState.enabled)
    return tuple(gr if ctx.needs_grad(i) else None for i, gr in enumerate(got))


GRID_SAMPLER = defop("grid_sampler", _forward_kernel, _backward, Opaque("sparse tap product"), saves="inputs",
                     meta=True, grad_name="GridSampler2DBackward0")
GRID_SAMPLER_BACKWARD = defop("grid_sampler_backward", _backward_kernel, _backward_backward,
                              Opaque("sparse tap products"), nout=2, saves="inputs",
                              grad_name="GridSampler2DBackwardBackward0")
