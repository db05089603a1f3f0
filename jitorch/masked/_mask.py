"""What every masked op shares: the dims it reduces, the mask broadcast to the input, and the identity value that
stands in for masked-out elements so that a plain jitorch op over the filled input gives the masked result.

Filling through ``where`` (never an in-place write) keeps autograd intact: masked-out elements get a zero gradient.
"""
from __future__ import annotations

import math

import jitorch as torch

__all__ = ["canonical_dim", "input_mask", "reduction_identity", "fill_masked_out", "sum_dtype"]

# NOTE: torch.masked sums and products of these dtypes accumulate in int64, as Tensor.sum does.
_WIDENED_TO_INT64 = ("uint8", "bool", "int8", "int16", "int32")


def canonical_dim(dim, ndim):
    """``dim`` (None, an int or a sequence) as a sorted tuple of non-negative dims; None and () mean every dim."""
    if dim == ():
        dim = None
    if dim is None:
        return tuple(range(ndim))
    ndim = max(ndim, 1)  # a 0-d input takes dim 0 and -1, as torch's dim wrapping does
    dims = []
    for d in (dim,) if isinstance(dim, int) else dim:
        if d in dims:
            raise RuntimeError(f"dim={d} appears multiple times in the list of dims")
        if d >= ndim or d < -ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], "
                             f"but got {d})")
        dims.append(d % ndim)
    return tuple(sorted(dims))


def input_mask(input, mask):
    """``mask`` broadcast to ``input``'s shape as a bool tensor (a mask may have fewer dims, never more)."""
    if mask is None:
        raise ValueError("_input_mask requires explicit mask")
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"masked op: mask must be a Tensor, got {type(mask).__name__}")
    if tuple(mask.shape) != tuple(input.shape):
        if mask.ndim > input.ndim:
            raise IndexError("_input_mask expected broadcastable mask (got mask dimensionality higher than of "
                             f"the input): mask shape {tuple(mask.shape)}, input shape {tuple(input.shape)}")
        mask = torch.broadcast_to(mask, input.shape)
    return mask.to(dtype=torch.bool)


def sum_dtype(input, dtype):
    """The accumulation dtype of a masked sum/prod: ``dtype`` if given, int64 for small integers and bool."""
    if dtype is not None:
        return dtype
    return torch.int64 if str(input.dtype).rsplit(".", 1)[-1] in _WIDENED_TO_INT64 else input.dtype


def _extreme(input, lowest):
    """The identity of a max (``lowest``) or min reduction on ``input``'s dtype, or None where there is none."""
    dtype = input.dtype
    if dtype.is_floating_point or (lowest and dtype.is_complex):
        return -math.inf if lowest else math.inf
    if dtype.is_signed or dtype == torch.uint8:
        info = torch.iinfo(dtype)
        return info.min if lowest else info.max
    return None


def reduction_identity(op_name, input, ord=2.0):
    """The value that leaves reduction ``op_name`` unchanged, as a 0-d tensor of ``input``'s dtype (None: none).

    ``mean``, ``var`` and ``std`` have none: their results at fully masked-out positions are 0/0, NaN.
    """
    dtype = input.dtype
    if op_name in ("sum", "cumsum"):
        value = 0
    elif op_name in ("prod", "cumprod"):
        value = 1
    elif op_name in ("amax", "argmax", "logaddexp"):
        value = None if dtype.is_complex else _extreme(input, lowest=True)
    elif op_name == "logsumexp":
        value = _extreme(input, lowest=True)
    elif op_name in ("amin", "argmin"):
        value = None if dtype.is_complex else _extreme(input, lowest=False)
    elif op_name == "norm":
        if ord == -math.inf and not dtype.is_floating_point:
            raise AssertionError(f"input must be floating point, got {dtype}")
        value = math.inf if ord == -math.inf else 0
    elif op_name == "median":
        return torch.tensor(math.nan, dtype=dtype if dtype.is_floating_point else torch.float32,
                            device=input.device)
    elif op_name in ("mean", "var", "std"):
        return None
    else:
        raise NotImplementedError(f"identity of {op_name} on {dtype} input")
    if value is None:
        return None
    return torch.tensor(value, dtype=dtype, device=input.device)


def fill_masked_out(op_name, input, mask, ord=2.0):
    """``input`` with its masked-out elements replaced by ``op_name``'s identity (``input`` itself without a mask).

    A MaskedTensor ``input`` gives its data under its own mask (``mask`` is not consulted, as torch.masked).
    """
    from .maskedtensor import is_masked_tensor  # (imported here: maskedtensor's ops import this module)

    if is_masked_tensor(input):
        input, mask = input._masked_data, input._masked_mask
    if mask is None:
        return input
    canonical = input_mask(input, mask)
    identity = reduction_identity(op_name, input, ord)
    if identity is None:
        raise RuntimeError(f"masked {op_name}: no identity value for masked-out elements of a {input.dtype} "
                           "input; use a floating point or signed integer input")
    return torch.where(canonical, input, identity)
