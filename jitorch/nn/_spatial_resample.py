"""Resampling: ``interpolate``/``upsample*`` (nearest, nearest-exact, (bi/tri)linear, bicubic, area)
and ``pixel_shuffle``/``pixel_unshuffle``.

Interpolation is separable: along each spatial dim the source taps and weights are computed exactly as PyTorch's CPU
kernels do (in the input's float type) and applied by one row per dim (``ops/resample_linear.py``: a BLAS product
with the weights' matrix for short dims of finite values, gathers otherwise), so an inf or NaN reaches only the
outputs ATen lets it reach. The nearest modes copy, through one row and its gradient row
(``ops/resample_nearest.py``), so inf/NaN stay where they are and the sums are ATen's.

>>> import jitorch
>>> from jitorch.nn._spatial_resample import interpolate
>>> interpolate(jitorch.tensor([[[1.0, 3.0]]]), scale_factor=2, mode="linear")
tensor([[[1.0000, 1.5000, 2.5000, 3.0000]]])
"""
from __future__ import annotations

import math
import operator

from .._stat_checks import warn_at_caller


from .. import _dtype
from .._dispatch import TORCH_TYPE_NAMES, apply
from .._memory_format import channels_last_3d, contiguous_format, dim_order, suggested_format
from ..amp._cast_mode import autocast_policy
from ..ops.movement import CONTIGUOUS, PERMUTE
from ..ops.resample_linear import UPSAMPLE_LINEAR
from ..ops.resample_nearest import UPSAMPLE_NEAREST
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


# The kernel whose dtype dispatch refuses an input ATen has no resampling kernel for (integer other than uint8's
# modes, bool, complex), per mode, as its message names it.
_KERNELS = {"nearest": "compute_indices_weights_nearest", "nearest-exact": "compute_indices_weights_nearest",
            "linear": "compute_indices_weights_linear", "trilinear": "compute_indices_weights_linear",
            "bilinear": "upsample_bilinear2d_channels_last", "bicubic": "compute_indices_weights_cubic"}


# On no autocast list (CPU or CUDA): a float32 input stays float32, its resampling matmuls are not cast.
@autocast_policy(cpu="unlisted", cuda="unlisted")
def _check_dtype(input, mode, nd, antialias):
    """ATen's resampling kernels exist for real floating types, and uint8 for the nearest modes, bilinear and bicubic:
    label maps are resized as floats (or uint8), complex signals as their real and imaginary parts."""
    dt = input.dtype
    if dt.is_floating_point or dt == _dtype.uint8 and mode in ("nearest", "nearest-exact", "bilinear", "bicubic"):
        return
    if antialias:
        kernel = "compute_index_ranges_weights"
    elif mode in ("nearest", "nearest-exact") and nd == 2:
        kernel = "upsample_nearest2d_channels_last"
    else:
        kernel = _KERNELS[mode]
    hint = ("torch.view_as_real, resize, torch.view_as_complex" if dt.is_complex else
            "F.interpolate(x.float(), ...).to(x.dtype)")
    raise NotImplementedError(f'"{kernel}" not implemented for \'{TORCH_TYPE_NAMES[dt.name]}\' (interpolate of a '
                              f'{dt} input of shape {list(input.shape)} in mode {mode!r}: resize it as a float '
                              f'tensor, e.g. {hint})')


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
    if mode == "area":  # (an adaptive average pool, with its own refusals; an empty output is its answer)
        return (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d)[nd - 1](input, sizes)
    if any(s <= 0 for s in sizes):
        axes = "DHW"[3 - nd:]
        given = ", ".join(f"{a}: {s}" for a, s in zip(axes, input.shape[2:]))
        wanted = ", ".join(f"{a}: {s}" for a, s in zip(axes, sizes))
        joint = " and" if nd == 1 else ""  # (ATen's 1-D check words it so)
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input ({given}){joint} output "
                           f"({wanted})")
    _check_dtype(input, mode, nd, antialias)
    if antialias or input.dtype == _dtype.uint8 and mode in ("bilinear", "bicubic"):
        out = filtered_resample(input, sizes, scales, align_corners, mode == "bicubic", antialias)
        return layout_as(out, input)
    if mode in ("nearest", "nearest-exact"):
        scales = tuple(scales) if scales is not None else (None,) * nd
        out = apply(UPSAMPLE_NEAREST, input, sizes=tuple(sizes), scales=scales, exact=mode == "nearest-exact")
        return layout_as(out, input)
    # ATen resamples half types in float32 (its opmath type) and rounds once: dim after dim in bfloat16 would
    # round every pass, and the gradients' sums too.
    low = input.dtype in (_dtype.bfloat16, _dtype.float16)
    out = input.float() if low else input
    row = UPSAMPLE_LINEAR[mode]
    for i in range(nd):
        dim = 2 + i
        # A dim that keeps its size is copied, whatever the scale, by ATen's (bi/tri)linear kernels (as x * 1 + x * 0,
        # so an inf there is NaN: the row does the same); its bicubic kernel applies the scale (1.1 maps 7 -> 7).
        # ATen's half-type bicubic kernel keeps its coefficients in the input's type.
        round_to = input.dtype.name if low and mode == "bicubic" else None
        out = apply(row, out, dim=dim, size=sizes[i], scale=scales[i] if scales is not None else None,
                    align_corners=bool(align_corners), round_to=round_to, cubic=mode == "bicubic")
    if low:
        out = out.to(input.dtype)
    return layout_as(out, input)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated alias of ``interpolate``."""
    warn_at_caller("`nn.functional.upsample` is deprecated. Use `nn.functional.interpolate` instead.")
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated: ``interpolate(..., mode='nearest')``."""
    warn_at_caller("`nn.functional.upsample_nearest` is deprecated. Use `nn.functional.interpolate` instead.")
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated: ``interpolate(..., mode='bilinear', align_corners=True)``."""
    warn_at_caller("`nn.functional.upsample_bilinear` is deprecated. Use `nn.functional.interpolate` instead.")
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
    perm = tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2)
    return _shuffled(x, perm, (1,) * (n + 1) + (2, 2), tuple(lead) + (c // (r * r), h * r, w * r), input)


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
    perm = tuple(range(n)) + (n, n + 2, n + 4, n + 1, n + 3)
    return _shuffled(x, perm, (1,) * n + (3, 1, 1), tuple(lead) + (c * r * r, h // r, w // r), input)


def _shuffled(x, perm, merged, shape, input, op="pixel"):
    """``x.permute(perm)`` (``x`` a view of ``input``; ``merged[i]`` of its permuted dims, in order, make dim ``i`` of
    ``shape``) as a new tensor of ``shape`` in ``input``'s suggested memory format, as ATen's pixel and channel
    shuffles write theirs, copied once: the permuted dims are made contiguous in the order that memory format gives
    the result's dims, then viewed back. A reshape alone could return a view of an expanded input."""
    fmt = suggested_format(input)
    if fmt is contiguous_format:
        return apply(CONTIGUOUS, apply(PERMUTE, x, dims=perm)).view(shape)
    if fmt is channels_last_3d and op == "pixel":
        raise RuntimeError("Unsupported memory format. Supports only ChannelsLast, Contiguous")
    physical = dim_order(fmt, len(shape))
    starts = [sum(merged[:i]) for i in range(len(merged))]
    order = tuple(perm[d] for i in physical for d in range(starts[i], starts[i] + merged[i]))
    # Merged in memory order, then permuted back: PyTorch's strides for every dim of the result, size-1 ones included.
    out = apply(CONTIGUOUS, apply(PERMUTE, x, dims=order)).view(tuple(shape[i] for i in physical))
    return apply(PERMUTE, out, dims=tuple(sorted(range(len(physical)), key=physical.__getitem__)))


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
    x = input.reshape([n, g, c // g] + rest)
    perm = (0, 2, 1) + tuple(range(3, x.dim()))
    return _shuffled(x, perm, (1, 2) + (1,) * len(rest), tuple([n, c] + rest), input, op="channel")


native_channel_shuffle = channel_shuffle
