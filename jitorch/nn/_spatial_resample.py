"""Resampling: ``interpolate``/``upsample*`` (nearest, nearest-exact, (bi/tri)linear, bicubic, area)
and ``pixel_shuffle``/``pixel_unshuffle``.

Interpolation is separable: along each spatial dim the source taps and weights are computed exactly as PyTorch's CPU
kernels do (in the input's float type) and applied as one matmul with a resampling matrix (or, for very large dims,
as ``index_select`` gathers), so the gradient is a matmul too. The nearest modes copy instead, through one row and
its gradient row (``ops/resample_nearest.py``), so inf/NaN stay where they are and the sums are ATen's.

>>> import jitorch
>>> from jitorch.nn._spatial_resample import interpolate
>>> interpolate(jitorch.tensor([[[1.0, 3.0]]]), scale_factor=2, mode="linear")
tensor([[[1.0000, 1.5000, 2.5000, 3.0000]]])
"""
from __future__ import annotations

import math
import operator
import warnings

import numpy as np

from .. import _creation, _dtype
from .._dispatch import apply
from ..amp._cast_mode import autocast_policy
from ..ops.resample_nearest import UPSAMPLE_NEAREST, scale_ratio as _ratio
from ._spatial_args import layout_as
from ._spatial_resample_aa import filtered_resample
from ._spatial_pool import adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d

__all__ = ["interpolate", "upsample", "upsample_nearest", "upsample_bilinear", "pixel_shuffle", "pixel_unshuffle",
           "channel_shuffle", "native_channel_shuffle"]

_LINEAR_DIMS = {"linear": 3, "bilinear": 4, "trilinear": 5, "bicubic": 4}
_ALL_MODES = "nearest | linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact"


def _output_sizes(input, size, scale_factor, mode, recompute_scale_factor):
    """(output sizes, scales handed to the kernels or None), following ``F.interpolate``'s argument rules."""
    dim = input.dim() - 2
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError(
                    "Input and output must have the same number of spatial dimensions, but got input with spatial "
                    f"dimensions of {list(input.shape[2:])} and output size of {size}. Please provide input tensor in "
                    "(N, C, d1, d2, ...,dK) format and output size in (o1, o2, ...,oK) format.")
            try:  # ints, NumPy integers and 0-d integer tensors (sizes computed from another tensor's shape)
                sizes = [operator.index(s) for s in size]
            except TypeError:
                raise TypeError("expected size to be one of int or Tuple[int] or Tuple[int, int] or "
                                f"Tuple[int, int, int], but got size with types {[type(x) for x in size]}") from None
        else:
            sizes = [operator.index(size)] * dim
        if recompute_scale_factor:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
        return sizes, None
    if scale_factor is None:
        raise ValueError("either size or scale_factor should be defined")
    if isinstance(scale_factor, (list, tuple)):
        if len(scale_factor) != dim:
            raise ValueError(
                "Input and scale_factor must have the same number of spatial dimensions, but got input with spatial "
                f"dimensions of {list(input.shape[2:])} and scale_factor of shape {scale_factor}. Please provide "
                "input tensor in (N, C, d1, d2, ...,dK) format and scale_factor in (s1, s2, ...,sK) format.")
        scales = [float(s) for s in scale_factor]
    else:
        scales = [float(scale_factor)] * dim
    if recompute_scale_factor or mode == "area":
        return [int(s * f) for s, f in zip(input.shape[2:], scales)], None
    return [math.floor(float(s) * f) for s, f in zip(input.shape[2:], scales)], scales


# A dense (out, in) resampling matrix turns one dim's resampling into one BLAS matmul whose gradient is a matmul
# too; above this many entries the taps are gathered with ``index_select`` instead (memory stays linear).
_DENSE_LIMIT = 1 << 22


def _resample_dim(x, dim, taps):
    """Resample ``x`` along ``dim``: output ``o`` is ``sum_k weight_k[o] * x[index_k[o]]`` over the ``taps``."""
    in_size = x.shape[dim]
    out_size = len(taps[0][0])
    if out_size * in_size <= _DENSE_LIMIT:
        m = np.zeros((out_size, in_size), dtype=np.float64)
        rows = np.arange(out_size)
        for index, weight in taps:
            np.add.at(m, (rows, index), weight)
        m = _creation.tensor(m, dtype=x.dtype, device=x.device)
        if dim == x.dim() - 1:
            return x @ m.mT
        return (x.movedim(dim, -1) @ m.mT).movedim(-1, dim)
    shape = [1] * x.dim()
    shape[dim] = -1
    out = None
    for index, weight in taps:
        picked = x.index_select(dim, _creation.tensor(np.asarray(index, dtype=np.int64), device=x.device))
        if weight is not None:
            picked = picked * _creation.tensor(np.asarray(weight), dtype=x.dtype, device=x.device).reshape(shape)
        out = picked if out is None else out + picked
    return out


def _source_coords(ftype, in_size, out_size, scale, align_corners, cubic):
    o = np.arange(out_size).astype(ftype)
    if align_corners:
        ratio = ftype(in_size - 1) / ftype(out_size - 1) if out_size > 1 else ftype(0)
        return ratio * o
    ratio = _ratio(ftype, in_size, out_size, scale)
    src = ratio * (o + ftype(0.5)) - ftype(0.5)
    return src if cubic else np.maximum(src, ftype(0))


def _linear_taps(ftype, in_size, out_size, scale, align_corners):
    src = _source_coords(ftype, in_size, out_size, scale, align_corners, cubic=False)
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    lam = np.clip(src - i0.astype(ftype), 0, 1).astype(ftype)
    return [(i0, 1 - lam), (i0 + (i0 < in_size - 1), lam)]


def _cubic_coefficients(t, a=-0.75):
    def near(v):  # |v| <= 1
        return ((a + 2) * v - (a + 3)) * v * v + 1

    def far(v):  # 1 < |v| < 2
        return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _cubic_taps(ftype, in_size, out_size, scale, align_corners):
    src = _source_coords(ftype, in_size, out_size, scale, align_corners, cubic=True)
    base = np.floor(src).astype(np.int64)
    t = (src - base.astype(ftype)).astype(ftype)
    return [(np.clip(base - 1 + k, 0, in_size - 1), c.astype(ftype)) for k, c in enumerate(_cubic_coefficients(t))]


# On no autocast list (CPU or CUDA): a float32 input stays float32, its resampling matmuls are not cast.
@autocast_policy(cpu="unlisted", cuda="unlisted")
def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None,
                antialias=False):
    """Resize the spatial dims of ``(N, C, *spatial)`` to ``size`` or by ``scale_factor``, as ``F.interpolate``."""
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: linear | bilinear "
                             "| bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    nd = input.dim() - 2
    if input.dim() not in (3, 4, 5) or mode not in ("nearest", "nearest-exact", "area", *_LINEAR_DIMS):
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.dim()}D) for "
                                  f"the modes: {_ALL_MODES} (got {mode})")
    if mode in _LINEAR_DIMS and input.dim() != _LINEAR_DIMS[mode]:
        need = _LINEAR_DIMS[mode]
        raise NotImplementedError(f"Got {input.dim()}D input, but {mode} mode needs {need}D input")
    sizes, scales = _output_sizes(input, size, scale_factor, mode, recompute_scale_factor)
    if antialias:
        if mode not in ("bilinear", "bicubic") or input.dim() != 4:
            raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and requires "
                             "a 4-D tensor as input")
    if input.dtype.is_floating_point is False and mode in _LINEAR_DIMS and (
            input.dtype != _dtype.uint8 or mode not in ("bilinear", "bicubic")):
        raise NotImplementedError(f"interpolate: mode {mode!r} is not implemented for {input.dtype} input (ATen "
                                  f"has integer kernels only for uint8 bilinear and bicubic)")
    if antialias or input.dtype == _dtype.uint8 and mode in ("bilinear", "bicubic"):
        out = filtered_resample(input, sizes, scales, align_corners, mode == "bicubic", antialias)
        return layout_as(out, input)
    if mode == "area":
        return (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d)[nd - 1](input, sizes)
    if any(s <= 0 for s in sizes):
        axes = "DHW"[3 - nd:]
        given = ", ".join(f"{a}: {s}" for a, s in zip(axes, input.shape[2:]))
        wanted = ", ".join(f"{a}: {s}" for a, s in zip(axes, sizes))
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input ({given}) output "
                           f"({wanted})")
    if mode in ("nearest", "nearest-exact"):
        scales = tuple(scales) if scales is not None else (None,) * nd
        out = apply(UPSAMPLE_NEAREST, input, sizes=tuple(sizes), scales=scales, exact=mode == "nearest-exact")
        return layout_as(out, input)
    # ATen resamples half types in float32 (its opmath type) and rounds once: dim after dim in bfloat16 would
    # round every pass, and the gradients' sums too.
    low = input.dtype in (_dtype.bfloat16, _dtype.float16)
    out = input.float() if low else input
    for i in range(nd):
        scale = scales[i] if scales is not None else None
        dim = 2 + i
        ftype = np.float64 if input.dtype.name == "float64" else np.float32  # PyTorch's opmath type
        # A dim that keeps its size is copied, whatever the scale, by ATen's (bi/tri)linear kernels; its bicubic
        # kernel applies the scale (1.1 maps 7 -> 7 with shifted sources).
        if mode == "bicubic":
            taps = _cubic_taps(ftype, out.shape[dim], sizes[i], scale, align_corners)
            if low:  # ATen's half-type bicubic kernel keeps its coefficients in the input's type
                taps = [(index, weight.astype(input.dtype.np).astype(ftype)) for index, weight in taps]
        elif sizes[i] == out.shape[dim]:
            continue
        else:
            taps = _linear_taps(ftype, out.shape[dim], sizes[i], scale, align_corners)
        out = _resample_dim(out, dim, taps)
    if low:
        out = out.to(input.dtype)
    elif out is input:  # every dim kept its size: still a new tensor, as ATen's
        out = input.clone()
    return layout_as(out, input)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated alias of ``interpolate``."""
    warnings.warn("nn.functional.upsample is deprecated. Use nn.functional.interpolate instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated: ``interpolate(..., mode='nearest')``."""
    warnings.warn("nn.functional.upsample_nearest is deprecated. Use nn.functional.interpolate instead.",
                  stacklevel=2)
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated: ``interpolate(..., mode='bilinear', align_corners=True)``."""
    warnings.warn("nn.functional.upsample_bilinear is deprecated. Use nn.functional.interpolate instead.",
                  stacklevel=2)
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def pixel_shuffle(input, upscale_factor):
    """``(*, C * r^2, H, W) -> (*, C, H * r, W * r)``."""
    if input.dim() < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.dim()} dimension(s)")
    r = int(upscale_factor)
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                           f"upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
    n = len(lead)
    x = input.reshape(tuple(lead) + (c // (r * r), r, r, h, w))
    x = x.permute(tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2))
    return x.reshape(tuple(lead) + (c // (r * r), h * r, w * r))


def pixel_unshuffle(input, downscale_factor):
    """``(*, C, H * r, W * r) -> (*, C * r^2, H, W)``, the inverse of ``pixel_shuffle``."""
    if input.dim() < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.dim()} dimension(s)")
    r = int(downscale_factor)
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    *lead, c, h, w = input.shape
    if h % r:
        raise RuntimeError(f"pixel_unshuffle expects height to be divisible by downscale_factor, but "
                           f"input.size(-2)={h} is not divisible by {r}")
    if w % r:
        raise RuntimeError(f"pixel_unshuffle expects width to be divisible by downscale_factor, but "
                           f"input.size(-1)={w} is not divisible by {r}")
    n = len(lead)
    x = input.reshape(tuple(lead) + (c, h // r, r, w // r, r))
    x = x.permute(tuple(range(n)) + (n, n + 2, n + 4, n + 1, n + 3))
    return x.reshape(tuple(lead) + (c * r * r, h // r, w // r))


def channel_shuffle(input, groups):
    """``(N, g * k, *) -> (N, k * g, *)``: interleave the channels of the ``g`` groups (ShuffleNet)."""
    if input.dim() < 3:
        raise RuntimeError(f"channel_shuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.dim()} dimension(s)")
    g = int(groups)
    if g <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of groups:{g}")
    n, c, *rest = input.shape
    if c % g:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels and {g} groups.")
    x = input.reshape([n, g, c // g] + rest).transpose(1, 2)
    return x.reshape([n, c] + rest)


native_channel_shuffle = channel_shuffle
