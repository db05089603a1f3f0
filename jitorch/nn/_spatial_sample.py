"""Spatial transformer sampling: ``affine_grid`` and ``grid_sample`` (4-D or 5-D input; bilinear (trilinear), nearest
or, in 2-D, bicubic; zeros, border or reflection padding).

float32/float64 inputs run as the ``grid_sampler`` row (``ops/grid_sampler.py``: sparse tap products). The composite
here serves the other dtypes and the row's higher derivatives: samples gathered from the flattened image with
``gather`` and the weights built from the grid with ordinary ops, so gradients reach both the input and the grid.

>>> import jitorch
>>> from jitorch.nn._spatial_sample import affine_grid, grid_sample
>>> theta = jitorch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
>>> x = jitorch.arange(4.0).reshape(1, 1, 2, 2)
>>> grid_sample(x, affine_grid(theta, (1, 1, 2, 2), align_corners=False), align_corners=False)
tensor([[[[0., 1.],
          [2., 3.]]]])
"""
from __future__ import annotations

import math

from .. import _creation
from .._dispatch import TORCH_TYPE_NAMES, apply
from .._movement import stack
from .._pointwise import where
from .._stat_checks import warn_at_caller
from ..amp._cast_mode import autocast_policy
from ..autograd.function import Function
from ..autograd.grad_mode import GradState
from ..autograd.graph import named
from ..ops import grid_sampler

__all__ = ["affine_grid", "affine_grid_generator", "grid_sample"]

_ALIGN_WARNING = ("Default grid_sample and affine_grid behavior has changed to align_corners=False since 1.3.0. "
                  "Please specify align_corners=True if the old behavior is desired. See the documentation of "
                  "grid_sample for details.")


def _grid_line(steps, align_corners, like):
    if steps <= 1:
        return _creation.zeros(steps, dtype=like.dtype, device=like.device)
    r = _creation.linspace(-1.0, 1.0, steps, dtype=like.dtype, device=like.device)
    return r if align_corners else r * ((steps - 1) / steps)


def affine_grid(theta, size, align_corners=None):
    """Sampling grid ``(N, H, W, 2)`` (or ``(N, D, H, W, 3)``) of the affine maps ``theta`` (``(N, 2, 3)`` or
    ``(N, 3, 4)``)."""
    if align_corners is None:
        warn_at_caller(_ALIGN_WARNING)
    align_corners = bool(align_corners)
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    nd = len(size) - 2
    if nd not in (2, 3):
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
                                  f"respectively. Got size {size}.")
    if theta.dim() != 3 or tuple(theta.shape[1:]) != (nd, nd + 1):
        raise ValueError(f"Expected a batch of {nd}D affine matrices of shape Nx{nd}x{nd + 1} for size "
                         f"{size}. Got {theta.shape}.")
    if min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    if align_corners and min(int(s) for s in size[2:]) == 1:
        warn_at_caller("Since version 1.3.0, affine_grid behavior has changed for unit-size grids when "
                       "align_corners=True. This is not an intended use case of affine_grid. See the "
                       "documentation of affine_grid for details.")
    return affine_grid_generator(theta, size, align_corners)


def affine_grid_generator(theta, size, align_corners):
    """ATen's ``affine_grid_generator`` (``torch.affine_grid_generator``): ``affine_grid`` without its Python-side
    checks and warnings; the base grid times ``theta`` transposed.

    >>> import jitorch
    >>> affine_grid_generator(jitorch.eye(2, 3)[None], [1, 1, 1, 2], False)
    tensor([[[[-0.5000,  0.0000],
              [ 0.5000,  0.0000]]]])
    """
    nd = len(size) - 2
    if nd not in (2, 3):
        raise RuntimeError("AffineGridGenerator needs 4d (spatial) or 5d (volumetric) inputs.")
    if theta.dim() != 3 or theta.shape[0] != size[0] or theta.shape[2] != nd + 1 or theta.shape[1] != nd:
        # torch's message comes from the bmm of the base grid with theta
        got = list(theta.shape[:1]) + list(theta.shape[2:3]) if theta.dim() == 3 else list(theta.shape)
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{int(size[0])}, "
                           f"{nd + 1}] but got: {got}. (affine_grid: theta of shape {list(theta.shape)} for an "
                           f"output of size {list(size)} must be ({int(size[0])}, {nd}, {nd + 1}))")
    spatial = [int(s) for s in size[2:]]
    lines = [_grid_line(s, align_corners, theta) for s in spatial]
    # Coordinates are (x, y[, z]): x runs along the last spatial dim.
    mesh = []
    for k, line in enumerate(reversed(lines)):
        shape = [1] * nd
        shape[nd - 1 - k] = -1
        mesh.append(line.reshape(shape).expand(spatial))
    mesh.append(_creation.ones(spatial, dtype=theta.dtype, device=theta.device))
    base = stack(mesh, dim=-1).reshape(1, -1, nd + 1)
    return (base @ theta.transpose(1, 2)).reshape([int(size[0])] + spatial + [nd])


def _unnormalize(coord, size, align_corners):
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _reflect(coord, twice_low, twice_high):
    """PyTorch's ``reflect_coordinates``: fold ``coord`` back into ``[low, high]`` by mirror reflections."""
    if twice_low == twice_high:
        return coord * 0
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    dist = (coord - low).abs()
    flips = (dist / span).floor().detach()
    extra = dist - flips * span
    return (extra + low).where(flips.remainder(2) == 0, span - extra + low)


def _pad_coord(coord, size, padding_mode, align_corners):
    """PyTorch's ``compute_coordinates``: clip or reflect a pixel coordinate into the image (``zeros``: as is)."""
    if padding_mode == "reflection":
        coord = _reflect(coord, 0, 2 * (size - 1)) if align_corners else _reflect(coord, -1, 2 * size - 1)
    if padding_mode in ("border", "reflection"):
        coord = _clip(coord, size)
    return coord


def _clip(coord, size):
    # ATen's clip_coordinates_set_grad passes no gradient at the edges themselves (clamp's would pass it).
    inside = (coord > 0) & (coord < size - 1)
    return where(inside, coord, coord.detach().clamp(0, size - 1))


def _source_index(coord, size, padding_mode, align_corners):
    return _pad_coord(_unnormalize(coord, size, align_corners), size, padding_mode, align_corners)


def _tap(flat, coords, sizes):
    """Values at integer positions ``coords`` (one ``(N, *out)`` tensor per spatial dim, outermost first) of
    ``flat`` ``(N, C, prod(sizes))``; 0 outside the image (NaN positions included, as ATen's bounds checks)."""
    n, c = flat.shape[:2]
    valid = None
    index = None
    for coord, size in zip(coords, sizes):
        inside = (coord >= 0) & (coord <= size - 1)
        valid = inside if valid is None else valid & inside
    for coord, size in zip(coords, sizes):
        safe = where(valid, coord, 0).long()
        index = safe if index is None else index * size + safe
    out_shape = tuple(coords[0].shape[1:])
    count = math.prod(out_shape)
    picked = flat.gather(2, index.reshape(n, 1, count).expand(n, c, count))
    # where, not a product with the mask: an outside tap's weight may be NaN (a NaN or infinite grid point), and
    # ATen adds nothing for it, to the output or to the input's gradient
    return where(valid.unsqueeze(1), picked.reshape((n, c) + out_shape), 0.0)


def _cubic_weights(t, a=-0.75):
    near = lambda v: ((a + 2) * v - (a + 3)) * v * v + 1  # noqa: E731 - |v| <= 1
    far = lambda v: ((a * v - 5 * a) * v + 8 * a) * v - 4 * a  # noqa: E731 - 1 < |v| < 2
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _bicubic(input, flat, grid, padding_mode, align_corners):
    height, width = input.shape[2:]
    ix = _unnormalize(grid[..., 0], width, align_corners)
    iy = _unnormalize(grid[..., 1], height, align_corners)
    x0, y0 = ix.detach().floor(), iy.detach().floor()
    wx, wy = _cubic_weights(ix - x0), _cubic_weights(iy - y0)
    out = None
    for j in range(4):
        # Each tap's integer position is padded on its own (ATen's get_value_bounded): no gradient through it.
        ty = _pad_coord(y0 + (j - 1), height, padding_mode, align_corners)
        row = None
        for i in range(4):
            tx = _pad_coord(x0 + (i - 1), width, padding_mode, align_corners)
            term = _tap(flat, [ty, tx], [height, width]) * wx[i].unsqueeze(1)
            row = term if row is None else row + term
        out = row * wy[j].unsqueeze(1) if out is None else out + row * wy[j].unsqueeze(1)
    return out


class _NearestGridGrad(Function):
    """Nearest sampling's output with the grid as an input of zero gradient: ATen's grid sampler backward gives the
    grid zeros in nearest mode, so ``grid.grad`` is a tensor (not ``None``) after ``backward``."""

    @staticmethod
    def forward(ctx, out, grid):
        ctx.grid_meta = (grid.shape, grid.dtype, grid.device)
        return out

    @staticmethod
    def backward(ctx, grad):
        shape, dtype, device = ctx.grid_meta
        return grad, _creation.zeros(shape, dtype=dtype, device=device)


def _check_grid_sampler(input, grid, nd):
    """ATen's ``check_grid_sampler_common`` (and the kernels' dtype checks), in its order and words."""
    shapes = f"input with sizes {list(input.shape)} and grid with sizes {list(grid.shape)}"
    if grid.dim() < 1 or grid.shape[0] != input.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, but got {shapes}")
    if grid.shape[-1] != nd:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {nd} in last dimension, but got grid with "
                           f"sizes {list(grid.shape)}")
    for i in range(2, input.dim()):
        if input.shape[i] == 0:
            raise RuntimeError(f"grid_sampler(): expected input to have non-empty spatial dimensions, but input has "
                               f"sizes {list(input.shape)} with dimension {i} being empty")
    if nd not in (2, 3) or grid.dim() != input.dim():
        want = 4 if input.dim() == 4 else 5  # ATen's 3-d sampler takes every input that is not 4-D
        raise RuntimeError(f"grid_sampler(): expected {want}D input and grid with same number of dimensions, but "
                           f"got {shapes}")
    if not input.is_floating_point():
        kernel = "grid_sampler_2d_cpu_kernel_impl" if nd == 2 else "grid_sampler3d_cpu"
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{_scalar_name(input.dtype)}'")
    if grid.dtype != input.dtype:
        raise RuntimeError(f"expected scalar type {_scalar_name(input.dtype)} but found {_scalar_name(grid.dtype)} "
                           f"(grid_sample: input is {input.dtype} and grid is {grid.dtype}; cast the grid with "
                           f"grid.to(input.dtype))")


def _scalar_name(dtype):
    """ATen's ScalarType name of a dtype (``Float``, ``Double``, ``Long``, ...)."""
    name = str(dtype).rsplit(".", 1)[-1]
    return TORCH_TYPE_NAMES.get(name, name)


@autocast_policy(cpu="fp32", cuda="promote")
def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """Sample ``input`` ``(N, C, H, W)`` (or ``(N, C, D, H, W)``) at the normalized ``(x, y[, z])`` locations of
    ``grid`` ``(N, Ho, Wo, 2)`` (or ``(N, Do, Ho, Wo, 3)``)."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', but "
                         f"got: '{mode}'")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
                         f"'reflection', but got: '{padding_mode}'")
    if align_corners is None:
        warn_at_caller(_ALIGN_WARNING)
    align_corners = bool(align_corners)
    nd = input.dim() - 2
    _check_grid_sampler(input, grid, nd)
    if mode == "bicubic" and nd != 2:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    if str(input.dtype).rsplit(".", 1)[-1] in grid_sampler.DTYPES and input.numel() and grid.numel():
        # one row over sparse tap products (ops/grid_sampler.py); its create_graph backward differentiates the
        # composite below
        out = apply(grid_sampler.GRID_SAMPLER, input, grid, mode=mode, padding_mode=padding_mode,
                    align_corners=align_corners)
        return named(out, "GridSampler3DBackward0") if nd == 3 else out  # (the row's node is named for 2-D)
    return sample_composite(input, grid, mode, padding_mode, align_corners)


def sample_composite(input, grid, mode, padding_mode, align_corners):
    """``grid_sample`` (checked arguments) as a composite of gathers and ordinary ops: every mode and dtype, and
    the formula the ``grid_sampler`` row's higher derivatives differentiate.

    >>> import jitorch
    >>> sample_composite(jitorch.ones(1, 1, 2, 2), jitorch.zeros(1, 1, 1, 2), "bilinear", "zeros", True)
    tensor([[[[1.]]]])
    """
    nd = input.dim() - 2
    n, c = input.shape[:2]
    sizes = list(input.shape[2:])
    flat = input.reshape(n, c, math.prod(sizes))
    if mode == "bicubic":
        return _bicubic(input, flat, grid, padding_mode, align_corners)
    # grid's last dim lists (x, y[, z]): x indexes the innermost spatial dim.
    coords = [_source_index(grid[..., nd - 1 - k], sizes[k], padding_mode, align_corners) for k in range(nd)]
    if mode == "nearest":
        out = _tap(flat, [t.detach().round() for t in coords], sizes)
        return _NearestGridGrad.apply(out, grid) if GradState.enabled and grid.requires_grad else out
    lows = [t.detach().floor() for t in coords]
    out = None
    for corner in range(1 << nd):
        taps, weight = [], None
        for k in range(nd):
            high = (corner >> (nd - 1 - k)) & 1
            taps.append(lows[k] + high)
            w = coords[k] - lows[k] if high else lows[k] + 1 - coords[k]
            weight = w if weight is None else weight * w
        term = _tap(flat, taps, sizes) * weight.unsqueeze(1)
        out = term if out is None else out + term
    return out
