"""Public sorting, selection, set and counting functions (``torch.sort``, ``topk``, ``unique``, ...) and methods.

Value-selecting ops compute indices with a row of ``ops/sorting.py`` and gather the values with ``take_along``, so
their gradient is a scatter of the upstream gradient back to the selected positions.

>>> import jitorch
>>> x = jitorch.tensor([[3, 1, 2], [1, 1, 0]])
>>> x.sort(dim=1).values, x.topk(1).indices.flatten(), jitorch.unique(x, return_counts=True)
(tensor([[1, 2, 3],
        [0, 1, 1]]), tensor([0, 0]), (tensor([0, 1, 2, 3]), tensor([1, 3, 1, 1])))
"""
from __future__ import annotations

import numpy as np

from . import _dtype, return_types
from ._dispatch import TENSOR_TYPES, TORCH_TYPE_NAMES, apply, sync_view
from ._dispatch_fast import keep_result
from ._dispatch_modes import MODES
from ._shape import wrap_dim
from ._tensor import Tensor
from .autograd.graph import named
from .ops import sets_and_counts as C
from .ops import sorting as S
from .ops.native_topk import topk_rows
from .ops.unique_counting import UNIQUE_CONSECUTIVE_FLAT, UNIQUE_FLAT

__all__ = [
    "sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian", "mode", "unique", "unique_consecutive",
    "cummax", "cummin", "searchsorted", "bucketize", "histc", "bincount", "logcumsumexp", "isin",
]


def _as_1d(input):
    """0-d inputs behave as one-element vectors; returns (tensor of ndim >= 1, whether to squeeze back)."""
    return (input.reshape(1), True) if input._data.ndim == 0 else (input, False)


def _gather(input, indices, dim):
    return apply(S.TAKE_ALONG, input, indices, dim=dim)


def _select(input, index_op, result_type, dim, keepdim, op, **attrs):
    """Shared path of kthvalue / median(dim) / mode: indices of one element per slice, values gathered."""
    x, scalar = _as_1d(input)
    d = wrap_dim(dim, input._data.ndim, op)
    if x._data.shape[d] == 0:
        raise IndexError(f"{op}(): Expected reduction dim {d} to have non-zero size.")
    indices = apply(index_op, x, dim=d, **attrs)
    values = _gather(x, indices, d)
    if scalar:
        return result_type(values.reshape(()), indices.reshape(()))
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return result_type(values, indices)


def _check_not_complex(input, op, kernel=None):
    """torch's refusal of complex inputs: the sorts' RuntimeError, or (``kernel``) its NotImplementedError naming
    the CPU kernel, as torch raises for median, mode, kthvalue and the cumulative extremes."""
    if input.is_complex():
        if kernel is not None:
            from ._dispatch import TORCH_TYPE_NAMES

            raise NotImplementedError(f'"{kernel}" not implemented for \'{TORCH_TYPE_NAMES[input.dtype.name]}\'')
        raise RuntimeError(f"{op}(): not implemented for complex tensors ({input.dtype})")


def sort(input, dim=-1, descending=False, stable=False):
    """Sorted values and their indices along ``dim`` (NaN sorts as the largest value). Always stable: torch's
    ``stable=False`` leaves the order of equal values unspecified.

    >>> import jitorch
    >>> jitorch.sort(jitorch.tensor([2.0, 1.0, 2.0]), descending=True).indices
    tensor([0, 2, 1])
    """
    _check_not_complex(input, "sort")
    x, scalar = _as_1d(input)
    d = wrap_dim(dim, input._data.ndim, "sort")
    indices = apply(S.ARGSORT, x, dim=d, descending=bool(descending), stable=bool(stable))
    values = _gather(x, indices, d)
    if scalar:
        values, indices = values.reshape(()), indices.reshape(())
    return return_types.sort(values, indices)


def argsort(input, dim=-1, descending=False, stable=False):
    """Indices that sort ``input`` along ``dim``."""
    _check_not_complex(input, "argsort")
    x, scalar = _as_1d(input)
    indices = apply(S.ARGSORT, x, dim=wrap_dim(dim, input._data.ndim, "argsort"), descending=bool(descending),
                    stable=bool(stable))
    return indices.reshape(()) if scalar else indices


def msort(input):
    """``sort(input, dim=0).values``."""
    return sort(input, 0).values


def topk(input, k, dim=-1, largest=True, sorted=True):
    """The ``k`` largest (or smallest) elements along ``dim`` and their indices, in sorted order (``sorted=False``:
    in the order torch's CPU selection leaves them)."""
    quick = _quick_topk(input, k, dim, largest, sorted)
    if quick is not None:
        return quick
    _check_not_complex(input, "topk")
    if input.dtype is _dtype.bool and input.device.type == "cpu":
        raise RuntimeError("topk does not support bool dtypes on CPU")
    x, scalar = _as_1d(input)
    d = wrap_dim(dim, input._data.ndim, "topk")
    n = x._data.shape[d]
    if not 0 <= k <= n:
        raise RuntimeError(f"topk(): selected index k out of range (k = {k}, size of dim {d} = {n})")
    indices = apply(S.TOPK_INDICES, x, k=int(k), dim=d, largest=bool(largest), sorted=bool(sorted))
    values = named(_gather(x, indices, d), "TopkBackward0")
    if scalar:
        values, indices = values.reshape(()), indices.reshape(())
    return return_types.topk(values, indices)


def _quick_topk(input, k, dim, largest, sorted):
    """`topk` of a small plain CPU float32 tensor along its last dim, sorted, from the native head (`topk_rows`)
    with the two rows' results and nodes, or None (the rows then run; larger inputs take their partition)."""
    if MODES or type(input) not in TENSOR_TYPES or not sorted or type(k) is not int or type(dim) is not int:
        return None
    a = input._data
    if type(a) is not np.ndarray or not 0 < a.size < S._PARTITION_MIN or not a.ndim or dim not in (-1, a.ndim - 1) \
            or k > a.shape[-1]:
        return None
    if input._base is not None and input._view_ver != input._ver_owner._ver:
        sync_view(input)
    found = topk_rows(a, k, largest)
    if found is None:
        return None
    attrs = {"k": k, "dim": a.ndim - 1, "largest": bool(largest), "sorted": True}
    indices = keep_result(S.TOPK_INDICES, (input,), attrs, found[1], False)
    values = keep_result(S.TAKE_ALONG, (input, indices), {"dim": a.ndim - 1}, found[0], input._requires_grad)
    return return_types.topk(named(values, "TopkBackward0"), indices)


def kthvalue(input, k, dim=-1, keepdim=False):
    """The ``k``-th smallest element (1-based) along ``dim`` and its index."""
    d = wrap_dim(dim, input._data.ndim, "kthvalue")
    n = input._data.shape[d] if input._data.ndim else 1
    if n == 0:
        raise IndexError(f"kthvalue(): Expected reduction dim {d} to have non-zero size.")
    if input.dim():  # (a 0-d one is its own kth value, as torch answers)
        if input.dtype is _dtype.bool:
            raise NotImplementedError('"kthvalue_cpu" not implemented for \'Bool\'')  # torch's CPU kernel's words
        _check_not_complex(input, "kthvalue", "kthvalue_cpu")
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d} (k = {k}, size = {n})")
    return _select(input, S.KTHVALUE_INDICES, return_types.kthvalue, dim, keepdim, "kthvalue", k=int(k))


def _global_median(input, ignore_nan):
    """Median of all elements; ties (and NaNs) share the gradient evenly, as PyTorch's global median does."""
    flat = input.reshape(-1)
    if flat._data.size == 0:
        if input.dtype.category >= _dtype.FLOAT:
            return flat.sum() * float("nan")
        # ATen fills the result with NaN converted to the input's dtype: x86's conversion gives the lowest int32 and
        # int64 (narrower types take the low bits of the int32: 0), and True for bool.
        fill = {"int32": -2**31, "int64": -2**63, "bool": True}.get(input.dtype.name, 0)
        return input.new_full((), fill)
    index = apply(S.MEDIAN_INDICES, flat, dim=0, ignore_nan=ignore_nan)
    value = _gather(flat, index, 0).reshape(()).detach()
    if not input._requires_grad:
        return value
    mask = flat.isnan() if bool(value.isnan()) else flat == value
    # ``value + 0`` in the forward; the gradient is spread evenly over the elements equal to the median.
    spread = (flat - value).where(mask, 0.0).sum() / mask.sum()
    return value + spread


def _check_not_bool(input, dim):
    """torch's CPU median kernels refuse bool, in their own names."""
    if input.dtype is _dtype.bool and input._data.size:  # (an empty one: its size checks and result come first)
        kernel = "median_cpu" if dim is None else "median_out"
        raise NotImplementedError(f'"{kernel}" not implemented for \'Bool\'')


def median(input, dim=None, keepdim=False):
    """Lower median of all elements, or ``(values, indices)`` along ``dim``; any NaN makes the median NaN."""
    _check_not_complex(input, "median", "median_cpu" if dim is None else "median_out")
    _check_not_bool(input, dim)
    if dim is None:
        return named(_global_median(input, ignore_nan=False), "MedianBackward0")
    return _select(input, S.MEDIAN_INDICES, return_types.median, dim, keepdim, "median", ignore_nan=False)


def nanmedian(input, dim=None, keepdim=False):
    """``median`` that ignores NaNs (NaN only when a slice is all NaN)."""
    _check_not_complex(input, "nanmedian", "median_cpu" if dim is None else "median_out")
    _check_not_bool(input, dim)
    if dim is None:
        return named(_global_median(input, ignore_nan=True), "NanmedianBackward0")
    return _select(input, S.MEDIAN_INDICES, return_types.nanmedian, dim, keepdim, "nanmedian", ignore_nan=True)


def mode(input, dim=-1, keepdim=False):
    """Most frequent value along ``dim`` (the smallest among equally frequent ones) and its last index."""
    if input.dim():  # (a 0-d one is its own mode, as torch answers)
        _check_not_complex(input, "mode", "mode_cpu")
    return _select(input, S.MODE_INDICES, return_types.mode, dim, keepdim, "mode")


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """Sorted distinct elements (or slices along ``dim``), optionally with inverse indices and counts."""
    d = None if dim is None else wrap_dim(dim, input._data.ndim, "unique")
    if d is None:  # sorted or not, ATen's CPU unique returns the sorted values
        values, inverse, counts = apply(UNIQUE_FLAT, input, with_inverse=bool(return_inverse))
    else:
        values, inverse, counts = apply(C.UNIQUE, input, dim=d)
    return _set_result(values, inverse, counts, return_inverse, return_counts)


def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """Collapse runs of equal consecutive elements (or slices along ``dim``)."""
    d = None if dim is None else wrap_dim(dim, input._data.ndim, "unique_consecutive")
    if d is None:
        values, inverse, counts = apply(UNIQUE_CONSECUTIVE_FLAT, input, with_inverse=bool(return_inverse))
    else:
        values, inverse, counts = apply(C.UNIQUE_CONSECUTIVE, input, dim=d)
    return _set_result(values, inverse, counts, return_inverse, return_counts)


def _set_result(values, inverse, counts, return_inverse, return_counts):
    if return_inverse and return_counts:
        return values, inverse, counts
    if return_inverse:
        return values, inverse
    if return_counts:
        return values, counts
    return values


def _cumextreme(input, dim, largest, result_type, op):
    if input.dim():  # (a 0-d one is its own running extreme, as torch answers)
        _check_not_complex(input, op, op + "_cpu")
    x, scalar = _as_1d(input)
    d = wrap_dim(dim, input._data.ndim, op)
    indices = apply(S.CUMEXTREME_INDICES, x, dim=d, largest=largest)
    values = _gather(x, indices, d)
    if scalar:
        values, indices = values.reshape(()), indices.reshape(())
    return result_type(values, indices)


def cummax(input, dim):
    """Running maximum along ``dim`` and the index where it was reached."""
    return _cumextreme(input, dim, True, return_types.cummax, "cummax")


def cummin(input, dim):
    """Running minimum along ``dim`` and the index where it was reached."""
    return _cumextreme(input, dim, False, return_types.cummin, "cummin")


def _wrapped_scalar(seq, x):
    """ATen's searchsorted_scalar_tensor: a Python number as a 0-d int64, double, bool or complex128 tensor, which
    promotes with the boundaries as a scalar in arithmetic (its own dtype only across categories)."""
    if not isinstance(x, (bool, int, float, complex, np.generic)):
        return seq.new_tensor(x)
    d = _dtype.scalar_dtype(x)
    return seq.new_tensor(x, dtype=_dtype.float64 if d.is_floating_point else _dtype.complex128 if d.is_complex else d)


def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None):
    """Insertion indices of ``input`` in the innermost dim of ``sorted_sequence`` (batched over leading dims)."""
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, got side of left "
                               "while right was True")
        right = side == "right"
    seq = sorted_sequence
    values = input if isinstance(input, Tensor) else _wrapped_scalar(seq, input)
    if seq._data.ndim == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 "
                           "dimension")
    if seq._data.ndim > 1 and seq._data.shape[:-1] != values._data.shape[:-1]:
        raise RuntimeError(f"torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
                           f"dimensions of boundaries tensor and input value tensor must match, but we got "
                           f"boundaries tensor {list(seq.shape)} and input value tensor {list(values.shape)}")
    if values.dtype is not seq.dtype:  # ATen's searchsorted_maybe_trim_input_tensors: both to their result type
        common = _dtype.result_type(seq, input)
        seq, values = seq.to(common), values.to(common)  # (a scalar out of range wraps, as ATen's .to)
    if seq.dtype is _dtype.bool or seq.is_complex():
        raise NotImplementedError(f"\"searchsorted_out_cpu\" not implemented for '{TORCH_TYPE_NAMES[seq.dtype.name]}'")
    if sorter is not None:
        if sorter.dtype is not _dtype.int64:
            raise RuntimeError(f"torch.searchsorted(): sorter must be a tensor of long dtype but got dtype "
                               f"{TORCH_TYPE_NAMES[sorter.dtype.name]}")
        if sorter.shape != seq.shape:
            # (torch's message has no space before "and")
            raise RuntimeError(f"torch.searchsorted(): boundary and sorter must have the same size, but got boundary "
                               f"tensor {list(seq.shape)}and got sorter tensor {list(sorter.shape)}")
        if sorter._data.size and (int(sorter.min()) < 0 or int(sorter.max()) >= seq._data.shape[-1]):
            raise RuntimeError("torch.searchsorted(): sorter index out of range")
        seq = _gather(seq, sorter, seq._data.ndim - 1)
    out_dtype = _dtype.int32.np if out_int32 else _dtype.int64.np
    return apply(C.SEARCHSORTED, seq.detach(), values.detach(), side="right" if right else "left",
                 out_dtype=out_dtype)


def bucketize(input, boundaries, *, out_int32=False, right=False):
    """Bucket index of each element for the 1-D ``boundaries`` (``right`` picks which side is closed)."""
    if boundaries._data.ndim != 1:
        raise RuntimeError(f"bucketize: boundaries tensor must be 1 dimension, but got dim({boundaries._data.ndim})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


def _not_implemented_for_integers(input, kernel):
    if input.dtype.category < _dtype.FLOAT:
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{TORCH_TYPE_NAMES[input.dtype.name]}'")


def histc(input, bins=100, min=0, max=0):
    """Histogram of ``bins`` equal-width bins over ``[min, max]`` (the data's range when both are 0)."""
    _not_implemented_for_integers(input, "histogram_cpu")
    if bins <= 0:
        raise RuntimeError(f"torch.histc: bins must be > 0, but got {bins} for dimension 0")
    if min > max:
        raise RuntimeError(f"torch.histc: max must be larger than min, got min {min} and max {max}")
    if input._data.size and not bool(input.isfinite().all()) and min == max:
        raise RuntimeError(f"torch.histc: range of [{input.min().item()}, {input.max().item()}] is not finite")
    return apply(C.HISTC, input.detach(), bins=int(bins), lo=float(min), hi=float(max))


def bincount(input, weights=None, minlength=0):
    """Occurrences of each value of a 1-D non-negative integer tensor (weighted sums with ``weights``)."""
    if input.dtype.category != _dtype.INT:
        raise NotImplementedError(f"\"bincount_cpu\" not implemented for '{TORCH_TYPE_NAMES[input.dtype.name]}'")
    if input._data.ndim != 1 or (input._data.size and int(input.min()) < 0):
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is not None and weights._data.shape != input._data.shape:
        raise RuntimeError("weights should be 1-d and have the same length as input")
    # Weights that require grad record the row's node, whose backward raises as torch's (no derivative rule in ATen):
    # a loss summing the count must not train its other terms while silently dropping the weights' gradient.
    return apply(C.BINCOUNT, input, weights, minlength=int(minlength))




def logcumsumexp(input, dim):
    """``log(cumsum(exp(x)))`` along ``dim``, computed without overflow."""
    _not_implemented_for_integers(input, "logcumsumexp_out_cpu")
    x, scalar = _as_1d(input)
    out_t = apply(S.LOGCUMSUMEXP, x, dim=wrap_dim(dim, input._data.ndim, "logcumsumexp"))
    return out_t.reshape(()) if scalar else out_t


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each of ``elements`` is among ``test_elements`` (either may be a scalar): a binary search of each
    element in the sorted test values, so memory stays linear. NaN is in nothing, as NaN != NaN."""
    from ._creation import tensor

    if not isinstance(elements, Tensor) and not isinstance(test_elements, Tensor):
        raise TypeError("isin(): at least one of elements and test_elements must be a Tensor")
    like = elements if isinstance(elements, Tensor) else test_elements
    elements = elements if isinstance(elements, Tensor) else tensor(elements, device=like.device)
    test_elements = test_elements if isinstance(test_elements, Tensor) else tensor(test_elements, device=like.device)
    for t in (elements, test_elements):
        if t.dtype is _dtype.bool:
            raise RuntimeError("Unsupported input type encountered for isin(): Bool")
    common = _dtype.promote_types(elements.dtype, test_elements.dtype)
    values = sort(test_elements.reshape(-1).to(common)).values
    if values.is_floating_point():  # NaN matches nothing; dropped, so searchsorted sees no NaN boundary
        values = values[:int((~values.isnan()).sum())]
    x = elements.to(common)
    if values._data.size == 0:
        found = x.new_zeros(x.shape, dtype=_dtype.bool)
    else:
        idx = searchsorted(values, x.reshape(-1)).clamp_(max=values._data.size - 1)
        found = (values[idx] == x.reshape(-1)).reshape(x.shape)
    return ~found if invert else found


_METHODS = {name: globals()[name] for name in __all__ if name not in ("searchsorted", "bucketize", "isin")}
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
