"""Indexing: ``x[key]``, ``x[key] = v`` and the gather/scatter family, composites of ``ops/indexing.py`` rows.

Integers, slices, ``None`` and ``...`` make views (the ``slice`` row); index tensors, lists, arrays and bool masks
then pick elements into a copy (the ``index`` row, whose gradient accumulates repeated picks).

>>> import jitorch
>>> x = jitorch.arange(12.0).reshape(3, 4)
>>> x[1:, ::2], x[[0, 0], -1]
(tensor([[ 4.,  6.],
        [ 8., 10.]]), tensor([3., 3.]))
>>> x[x > 9] = -1.0
>>> x.gather(1, jitorch.tensor([[0], [1], [3]])).flatten()
tensor([ 0.,  5., -1.])
"""
from __future__ import annotations

import numpy as np

from . import _creation, _dispatch
from ._dispatch_inplace import _may_share_memory, fill_plain
from ._dispatch import TORCH_TYPE_NAMES, apply, apply_inplace
from ._dispatch_modes import MODES
from ._dispatch_record import view_result
from ._dtype import FLOAT, checked_scalar
from ._dtype import bool as _bool
from ._creation_watchers import WATCHERS
from ._grad_state import GradState
from ._shape import wrap_dim
from ._tensor import Tensor
from .autograd.graph import named
from .ops import indexing as I
from .ops import movement as M
from .amp._cast_mode import autocast_policy
from ._movement_copy import named_fill
from ._indexing_parse import (_ALL, _check_index_shapes, _index_tensor, _on, _parse, _quick_parse, basic_index_name,
                             quick_basic, strip_leading_ones, whole_key)

__all__ = ["index_select", "gather", "scatter", "scatter_add", "scatter_reduce", "index_add", "index_copy",
           "index_fill", "index_put", "masked_fill", "masked_select", "masked_scatter", "take_along_dim", "take",
           "put", "index_reduce"]

_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def _type_name(t):
    return TORCH_TYPE_NAMES[t.dtype.name]


# -- x[key] and x[key] = v (the key read by _indexing_parse.py) -------------------------------------------------------
def _getitem(self, key):
    data = self._data
    if type(data) is np.ndarray and not MODES:  # ``x[i]``, ``x[1:5]``, ``x[:, 0]``: the slice row's view, directly
        if type(key) is int and data.ndim and -data.shape[0] <= key < data.shape[0]:  # (the commonest)
            basic, name = (key % data.shape[0],), "SelectBackward0"
        else:
            basic = quick_basic(data.shape, key)
            name = basic_index_name(key, data.shape) if self._requires_grad and basic is not None else None
        if basic is not None:
            return view_result(M.SLICE, self, M.SLICE.kernel(_dispatch.CPU_XP, data, basic), {"key": basic}, name)
    basic, template, indices = _quick_parse(self, key) or _parse(self, key)
    view = self if basic is None else apply(M.SLICE, self, key=basic)
    if indices:
        return apply(I.INDEX, view, *indices, key=template)
    if view._requires_grad and type(view) is Tensor:
        return named(view, basic_index_name(key, self._data.shape))
    return view


def _setitem(self, key, value):
    if not isinstance(value, (Tensor, int, float, complex, np.number, np.bool_)):
        raise TypeError(f"can't assign a {type(value).__name__} to a {_type_name(self)} tensor")
    if not isinstance(value, Tensor):  # torch converts the value, with its overflow check, before reading the key
        if value.__class__ is int and not -2 ** 63 <= value < 2 ** 63:  # (its setitem reads a Python int as int64)
            raise ValueError("Overflow when unpacking long long")
        half = self.dtype.category == FLOAT and self.dtype.itemsize == 2
        value = checked_scalar(value, self.dtype, "double" if half else None, reduced_floats=False)
        basic = quick_basic(self._data.shape, key)
        if basic is not None and fill_plain(self, value, basic):  # (``x[1:3] = 0.0``: the view's fill)
            return
    basic, template, indices = _quick_parse(self, key) or _parse(self, key)
    view = self if basic is None or whole_key(basic, self._data.shape) else apply(M.SLICE, self, key=basic)
    if isinstance(value, Tensor):
        value = strip_leading_ones(_on(value, self))
    if view is self and not indices:  # ``x[:] = v``, ``x[...] = v``: torch writes x itself, as fill_ or copy_
        if isinstance(value, Tensor):
            shape = self._data.shape
            if not value._data.ndim:
                self.fill_(value)
            else:  # (expanded first, as torch: its errors are expand's)
                self.copy_(value if value._data.shape == shape else value.expand(shape))
        else:  # (the number is checked as setitem checks it; torch fills with it as a 0-d tensor)
            if not getattr(self._data.flags, "writeable", True):
                from .ops.inplace_views import writable_expanded

                writable_expanded(M.COPY, self)  # as below: an expanded target is refused
            named_fill(apply_inplace(M.FILL, self, value, cast_check=False), "FillBackward3")
        return
    if not indices:
        # the value is already checked (fill_ would also check half ranges, which setitem does not)
        if not isinstance(value, Tensor) and not getattr(view._data.flags, "writeable", True):
            from .ops.inplace_views import writable_expanded

            writable_expanded(M.COPY, view)  # torch writes the scalar as copy_ does: overlapping targets refused
        if not isinstance(value, Tensor):
            apply_inplace(M.FILL, view, value, cast_check=False)
        elif not value._data.ndim:  # torch fills with a 0-d value (read first: ``x[1:4] = x[2]`` runs)
            view.fill_(value)
        else:  # a broadcast value is copied expanded, which torch's overlap check lets through (``x[1:4] = x[2:3]``)
            view.copy_(value if value._data.shape == view._data.shape else value.expand(view._data.shape))
        return
    if isinstance(value, Tensor) and value.dtype is not self.dtype:
        # PyTorch casts only on its masked_fill path (one bool mask, the other dims whole, a 1-element value);
        # index_put_ insists.
        if not (len(indices) == 1 and indices[0].dtype is _bool and value.numel() == 1):
            _check_index_shapes(indices)  # torch reports indices that cannot broadcast before the dtypes
            raise RuntimeError(f"Index put requires the source and destination dtypes match, got {_type_name(self)} "
                               f"for the destination and {_type_name(value)} for the source.")
        value = value.reshape(()).to(self.dtype)
    if not (len(indices) == 1 and indices[0].dtype is _bool and (not isinstance(value, Tensor) or value.numel() == 1)):
        _check_no_overlap(view, value, *indices)  # index_put_'s (its masked_fill path reads the value as a number)
    apply_inplace(I.INDEX_PUT, view, value, *indices, key=template, accumulate=False)


# -- shared helpers for the functional forms ---------------------------------------------------------------------------
def _put(self, values, indices, key, accumulate, inplace, negative=True):
    if inplace:
        _check_no_overlap(self, values, *indices)
    run = apply_inplace if inplace else apply
    if negative:  # the default attrs: keep the common rows' attrs minimal
        return run(I.INDEX_PUT, self, values, *indices, key=key, accumulate=accumulate)
    return run(I.INDEX_PUT, self, values, *indices, key=key, accumulate=accumulate, negative=False)


def _check_no_overlap(self, *others):
    """torch's refusal of an in-place index write (scatter_, index_add_, index_put_...) whose source or index shares
    memory with ``self``: raised where both are dense and their memory ranges meet (ATen's full or partial overlap;
    strided views it cannot judge pass, as there)."""
    a = self._data
    if type(a) is not np.ndarray or not a.size:
        return
    owns = a.base is None
    for t in others:
        b = getattr(t, "_data", None)
        # (arrays that both own their memory share none, as `_copy_` reads them; then the bounds, before the flags)
        if type(b) is np.ndarray and b.size and not (owns and b.base is None and b is not a) and _may_share_memory(
                a, b) and (a.flags.c_contiguous or a.flags.f_contiguous) and (
                b.flags.c_contiguous or b.flags.f_contiguous):
            raise RuntimeError("unsupported operation: some elements of the input tensor and the written-to tensor "
                               "refer to a single memory location. Please clone() the tensor before performing the "
                               "operation.")


def _check_index_dtype(index, op, allowed, message, error=RuntimeError):
    if not isinstance(index, Tensor):
        raise TypeError(f"{op}(): argument 'index' must be Tensor, not {type(index).__name__}")
    if index.dtype.name not in allowed:
        raise error(message.format(_type_name(index)))


def _dim_indices(index, dim):
    """Index tensors addressing ``index`` along ``dim`` and each element's own position along the other dims."""
    nd = index._data.ndim
    if type(index._data) is np.ndarray and not WATCHERS:  # traces see the grids made by ``arange``
        return [index if d == dim else Tensor._make(I.grid(n, d, nd)) for d, n in enumerate(index._data.shape)]
    out = []
    for d in range(nd):
        if d == dim:
            out.append(index)
        else:
            shape = [1] * nd
            shape[d] = index._data.shape[d]
            out.append(_creation.arange(shape[d], device=index.device).reshape(shape))
    return out


def _as_vector(t):
    return t.reshape(1) if t._data.ndim == 0 else t


# the nodes the rows and composites of this family record; an in-place write into a view shows CopySlices instead
_OWN_NODES = ("IndexBackward0", "IndexPutBackward0", "ScatterAddBackward0", "ScatterReduceBackward0", "DivBackward0",
              "CopyBackwards")


def _op_named(t, name):
    """``t`` with its grad_fn shown under torch's name for the op (``scatter_add`` records an ``index_put`` row)."""
    # without grad mode an in-place op records nothing: the node there is an earlier op's
    node = t.grad_fn if type(t) is Tensor and GradState.enabled else None
    return named(t, name) if node is not None and type(node).__name__ in _OWN_NODES else t


# -- gather / scatter live in _indexing_scatter.py --------------------------------------------------------------------
from ._indexing_scatter import (  # noqa: E402 - they use the helpers above
    _scatter, _scatter_reduce, gather, index_reduce, scatter, scatter_add, scatter_reduce, take_along_dim,
)


# -- index_* along one dim ---------------------------------------------------------------------------------------------
def _dim_index(self, dim, index, op):
    """(dim key, 1-D index tensor) for the ops indexing one dim with a vector."""
    d = wrap_dim(dim, self._data.ndim, op)
    if index._data.ndim > 1:
        raise IndexError(f"{op}(): Index is supposed to be a vector")
    return (_ALL,) * d + (0,), _on(index if index._data.ndim == 1 else index.reshape(-1), self)


def index_select(input, dim, index):
    """The slices of ``input`` at positions ``index`` (a vector) along ``dim``."""
    _check_index_dtype(index, "index_select", ("int64", "int32"), "index_select(): Expected dtype int32 or int64 for "
                       "index")
    if input._data.ndim == 0:
        if index.numel() != 1:
            raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got {index.numel()} value(s)")
        return index_select(input.reshape(1), 0, index).reshape(())
    key, index = _dim_index(input, dim, index, "index_select")
    try:
        return _op_named(apply(I.INDEX, input, index, key=key, negative=False), "IndexSelectBackward0")
    except I.IndexOutOfBounds:
        raise _index_select_error(input, len(key) - 1, index) from None


def _index_select_error(input, d, index):
    """ATen's error for a bad index: an empty dim of a tensor of 2+ dims, dim 1's own kernel (the first bad value
    and the dim's size, a RuntimeError), else ``index out of range in self``."""
    size = input.shape[d]
    if input.dim() > 1 and size == 0:
        return RuntimeError("index_select(): self indexing axis dim should be positive")
    if input.dim() > 1 and d == 1:
        values = index.cpu().tolist()
        bad = next(v for v in values if not 0 <= v < size)
        return RuntimeError(f"INDICES element is out of DATA bounds, id={bad} axis_dim={size}")
    return IndexError("index out of range in self")


def _index_write(self, dim, index, source, op, accumulate, inplace, alpha=1):
    """index_add / index_copy: write ``source``'s slices at ``index`` along ``dim``."""
    if self._data.ndim == 0:
        out = _index_write(self.reshape(1), dim, index, _as_vector(source), op, accumulate, inplace, alpha)
        return self if inplace else out.reshape(())
    if accumulate:
        _check_index_dtype(index, op, ("int64", "int32"), op + "_(): Expected dtype int32/int64 for index but got: {}")
        if source.dtype is not self.dtype:
            raise RuntimeError(f"{op}_(): self ({_type_name(self)}) and source ({_type_name(source)}) must have the "
                               "same scalar type")
    else:
        _check_index_dtype(index, op, ("int64",), op + "_(): Expected a long tensor for index, but got {}")
        if source.dtype is not self.dtype:
            raise RuntimeError(f"{op}_(): self and source expected to have the same dtype, but got (self) "
                               f"{_type_name(self)} and (source) {_type_name(source)}")
    key, index = _dim_index(self, dim, index, op)
    d = len(key) - 1
    if not accumulate:
        _check_copy_shapes(self, source, index, d)
    source = _as_vector(source) if source._data.ndim == 0 else source
    if source._data.shape[d:d + 1] != index._data.shape:
        raise RuntimeError(f"{op}_(): Number of indices ({index.numel()}) should be equal to source.size(dim): "
                           f"({source._data.shape[d] if source._data.ndim > d else 1}), for dim: {d}")
    if source._data.ndim != self._data.ndim or any(
            k != d and a != b for k, (a, b) in enumerate(zip(self._data.shape, source._data.shape))):
        raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the specified dimension. Got "
                           f"self.shape = {list(self.shape)} source.shape = {list(source.shape)}")
    if alpha != 1:
        if inplace:
            _check_no_overlap(self, source)  # (before the scaled copy below hides it)
        source = source * (alpha if self.is_floating_point() or self.is_complex() else int(alpha))
    if accumulate and self._data.ndim > 1 and not self._data.size:  # ATen adds nothing, reading no index
        index, source = index[:0], source.narrow(d, 0, 0)
    try:
        out = _put(self, _on(source, self), [index], key, accumulate, inplace, negative=False)
        return _op_named(out, "IndexAddBackward0" if accumulate else "IndexCopyBackward0")
    except I.IndexOutOfBounds as e:
        if not accumulate:  # e counts dims of the index key, which may start before dim: name dim itself
            raise IndexError(f"{op}_(): index {e.value} is out of bounds for dimension {d} with size {e.size}") \
                from None
        raise _index_add_error(self, d, index, alpha, e) from None


def _index_add_error(self, d, index, alpha, e):
    """ATen's CPU index_add error: the first or last dim of a 2+-D tensor with int64 indices and alpha 1 goes through
    scatter_add (its RuntimeError naming the value); every other case runs the slice loop (``IndexError``)."""
    if self._data.ndim > 1 and d in (0, self._data.ndim - 1) and alpha == 1 and index.dtype.name == "int64":
        return RuntimeError(f"index {e.value} is out of bounds for dimension {d} with size {e.size}")
    return IndexError("index out of range in self")


def _check_copy_shapes(self, source, index, d):
    """index_copy's shape checks, in torch's order and with its error types."""
    if source._data.ndim and source._data.ndim != self._data.ndim:
        raise IndexError(f"index_copy_(): When source and destination are not scalars, their dimensionality must "
                         f"match. Source dimensionality ({source._data.ndim}), destination dimensionality "
                         f"({self._data.ndim})")
    dest_slice = self._data.shape[:d] + self._data.shape[d + 1:]
    source_slice = source._data.shape[:d] + source._data.shape[d + 1:]
    if dest_slice != source_slice:
        raise RuntimeError(f"index_copy_(): Source/destination tensor must have same slice shapes. Destination slice "
                           f"shape: {' '.join(map(str, dest_slice))} at dimension {d} and source slice shape: "
                           f"{' '.join(map(str, source_slice))} at dimension 0.")
    n = source._data.shape[d] if source._data.ndim else 1
    if index.numel() != n:
        raise IndexError(f"index_copy_(): Number of indices ({index.numel()}) should be equal to source.size(dim) "
                         f"({n}), for dim: {d}")


def index_add(input, dim, index, source, *, alpha=1):
    """``input`` with ``alpha * source`` added at ``index`` along ``dim``; repeated indices accumulate."""
    return _index_write(input, dim, index, source, "index_add", True, False, alpha)


@autocast_policy(cpu="promote")
def index_copy(input, dim, index, source):
    """``input`` with ``source``'s slices copied at ``index`` along ``dim``."""
    return _index_write(input, dim, index, source, "index_copy", False, False)


def _fill_value(self, value, op):
    """``value`` as a 0-d tensor of ``self``'s dtype (keeping its gradient when it is a tensor)."""
    if isinstance(value, Tensor):
        if value._data.ndim:
            raise RuntimeError(f"{op} only supports a 0-dimensional value tensor, but got tensor with "
                               f"{value._data.ndim} dimension(s).")
        return _on(value, self).to(self.dtype)
    if type(self._data) is np.ndarray and not WATCHERS:  # traces see the value made by ``full``
        return Tensor._make(np.full((), checked_scalar(value, self.dtype), dtype=self._data.dtype))
    return _creation.full((), checked_scalar(value, self.dtype), dtype=self.dtype, device=self.device)


def _index_fill(self, dim, index, value, inplace):
    _check_index_dtype(index, "index_fill", ("int64",), "index_fill_(): Expected dtype int64 for index.", IndexError)
    if self._data.ndim == 0:
        out = _index_fill(self.reshape(1), dim, index, value, inplace)
        return self if inplace else out.reshape(())
    key, index = _dim_index(self, dim, index, "index_fill")
    d, size = len(key) - 1, self._data.shape[len(key) - 1]
    # A mask of the hit slices: repeated indices fill once, so a tensor value's gradient counts each slice once.
    try:
        hit = apply(I.INDEX_PUT, _creation.zeros(size, dtype=_bool, device=self.device), True, index, key=(0,),
                    accumulate=False)
    except I.IndexOutOfBounds as e:
        raise IndexError(f"index {e.value} is out of bounds for dimension {d} with size {size}") from None
    mask = hit.reshape((size,) + (1,) * (self._data.ndim - d - 1))
    return _masked_fill_(self, mask, value) if inplace else masked_where(self, mask, value)


def index_fill(input, dim, index, value):
    """``input`` with the slices at ``index`` along ``dim`` set to ``value``."""
    return _index_fill(input, dim, index, value, False)


def _index_put(self, indices, values, accumulate, inplace):
    if not isinstance(values, Tensor):
        raise TypeError(f"index_put(): argument 'values' must be Tensor, not {type(values).__name__}")
    if values.dtype is not self.dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got {_type_name(self)} for "
                           f"the destination and {_type_name(values)} for the source.")
    if len(indices) > self._data.ndim:
        raise IndexError(f"too many indices for tensor of dimension {self._data.ndim} (got {len(indices)})")
    key, tensors = [], []
    for t in indices:
        if t is None:
            key.append(_ALL)
        else:
            key.append(len(tensors))
            tensors.append(_index_tensor(t, self))
    return _put(self, _on(values, self), tensors, tuple(key), accumulate, inplace)


def index_put(input, indices, values, accumulate=False):
    """``input`` with ``values`` written (or, with ``accumulate``, added) at ``input[indices]``."""
    return _index_put(input, indices, values, accumulate, False)


# -- masks and flat positions live in _indexing_masks.py --------------------------------------------------------------
from ._indexing_masks import (  # noqa: E402 - they use the helpers above
    _masked_fill_, _masked_scatter, _put_flat, masked_fill, masked_scatter, masked_select, masked_where, put, take,
)


# -- Tensor methods ----------------------------------------------------------------------------------------------------
_METHODS = {name: globals()[name] for name in __all__}
_METHODS.update(
    __getitem__=_getitem, __setitem__=_setitem,
    scatter_=lambda self, dim, index, src=None, value=None, *, reduce=None: _scatter(
        self, dim, index, value if src is None else src, reduce, True, "scatter_"),
    scatter_add_=lambda self, dim, index, src: _scatter(self, dim, index, src, None, True, "scatter_add_", True),
    scatter_reduce_=lambda self, dim, index, src, reduce, *, include_self=True: _scatter_reduce(
        self, dim, index, src, reduce, include_self, True),
    index_add_=lambda self, dim, index, source, *, alpha=1: _index_write(self, dim, index, source, "index_add", True,
                                                                         True, alpha),
    index_copy_=lambda self, dim, index, source: _index_write(self, dim, index, source, "index_copy", False, True),
    index_fill_=lambda self, dim, index, value: _index_fill(self, dim, index, value, True),
    index_put_=lambda self, indices, values, accumulate=False: _index_put(self, indices, values, accumulate, True),
    masked_fill_=_masked_fill_,
    masked_scatter_=lambda self, mask, source: _masked_scatter(self, mask, source, True),
    put_=lambda self, index, source, accumulate=False: _put_flat(self, index, source, accumulate, True),
)
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
