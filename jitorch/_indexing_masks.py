"""Boolean-mask and flat-position indexing: ``masked_fill``/``masked_select``/``masked_scatter``, ``take``/``put``.

Split from ``_indexing.py`` (which re-exports these); they share its subscript helpers.

>>> import jitorch
>>> x = jitorch.arange(6.0).reshape(2, 3)
>>> x.masked_fill(x > 3, 0.0), jitorch.take(x, jitorch.tensor([0, 5]))
(tensor([[0., 1., 2.],
        [3., 0., 0.]]), tensor([0., 5.]))
"""
from __future__ import annotations

from ._dispatch import apply, apply_inplace
from ._dispatch_inplace import refuse_operand_overlap
from ._pointwise_select import masked_fill_float32
from ._indexing import _as_vector, _check_index_dtype, _fill_value, _on, _put, _type_name
from ._random_inplace import _CPP_NAMES
from ._shape import broadcast_shapes
from ._tensor import Tensor
from .autograd.graph import named
from .ops import indexing as I
from .ops import movement as M
from .ops import pointwise as P

__all__ = ["masked_fill", "masked_select", "masked_scatter", "take", "put"]


# -- masks -------------------------------------------------------------------------------------------------------------
def _check_mask(mask, message, names=None):
    if not isinstance(mask, Tensor):  # a Python bool is no mask: "dtype bool" would be a confusing reason
        op = message.split()[0].rstrip(":_")
        raise TypeError(f"{op}(): argument 'mask' must be Tensor, not {type(mask).__name__}")
    if mask.dtype.name != "bool":
        raise RuntimeError(message.format(_type_name(mask) if names is None else names[mask.dtype.name]))


def _inplace_mask(self, mask, op):
    """``mask`` expanded to ``self``'s shape (at least 1-d), or PyTorch's error when it would grow ``self``."""
    shape = broadcast_shapes(self._data.shape, mask._data.shape, op=op)
    if shape != self._data.shape:
        raise RuntimeError(f"{op}: output with shape {list(self.shape)} doesn't match the broadcast shape "
                           f"{list(shape)}")
    return _as_vector(_on(mask, self).expand(shape))


def masked_fill(input, mask, value):
    """``input`` with ``value`` (a scalar or 0-d tensor) where ``mask`` is True."""
    out = masked_fill_float32(input, mask, value)  # (small calls: past the dispatcher)
    if out is not None:
        return out
    # ATen fills a row-major clone of the input
    return named(masked_where(input, mask, value).contiguous(), "MaskedFillBackward0")


def masked_where(input, mask, value):
    """`masked_fill` in the layout of its operands (``index_fill``'s, which clones in the input's layout)."""
    _check_mask(mask, "masked_fill_ only supports boolean masks, but got mask with dtype {}", _CPP_NAMES)
    return apply(P.WHERE, _on(mask, input), _fill_value(input, value, "masked_fill_"), input)


def _masked_fill_(self, mask, value):
    _check_mask(mask, "masked_fill_ only supports boolean masks, but got mask with dtype {}", _CPP_NAMES)
    refuse_operand_overlap(self, (mask,))  # torch reads a 0-d value as a number: only the mask may not overlap
    mask = _inplace_mask(self, mask, "masked_fill_")
    target = self.reshape(1) if self._data.ndim == 0 else self
    apply_inplace(I.INDEX_PUT, target, _fill_value(self, value, "masked_fill_"), mask, key=(0,), accumulate=False)
    return self


def masked_select(input, mask):
    """The elements of ``input`` where ``mask`` is True, as a 1-D tensor (the two broadcast first)."""
    _check_mask(mask, "masked_select: expected BoolTensor for mask")
    if input._data.shape == mask._data.shape and input._data.ndim:  # nothing to broadcast
        return apply(I.INDEX, input, _on(mask, input), key=(0,))
    shape = broadcast_shapes(input._data.shape, mask._data.shape, op="masked_select")
    return apply(I.INDEX, _as_vector(input.expand(shape)), _as_vector(_on(mask, input).expand(shape)), key=(0,))


def _masked_scatter(self, mask, source, inplace):
    _check_mask(mask, "masked_scatter_ only supports boolean masks, but got mask with dtype {}")
    if source.dtype is not self.dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but got"
                           f"{_type_name(self)} and {_type_name(source)}")
    if inplace:
        shape = self._data.shape
        target, mask = (self.reshape(1) if self._data.ndim == 0 else self), _inplace_mask(self, mask, "masked_scatter_")
    else:
        shape = broadcast_shapes(self._data.shape, mask._data.shape, op="masked_scatter")
        target, mask = _as_vector(self.expand(shape)), _as_vector(_on(mask, self).expand(shape))
    n = int(mask.sum())
    if source.numel() < n:
        raise RuntimeError("Number of elements of source < number of ones in mask")
    values = apply(M.SLICE, _on(source, self).reshape(-1), key=(slice(0, n),))
    out = _put(target, values, [mask], (0,), False, inplace)
    return self if inplace else out.reshape(shape)


def masked_scatter(input, mask, source):
    """``input`` with consecutive elements of ``source`` written where ``mask`` is True."""
    return _masked_scatter(input, mask, source, False)


# -- flat positions ----------------------------------------------------------------------------------------------------
def _flat_check(self, index, op):
    _check_index_dtype(index, op, ("int64",), op + "(): Expected a long tensor for index, but got {}")
    n = self.numel()
    arr = index._data
    try:
        I.check_bounds(arr, n, 0)
    except I.IndexOutOfBounds as e:
        raise IndexError(f"out of range: tried to access index {e.value} on a tensor of {n} elements.") from None


def take(input, index):
    """The elements of ``input`` (read as 1-D, row-major) at ``index``; the result has ``index``'s shape."""
    _flat_check(input, index, "take")
    return apply(I.INDEX, input.reshape(-1), _on(index, input), key=(0,))


def _put_flat(self, index, source, accumulate, inplace):
    _flat_check(self, index, "put_")
    if source.numel() != index.numel():
        raise IndexError(f"put_(): Expected source and index to have the same number of elements, but got "
                         f"source.numel() = {source.numel()}, index.numel() = {index.numel()}")
    if source.dtype is not self.dtype:
        raise RuntimeError(f"put_(): self and source expected to have the same dtype, but got {_type_name(self)} and "
                           f"{_type_name(source)}")
    target = self.reshape(1) if self._data.ndim == 0 else self
    flat = _on(index.reshape(-1), self) % max(self.numel(), 1)
    shape = target._data.shape
    indices, stride = [], 1
    for size in reversed(shape):  # unravel the row-major positions into one index tensor per dim
        indices.append((flat // stride) % size)
        stride *= size
    out = _put(target, _on(source.reshape(-1), self), indices[::-1], tuple(range(len(shape))), accumulate, inplace)
    return self if inplace else out.reshape(self.shape)


def put(input, index, source, accumulate=False):
    """``input`` with ``source`` written (or added) at the row-major positions ``index``."""
    return _put_flat(input, index, source, accumulate, False)
