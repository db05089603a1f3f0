"""Spatial transformer sampling: ``affine_grid`` and ``grid_sample`` (4-D input; bilinear or nearest; zeros, border
or reflection padding).

Samples are gathered from the flattened image with ``gather``, and the bilinear weights are built from the grid with
ordinary ops, so gradients reach both the input and the grid.

>>> import jitorch
>>> from jitorch.nn._spatial_sample import affine_grid, grid_sample
>>> theta = jitorch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
>>> x = jitorch.arange(4.0).reshape(1, 1, 2, 2)
>>> grid_sample(x, affine_grid(theta, (1, 1, 2, 2), align_corners=False), align_corners=False)
tensor([[[[0., 1.],
          [2., 3.]]]])
"""
from __future__ import annotations

import warnings

from .. import _creation
from .._movement import stack
from ..amp._cast_mode import autocast_policy

__all__ = ["affine_grid", "grid_sample"]

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
        warnings.warn(_ALIGN_WARNING, stacklevel=2)
    align_corners = bool(align_corners)
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    nd = len(size) - 2
    if nd not in (2, 3):
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
                                  f"respectively. Got size {list(size)}.")
    if theta.dim() != 3 or tuple(theta.shape[1:]) != (nd, nd + 1):
        raise ValueError(f"Expected a batch of {nd}D affine matrices of shape Nx{nd}x{nd + 1} for size "
                         f"{list(size)}. Got {list(theta.shape)}.")
    if min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {list(size)}")
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


def _source_index(coord, size, padding_mode, align_corners):
    coord = _unnormalize(coord, size, align_corners)
    if padding_mode == "border":
        coord = coord.clamp(0, size - 1)
    elif padding_mode == "reflection":
        coord = _reflect(coord, 0, 2 * (size - 1)) if align_corners else _reflect(coord, -1, 2 * size - 1)
        coord = coord.clamp(0, size - 1)
    return coord


def _tap(flat, iy, ix, height, width):
    """Values at integer positions ``(iy, ix)`` (``(N, Ho, Wo)`` each) of ``flat`` ``(N, C, H * W)``; 0 outside."""
    n, c = flat.shape[:2]
    valid = (ix >= 0) & (ix <= width - 1) & (iy >= 0) & (iy <= height - 1)
    index = (iy.clamp(0, height - 1) * width + ix.clamp(0, width - 1)).long()
    picked = flat.gather(2, index.reshape(n, 1, -1).expand(n, c, index[0].numel()))
    return picked.reshape((n, c) + tuple(ix.shape[1:])) * valid.unsqueeze(1).to(flat.dtype)


@autocast_policy(cpu="fp32", cuda="promote")
def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """Sample ``input`` ``(N, C, H, W)`` at the normalized ``(x, y)`` locations of ``grid`` ``(N, Ho, Wo, 2)``."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', but "
                         f"got: '{mode}'")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
                         f"'reflection', but got: '{padding_mode}'")
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, stacklevel=2)
    align_corners = bool(align_corners)
    if input.dim() != 4 or grid.dim() != 4 or grid.shape[-1] != 2 or grid.shape[0] != input.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected 4D input and grid with same batch size and grid of shape "
                           f"(N, H, W, 2), but got input with sizes {list(input.shape)} and grid with sizes "
                           f"{list(grid.shape)}")
    if mode == "bicubic":
        raise NotImplementedError("grid_sample: mode='bicubic' is not supported by jitorch yet")
    n, c, height, width = input.shape
    flat = input.reshape(n, c, height * width)
    ix = _source_index(grid[..., 0], width, padding_mode, align_corners)
    iy = _source_index(grid[..., 1], height, padding_mode, align_corners)
    if mode == "nearest":
        return _tap(flat, iy.detach().round(), ix.detach().round(), height, width)
    x0, y0 = ix.detach().floor(), iy.detach().floor()
    x1, y1 = x0 + 1, y0 + 1
    out = _tap(flat, y0, x0, height, width) * ((x1 - ix) * (y1 - iy)).unsqueeze(1)
    out = out + _tap(flat, y0, x1, height, width) * ((ix - x0) * (y1 - iy)).unsqueeze(1)
    out = out + _tap(flat, y1, x0, height, width) * ((x1 - ix) * (iy - y0)).unsqueeze(1)
    return out + _tap(flat, y1, x1, height, width) * ((ix - x0) * (iy - y0)).unsqueeze(1)
