"""The separable filter path of ``interpolate``: ``antialias=True`` and uint8 bilinear/bicubic, as ATen's CPU kernels.

Each output pixel averages a window of source pixels under the mode's filter (triangle or Keys cubic), widened by the
downscaling factor when antialiasing, with weights normalized to sum to 1. Float inputs apply the weights as a dense
resampling matrix per dim (so the gradient is a matmul). uint8 inputs follow ATen's fixed-point kernels: weights
rounded to int16 at a per-dim precision, each pass (width first, then height) rounded and clamped to [0, 255], so
results match PyTorch bit for bit rather than within one unit.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _creation, _dtype


def _scale(in_size, out_size, align_corners, scale):
    """ATen's ``area_pixel_compute_scale``."""
    if align_corners:
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    if scale is not None and scale > 0:
        return 1.0 / scale
    return in_size / out_size


def _triangle(x):
    x = abs(x)
    return 1.0 - x if x < 1.0 else 0.0


def _cubic(a):
    def filter_fn(x):
        x = abs(x)
        if x < 1.0:
            return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        if x < 2.0:
            return (((x - 5.0) * x + 8.0) * x - 4.0) * a
        return 0.0
    return filter_fn


def filter_matrix(in_size, out_size, scale, align_corners, cubic, antialias):
    """(out, in) float64 weights of ATen's ``_compute_weights_aa``: each row a normalized filter window."""
    if cubic and not antialias:
        # ATen's uint8 kernel takes the float kernel's taps here (a = -0.75, clamped edge indices), not a window.
        from ..ops.resample_linear import taps

        m = np.zeros((out_size, in_size), dtype=np.float64)
        for index, weight in taps("float64", in_size, out_size, scale, align_corners, cubic=True):
            np.add.at(m, (np.arange(out_size), index), weight)
        return m
    s = _scale(in_size, out_size, align_corners, scale)
    taps = 4 if cubic else 2
    filter_fn = _cubic(-0.5) if cubic else _triangle  # Keys' a = -0.5 (PIL's), as ATen's antialiasing
    support = taps * 0.5 * s if antialias and s >= 1.0 else taps * 0.5
    widest = int(math.ceil(support)) * 2 + 1
    delta = 0.5 if align_corners and not antialias else 0.0
    inv = 1.0 / s if antialias and s >= 1.0 else 1.0
    m = np.zeros((out_size, in_size), dtype=np.float64)
    for i in range(out_size):
        center = s * (i + 0.5 - delta)
        lo = max(int(center - support + 0.5 + delta), 0)  # int(): C++'s truncating cast
        size = min(max(min(int(center + support + 0.5 + delta), in_size) - lo, 0), widest)
        w = np.array([filter_fn((j + lo - center + 0.5 - delta) * inv) for j in range(size)])
        total = w.sum()
        m[i, lo:lo + size] = w / total if total != 0.0 else w
    return m


def _int16_weights(m):
    """ATen's fixed-point weights: the largest precision (at most 22 bits) at which the biggest weight fits int16."""
    biggest = float(m.max()) if m.size else 0.0
    precision = 0
    while precision < 22 and int(0.5 + biggest * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    scaled = m * (1 << precision)
    return np.trunc(scaled + np.where(scaled < 0, -0.5, 0.5)), precision


def _apply(x, dim, m):
    return (x.movedim(dim, -1) @ m.mT).movedim(-1, dim)


def filtered_resample(input, sizes, scales, align_corners, cubic, antialias):
    """Resample the two spatial dims of a 4-D ``input`` through the filter matrices, width first."""
    out = input.to(_dtype.float64) if input.dtype == _dtype.uint8 else input
    for dim in (3, 2):
        i = dim - 2
        if sizes[i] == input.shape[dim]:  # ATen's separable kernels skip a dim that keeps its size, whatever the scale
            continue
        scale = scales[i] if scales is not None else None
        m = filter_matrix(input.shape[dim], sizes[i], scale, align_corners, cubic, antialias)
        if input.dtype != _dtype.uint8:
            out = _apply(out, dim, _creation.tensor(m, dtype=out.dtype, device=out.device))
            continue
        weights, precision = _int16_weights(m)
        # float64 holds these integer sums exactly; adding half then flooring is ATen's rounding right shift.
        total = _apply(out, dim, _creation.tensor(weights, dtype=_dtype.float64, device=out.device))
        out = ((total + (1 << (precision - 1))) / (1 << precision)).floor().clamp(0, 255)
    return out.to(_dtype.uint8) if input.dtype == _dtype.uint8 else out
