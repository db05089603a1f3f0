"""log_softmax and its backward row of float16/bfloat16 CPU arrays as ATen's CPU kernels round them.

ATen computes both in float32, but its last-dim forward kernel keeps each row's sum of exponentials, and then its
log, in a buffer of the input's dtype: two roundings before ``x - max - log_sum`` is rounded once more (other dims
keep float32 buffers and round once). The backward, ``g - exp(y) * sum(g)``, reads the rounded output ``y`` and
rounds once. A float32 log_softmax rounded at the end is an ulp off on about a tenth of the values, which moves
typical sampling's cut and label-smoothed losses in half precision.

>>> import numpy as np, ml_dtypes
>>> x = np.array([[1.0, 2.0, 3.0]], dtype=ml_dtypes.bfloat16)
>>> log_softmax(x, 1).astype(np.float32)
array([[-2.40625, -1.40625, -0.40625]], dtype=float32)
"""
from __future__ import annotations

import numpy as np

from .. import _dtype

__all__ = ["HALF_DTYPES", "log_softmax", "log_softmax_backward"]

HALF_DTYPES = _dtype.HALF_NP


def log_softmax(x, dim):
    """ATen's CPU ``_log_softmax`` of a float16/bfloat16 NumPy array along ``dim``."""
    xf = x.astype(np.float32)
    shifted = xf - xf.max(axis=dim, keepdims=True)
    with np.errstate(divide="ignore"):  # a row of zeros' probabilities: log(0) = -inf, as ATen's
        if dim in (-1, x.ndim - 1):
            log_sum = np.log(np.exp(shifted).sum(axis=dim, keepdims=True).astype(x.dtype).astype(np.float32))
            log_sum = log_sum.astype(x.dtype).astype(np.float32)
        else:
            log_sum = np.log(np.exp(shifted).sum(axis=dim, keepdims=True))
    return (shifted - log_sum).astype(x.dtype)


def log_softmax_backward(g, y, dim):
    """``g - exp(y) * sum(g)`` of float16/bfloat16 arrays, in float32 and rounded once."""
    gf = g.astype(np.float32)
    return (gf - np.exp(y.astype(np.float32)) * gf.sum(axis=dim, keepdims=True)).astype(g.dtype)
