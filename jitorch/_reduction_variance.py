"""Variance and standard deviation: ``var``, ``std``, ``var_mean``, ``std_mean`` (``correction``, the legacy
``unbiased``, half inputs computed in float32 and rounded once, torch's node names); re-exported by ``_reduction.py``.

>>> import jitorch
>>> x = jitorch.tensor([1.0, 2.0, 4.0])
>>> x.var(), x.std(correction=0), jitorch.var_mean(x)[1]
(tensor(2.3333), tensor(1.2472), tensor(2.3333))
"""
from __future__ import annotations

import numpy as np

from . import _dtype
from ._dispatch import apply, is_compiling
from ._dispatch_modes import MODES
from ._reduction import _HALVES, _REAL, _dims, mean, sum
from ._stat_checks import warn_at_caller
from .autograd.graph import named
from .ops import reduction as R
from .ops.std_row import STD


def _correction(unbiased, correction):
    if correction is not None:
        return correction
    return 1 if unbiased is None or unbiased else 0


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """Variance with ``correction`` (default 1, Bessel's); ``unbiased=False`` means correction 0."""
    return _var_result(input, dim, unbiased, keepdim, correction, "var")


def _var_result(input, dim, unbiased, keepdim, correction, name):
    v = _var(input, dim, unbiased, keepdim, correction, name)
    if name == "var_mean":  # torch's one node for both results is named after the pair
        v = named(v, "VarMeanBackward0")
    return v.to(input.dtype) if input.dtype in _HALVES else v


def _var(input, dim, unbiased, keepdim, correction, name, std=False):
    """The variance (``std``: its square root), in float32 for half inputs: PyTorch computes in float32 and rounds the
    result once."""
    if isinstance(dim, bool):  # var(x, False): the legacy positional ``unbiased``
        dim, unbiased = None, dim
    dtype = input.dtype
    if dtype.category < _dtype.FLOAT:
        raise RuntimeError("std and var only support floating point and complex dtypes")
    c = _correction(unbiased, correction)
    nd = input._data.ndim
    # (one dim in range, the common call, wrapped here: `_dims` is a tenth of a small var)
    dims = (dim + nd if dim < 0 else dim,) if type(dim) is int and -nd <= dim < nd else _dims(input, dim, "var")
    n = 1
    for d in dims:
        n *= input._data.shape[d]
    if dtype in _HALVES:
        input = input.float()
    # PyTorch clamps the degrees of freedom at 0: the result is then inf or nan, not an error, but it warns.
    if n - c <= 0:
        warn_at_caller(f"{name}(): degrees of freedom is <= 0. Correction should be strictly less than the reduction "
                       "factor (input numel divided by output numel).")
    if type(input._data) is np.ndarray and input._data.dtype in _REAL and (not MODES or not is_compiling()):
        return apply(STD if std else R.VAR, input, dims=dims, keepdim=keepdim, correction=c)
    centered = input - mean(input, dims, keepdim=True)
    sq = (centered * centered.conj()).real if input.is_complex() else centered * centered
    v = sum(sq, dims, keepdim) / (n - c if n - c > 0 else 0)
    if not std:
        return v
    # PyTorch's std gradient is zero where std is zero; sqrt's derivative there would give 0 * inf = nan.
    nonzero = v != 0
    return v.where(nonzero, 1.0).sqrt().where(nonzero, 0.0)


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return _std_result(input, dim, unbiased, keepdim, correction, "std")


def _std_result(input, dim, unbiased, keepdim, correction, name):
    s = named(_var(input, dim, unbiased, keepdim, correction, name, std=True),
              "StdMeanBackward0" if name == "std_mean" else "StdBackward0")
    return s.to(input.dtype) if input.dtype in _HALVES else s


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):  # var_mean(x, False): the legacy positional ``unbiased``
        dim, unbiased = None, dim
    # a plain tuple, as torch's (no return_types entry): its repr is the two tensors'
    return _var_result(input, dim, unbiased, keepdim, correction, "var_mean"), mean(input, dim, keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return _std_result(input, dim, unbiased, keepdim, correction, "std_mean"), mean(input, dim, keepdim)
