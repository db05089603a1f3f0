"""Masked reductions and scans (torch.masked's strided semantics): masked-out elements are replaced by the op's
identity, then the plain jitorch op runs, so values, dtypes and gradients are that op's.

At fully masked-out positions the results are what the identity gives: sum 0, prod 1, amax -inf (an integer
dtype's min), amin +inf, argmax/argmin 0, logsumexp -inf, norm 0; mean, var, std and median give NaN.
"""
from __future__ import annotations

import jitorch as torch

from ._mask import canonical_dim, fill_masked_out, input_mask, sum_dtype

__all__ = ["sum", "prod", "cumsum", "cumprod", "amax", "amin", "argmax", "argmin", "mean", "median", "logsumexp",
           "logaddexp", "norm", "var", "std"]


def sum(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """Sum of the elements of ``input`` that ``mask`` keeps, over ``dim`` (all dims when None).

    >>> import jitorch
    >>> x = jitorch.tensor([[-3., -2., -1.], [0., 1., 2.]])
    >>> jitorch.masked.sum(x, 1, mask=jitorch.tensor([[True, False, True], [False, False, False]]))
    tensor([-4.,  0.])
    """
    dtype = sum_dtype(input, dtype)
    dims = canonical_dim(dim, input.ndim)
    return torch.sum(fill_masked_out("sum", input, mask), dims, bool(keepdim), dtype=dtype)


def prod(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """Product of the kept elements over ``dim`` (one dim at a time, as torch.masked, so any dim tuple works)."""
    dtype = sum_dtype(input, dtype)
    dims = canonical_dim(dim, input.ndim)
    result = fill_masked_out("prod", input, mask).to(dtype=dtype)
    for d in reversed(dims):
        result = result.prod(dim=d, keepdim=bool(keepdim))
    return result


def cumsum(input, dim, *, dtype=None, mask=None):
    """Running sum along ``dim`` with masked-out elements counted as 0."""
    dtype = input.dtype if dtype is None else dtype
    d = canonical_dim(dim, input.ndim)[0]
    return torch.cumsum(fill_masked_out("sum", input, mask), d, dtype=dtype).to(dtype=dtype)


def cumprod(input, dim, *, dtype=None, mask=None):
    """Running product along ``dim`` with masked-out elements counted as 1."""
    dtype = input.dtype if dtype is None else dtype
    d = canonical_dim(dim, input.ndim)[0]
    return torch.cumprod(fill_masked_out("prod", input, mask), d, dtype=dtype).to(dtype=dtype)


def amax(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """Maximum of the kept elements over ``dim``; -inf (an integer dtype's min) where all are masked out."""
    dtype = input.dtype if dtype is None else dtype
    filled = fill_masked_out("amax", input, mask)
    return torch.amax(filled, canonical_dim(dim, filled.ndim), bool(keepdim)).to(dtype=dtype)


def amin(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """Minimum of the kept elements over ``dim``; +inf (an integer dtype's max) where all are masked out."""
    dtype = input.dtype if dtype is None else dtype
    filled = fill_masked_out("amin", input, mask)
    return torch.amin(filled, canonical_dim(dim, filled.ndim), bool(keepdim)).to(dtype=dtype)


def argmax(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """Index of the kept maximum along ``dim``, in ``input``'s dtype as torch.masked returns it (0 if none kept)."""
    dtype = input.dtype if dtype is None else dtype
    return torch.argmax(fill_masked_out("argmax", input, mask), dim, bool(keepdim)).to(dtype=dtype)


def argmin(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """Index of the kept minimum along ``dim``, in ``input``'s dtype as torch.masked returns it (0 if none kept)."""
    dtype = input.dtype if dtype is None else dtype
    return torch.argmin(fill_masked_out("argmin", input, mask), dim, bool(keepdim)).to(dtype=dtype)


def _count_and_total(input, dim, keepdim, dtype, mask):
    """How many elements are kept along ``dim`` (int64) and their sum in ``dtype``."""
    if mask is None:
        count = sum(torch.ones(input.shape, dtype=torch.int64, device=input.device), dim, keepdim=keepdim)
        return count, sum(input, dim, keepdim=keepdim, dtype=dtype)
    kept = input_mask(input, mask)
    count = kept.sum(dim=dim, keepdim=bool(keepdim))
    return count, sum(input, dim, keepdim=keepdim, dtype=dtype, mask=kept)


def mean(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """Mean of the kept elements over ``dim``; NaN where all are masked out. The dtype must be float or complex."""
    source = "Optional" if dtype is not None else "Input"
    dtype = input.dtype if dtype is None else dtype
    if not (dtype.is_floating_point or dtype.is_complex):
        raise ValueError(f"mean(): Could not infer output dtype. {source} dtype must be either a floating point "
                         f"or complex dtype. Got: {dtype}")
    count, total = _count_and_total(input, dim, keepdim, dtype, mask)
    return total / count


def median(input, dim=-1, *, keepdim=False, dtype=None, mask=None):
    """Median of the kept elements along ``dim`` (NaNs ignored, as ``nanmedian``); NaN where all are masked out.

    A non-float input is reduced in float32 and cast back to ``dtype``; a fully masked-out row is then an error.
    """
    dtype = input.dtype if dtype is None else dtype
    d = canonical_dim(dim, input.ndim)[0]
    is_float = input.dtype.is_floating_point
    if not is_float:
        input = input.to(dtype=torch.float32)
    output = torch.nanmedian(fill_masked_out("median", input, mask), d, keepdim).values
    if is_float:
        return output  # NOTE: torch.masked ignores ``dtype`` for float inputs
    if bool(torch.isnan(output).any()):
        raise ValueError("masked median expects no fully masked out rows if dtype is not floating point")
    return output.to(dtype=dtype)


def logsumexp(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """log(sum(exp)) of the kept elements over ``dim``; -inf where all are masked out."""
    dtype = input.dtype if dtype is None else dtype
    dims = canonical_dim(dim, input.ndim)
    return torch.logsumexp(fill_masked_out("logsumexp", input, mask), dims, keepdim=keepdim).to(dtype=dtype)


def logaddexp(input, other, *, dtype=None, input_mask=None, other_mask=None):
    """Elementwise log(exp(input) + exp(other)), each operand's masked-out elements taken as -inf."""
    dtype = input.dtype if dtype is None else dtype
    a = fill_masked_out("logaddexp", input, input_mask)
    b = fill_masked_out("logaddexp", other, other_mask)
    return torch.logaddexp(a, b).to(dtype=dtype)


def norm(input, ord=2.0, dim=None, *, keepdim=False, dtype=None, mask=None):
    """Vector ``ord``-norm of the kept elements over ``dim``; 0 where all are masked out."""
    dtype = input.dtype if dtype is None else dtype
    filled = fill_masked_out("norm", input, mask, ord)
    return torch.linalg.vector_norm(filled, ord, canonical_dim(dim, input.ndim), bool(keepdim), dtype=dtype)


def _std_var(input, dim, unbiased, correction, keepdim, dtype, mask, take_sqrt):
    """Variance (``take_sqrt``: standard deviation) of the kept elements: two passes around the kept mean."""
    if unbiased is not None and correction is not None:
        raise AssertionError("Only one of unbiased and correction may be given")
    if correction is None:
        correction = 1.0 if unbiased is None or unbiased else 0.0
    correction = float(correction)
    if dtype is None:
        dtype = input.dtype
        if not (dtype.is_floating_point or dtype.is_complex):
            dtype = torch.float32
    compute_dtype = dtype if (dtype.is_floating_point or dtype.is_complex) else torch.float32
    count, total = _count_and_total(input, dim, True, dtype, mask)
    deviation = torch.subtract(input, torch.divide(total, count))
    kept = None if mask is None else input_mask(input, mask)
    squares = sum(deviation * deviation.conj(), dim, keepdim=keepdim, dtype=compute_dtype, mask=kept)
    if not keepdim:
        count = count.reshape(squares.shape)
    if correction != 0:
        real_dtype = compute_dtype.to_real() if compute_dtype.is_complex else compute_dtype
        count = torch.subtract(count.to(real_dtype), correction)
        count = torch.maximum(count, count.new_zeros([]))
    output = torch.divide(squares, count).to(dtype=dtype)
    return torch.sqrt(output) if take_sqrt else output


def var(input, dim=None, unbiased=None, *, correction=None, keepdim=False, dtype=None, mask=None):
    """Variance of the kept elements over ``dim`` (``correction`` 1 by default); NaN where all are masked out."""
    return _std_var(input, dim, unbiased, correction, keepdim, dtype, mask, take_sqrt=False)


def std(input, dim=None, unbiased=None, *, correction=None, keepdim=False, dtype=None, mask=None):
    """Standard deviation of the kept elements over ``dim``; NaN where all are masked out."""
    return _std_var(input, dim, unbiased, correction, keepdim, dtype, mask, take_sqrt=True)
