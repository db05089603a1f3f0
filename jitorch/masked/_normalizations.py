"""Masked normalizations along one dim (torch.masked's strided semantics): softmax-like ops see masked-out
elements as -inf (softmin: +inf), so they get probability 0 and a fully masked-out row is NaN throughout;
``normalize`` divides the kept elements (masked-out ones as 0) by their norm.
"""
from __future__ import annotations

import jitorch as torch

from ._mask import canonical_dim, fill_masked_out
from ._reductions import norm

__all__ = ["softmax", "log_softmax", "softmin", "normalize"]


def softmax(input, dim, *, dtype=None, mask=None):
    """Softmax along ``dim`` over the kept elements: masked-out elements get 0, fully masked-out rows NaN.

    >>> import jitorch
    >>> x = jitorch.tensor([[1., 2., 3.], [4., 5., 6.]])
    >>> jitorch.masked.softmax(x, 1, mask=jitorch.tensor([[True, False, True], [False, False, False]]))
    tensor([[0.1192, 0.0000, 0.8808],
            [   nan,    nan,    nan]])
    """
    dtype = input.dtype if dtype is None else dtype
    d = canonical_dim(dim, input.ndim)[0]
    return torch.nn.functional.softmax(fill_masked_out("amax", input, mask), d, dtype=dtype)


def log_softmax(input, dim, *, dtype=None, mask=None):
    """Log-softmax along ``dim`` over the kept elements: masked-out elements get -inf, fully masked-out rows NaN."""
    dtype = input.dtype if dtype is None else dtype
    d = canonical_dim(dim, input.ndim)[0]
    return torch.nn.functional.log_softmax(fill_masked_out("amax", input, mask), d, dtype=dtype)


def softmin(input, dim, *, dtype=None, mask=None):
    """Softmin along ``dim`` over the kept elements: masked-out elements get 0, fully masked-out rows NaN."""
    dtype = input.dtype if dtype is None else dtype
    d = canonical_dim(dim, input.ndim)[0]
    return torch.nn.functional.softmin(fill_masked_out("amin", input, mask), d, dtype=dtype)


def normalize(input, ord, dim, *, eps=1e-12, dtype=None, mask=None):
    """The kept elements divided by their ``ord``-norm along ``dim`` (at least ``eps``); masked-out elements 0."""
    dtype = input.dtype if dtype is None else dtype
    zero_filled = fill_masked_out("sum", input, mask)
    kept_norm = norm(input, ord, dim, keepdim=True, dtype=dtype, mask=mask)
    return torch.divide(zero_filled, torch.maximum(kept_norm, kept_norm.new_full([], eps)))
