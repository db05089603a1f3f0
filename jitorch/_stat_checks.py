"""Checks and warnings of the statistics functions, as ATen's: ``cov``'s observation weights, ``corrcoef``'s
clipping, and the degrees-of-freedom warning of ``var``/``std``/``cov``.

Split from ``_math_extra.py`` and ``_reduction.py`` (which call these) for size.
"""
from __future__ import annotations

import os
import sys
import warnings

from . import _dtype
from ._dispatch import TORCH_TYPE_NAMES


def check_weights(name, w, observations):
    """Raise torch's error for ``fweights``/``aweights`` of the wrong rank, dtype, length or sign."""
    if w.dim() > 1:
        raise RuntimeError(f"cov(): expected {name} to have one or fewer dimensions but got {name} with {w.dim()} "
                           "dimensions")
    integral = name == "fweights"
    if (w.dtype.is_floating_point or w.dtype.is_complex or w.dtype is _dtype.bool) if integral \
            else not w.dtype.is_floating_point:
        raise RuntimeError(f"cov(): expected {name} to have {'integral' if integral else 'floating point'} dtype but "
                           f"got {name} with {TORCH_TYPE_NAMES[w._data.dtype.name]} dtype")
    if w.numel() != observations:
        raise RuntimeError(f"cov(): expected {name} to have the same numel as there are observations in the input but "
                           f"got {w.numel()} != {observations}")
    if observations and bool(w.min() < 0):
        raise RuntimeError(f"cov(): {name} cannot be negative")


def clip_unit(r):
    """``r`` clipped to [-1, 1]; complex coefficients clip their real and imaginary parts apart, as torch."""
    if r.dtype.is_complex:
        from ._creation import complex as _complex

        return _complex(r.real.clamp(-1, 1), r.imag.clamp(-1, 1))
    return r.clamp(-1, 1)


def warn_at_caller(message):
    """A UserWarning pointing at the first frame outside jitorch (the wrappers in between vary by entry point)."""
    package, frame, level = os.path.dirname(__file__), sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level)
