"""What a MaskedTensor's operations compute: elementwise ops on the data under the operand's mask (two masked
operands must share one mask), reductions through the masked functions (a result is kept where any input element
was), and softmax over the kept elements.

Each op runs on the data tensor with jitorch's autograd, so ``backward`` reaches the MaskedTensor's data.
"""
from __future__ import annotations

import jitorch as torch

from . import _normalizations, _reductions

__all__ = ["UNARY_NAMES", "BINARY_NAMES", "REDUCTION_NAMES", "unary", "binary", "reduce", "softmax"]

UNARY_NAMES = ("abs", "absolute", "acos", "arccos", "acosh", "arccosh", "angle", "asin", "arcsin", "asinh", "arcsinh",
               "atan", "arctan", "atanh", "arctanh", "bitwise_not", "ceil", "clamp", "clip", "conj_physical", "cos",
               "cosh", "deg2rad", "digamma", "erf", "erfc", "erfinv", "exp", "exp2", "expm1", "fix", "floor", "frac",
               "lgamma", "log", "log10", "log1p", "log2", "logit", "i0", "isnan", "nan_to_num", "neg", "negative",
               "positive", "pow", "rad2deg", "reciprocal", "round", "rsqrt", "sigmoid", "sign", "sgn", "signbit",
               "sin", "sinc", "sinh", "sqrt", "square", "tan", "tanh", "trunc")
BINARY_NAMES = ("add", "atan2", "arctan2", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
                "bitwise_right_shift", "div", "divide", "floor_divide", "fmod", "logaddexp", "logaddexp2", "mul",
                "multiply", "nextafter", "remainder", "sub", "subtract", "true_divide", "eq", "ne", "le", "ge",
                "greater", "greater_equal", "gt", "less_equal", "lt", "less", "maximum", "minimum", "fmax", "fmin",
                "not_equal")
REDUCTION_NAMES = ("sum", "mean", "amin", "amax", "argmin", "argmax", "prod", "all", "norm", "var", "std")


def _is_masked(value):
    from .maskedtensor import MaskedTensor

    return isinstance(value, MaskedTensor)


def _wrap(data, mask):
    from .maskedtensor import MaskedTensor

    return MaskedTensor._wrap(data, mask)


def unary(name, input, args, kwargs):
    """``jitorch.<name>(input.data, *args, **kwargs)`` under ``input``'s mask (no other tensor arguments)."""
    if any(isinstance(a, torch.Tensor) or _is_masked(a) for a in (*args, *kwargs.values())):
        raise TypeError("MaskedTensor unary ops do not support additional Tensor arguments")
    return _wrap(getattr(torch, name)(input._masked_data, *args, **kwargs), input._masked_mask)


def _masks_match(a, b):
    if not (_is_masked(a) and _is_masked(b)):
        return True
    mask_a, mask_b = a._masked_mask, b._masked_mask
    return mask_a.ndim == mask_b.ndim and tuple(mask_a.shape) == tuple(mask_b.shape) and bool(torch.equal(mask_a,
                                                                                                         mask_b))


def binary(name, a, b, args=(), kwargs=None):
    """``jitorch.<name>(a.data, b.data)`` under the one mask the MaskedTensor operands share.

    A plain tensor or number operand is used whole; two MaskedTensors with different masks are refused, as torch.
    """
    if kwargs:
        raise ValueError("len(kwargs) must equal 0")
    if any(isinstance(x, torch.Tensor) or _is_masked(x) for x in args):
        raise TypeError("MaskedTensor binary ops do not support Tensor arguments aside from the lhs and rhs")
    if not _masks_match(a, b):
        raise ValueError("Input masks must match. If you need support for this, please open an issue on Github.")
    data = getattr(torch, name)(*(x._masked_data if _is_masked(x) else x for x in (a, b)), *args)
    mask = (a if _is_masked(a) else b)._masked_mask
    return _wrap(data, mask.expand_as(data))


def _any_over(mask, dim, keepdim):
    dims = [dim] if isinstance(dim, int) else list(dim)
    for d in sorted((d % max(mask.ndim, 1) for d in dims), reverse=True):
        mask = torch.any(mask, dim=d, keepdim=keepdim)
    return mask


def reduce(name, input, dim=None, keepdim=False, dtype=None):
    """Reduction ``name`` of the kept elements, over every dim (``dim`` None) or ``dim``.

    The result is kept where any element it reduces was; ``all`` counts masked-out elements as True.
    """
    data, mask = input._masked_data, input._masked_mask
    if dim is None:
        if name == "all":
            result = data.masked_fill(~mask, True).all()
        else:
            result = getattr(_reductions, name)(data, mask=mask)
        return _wrap(result, torch.any(mask))
    if name == "all":
        result = torch.all(data.masked_fill(~mask, True), dim=dim, keepdim=keepdim)
    else:
        result = getattr(_reductions, name)(data, dim=dim, keepdim=keepdim, dtype=dtype, mask=mask)
    return _wrap(result, _any_over(mask, dim, keepdim))


def softmax(input, dim):
    """Softmax of the kept elements along ``dim``: 0 at masked-out elements and throughout fully masked-out rows.

    NOTE: a fully masked-out row is softmaxed as zeros and then zeroed, so no NaN reaches the data or its gradient.
    """
    data, mask = input._masked_data, input._masked_mask
    row_kept = mask.any(dim=dim, keepdim=True)
    safe = torch.where(row_kept, data, torch.zeros((), dtype=data.dtype))
    kept_mask = mask | ~row_kept
    result = torch.where(mask, _normalizations.softmax(safe, dim, mask=kept_mask), torch.zeros((), dtype=data.dtype))
    return _wrap(result, mask)
