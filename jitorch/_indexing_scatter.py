"""Gather and scatter: ``gather``, ``scatter``/``scatter_add``/``scatter_reduce``, ``take_along_dim``.

Split from ``_indexing.py`` (which re-exports these); they share its index helpers.

>>> import jitorch
>>> x = jitorch.tensor([[1.0, 2.0], [3.0, 4.0]])
>>> jitorch.gather(x, 1, jitorch.tensor([[1], [0]])).flatten().tolist()
[2.0, 3.0]
"""
from __future__ import annotations

import numpy as np

from . import _creation
from ._creation_watchers import WATCHERS
from ._dispatch import TENSOR_TYPES, apply, apply_inplace, sync_view
from ._dispatch_fast import keep_result
from ._dispatch_modes import MODES
from ._indexing import _REDUCES, _as_vector, _check_index_dtype, _dim_indices, _on, _op_named, _put, _type_name
from ._shape import broadcast_shapes, wrap_dim
from ._tensor import Tensor
from .ops import indexing as I
from .ops import movement as M
from .ops import native_indexed
from .ops import sorting as S

__all__ = ["gather", "scatter", "scatter_add", "scatter_reduce", "take_along_dim",
           "index_reduce"]

# -- gather / scatter --------------------------------------------------------------------------------------------------
_INDEX_DTYPES = ("int64", "int32")


def gather(input, dim, index, *, sparse_grad=False):
    """``out[i][j] = input[index[i][j]][j]`` (for ``dim=0``); the gradient scatters back with accumulation."""
    out = _quick_gather(input, dim, index)  # (an int64 index: the dtype check below passes)
    if out is not None:
        return out
    _check_index_dtype(index, "gather", _INDEX_DTYPES, "gather(): Expected dtype int32/int64 for index, got {}")
    return _gather(input, dim, index, negative=False, quick=False)


def _gather(input, dim, index, negative, quick=True):
    if quick and not negative:
        out = _quick_gather(input, dim, index)
        if out is not None:
            return out
    if input._data.ndim == 0 or index._data.ndim == 0:
        return _gather(_as_vector(input), dim, _as_vector(index), negative).reshape(index.shape)
    nd = input._data.ndim
    d = wrap_dim(dim, nd, "gather")
    if index._data.ndim != nd:
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    for k in range(nd):
        if k != d and index._data.shape[k] > input._data.shape[k]:
            raise RuntimeError(f"Size does not match at dimension {k} expected index {list(index.shape)} to be no "
                               f"larger than self {list(input.shape)} apart from dimension {d}")
    try:
        out = apply(I.INDEX, input, *_dim_indices(_on(index, input), d), key=tuple(range(nd)), negative=negative)
        return _op_named(out, "GatherBackward0")
    except I.IndexOutOfBounds as e:
        raise RuntimeError(str(e)) from None


def _quick_gather(input, dim, index):
    """``gather``'s result for plain CPU tensors when the int64 ``index`` has ``input``'s sizes apart from ``dim`` and
    picks few elements, else None: the ``take_along`` row (a flat take; its node is torch's GatherBackward0) after
    the bounds check, without the INDEX row's grids and broadcast checks (10 of a 32x32 gather's 13 us). Larger
    gathers keep the INDEX row's native kernel; a smaller index (torch reads its corner of ``input``) keeps its
    grids."""
    if MODES or WATCHERS or type(input) not in TENSOR_TYPES or type(index) not in TENSOR_TYPES or type(dim) is not int:
        return None
    if input._base is not None and input._view_ver != input._ver_owner._ver:
        sync_view(input)
    if index._base is not None and index._view_ver != index._ver_owner._ver:
        sync_view(index)
    a, i = input._data, index._data
    if type(a) is not np.ndarray or type(i) is not np.ndarray or i.dtype != _INT64 or not a.flags.c_contiguous \
            or not 0 < i.size < _NATIVE_MIN or not a.size:
        return None
    nd = a.ndim
    if i.ndim != nd or not -nd <= dim < nd:
        return None
    d = dim + nd if dim < 0 else dim
    if a.shape[:d] != i.shape[:d] or a.shape[d + 1:] != i.shape[d + 1:]:
        return None
    if I.largest_unsigned(i) >= a.shape[d]:  # (a negative index is a huge unsigned one)
        try:
            I.check_bounds(i, a.shape[d], d, negative=False)
        except I.IndexOutOfBounds as e:
            raise RuntimeError(str(e)) from None
    # (the row's kernel, `take_along`, on arguments checked here)
    return keep_result(S.TAKE_ALONG, (input, index), {"dim": d}, S.take_checked(a, i, d), input._requires_grad)


_INT64 = np.dtype(np.int64)
_NATIVE_MIN = native_indexed._MIN_ELEMENTS  # from here on the INDEX row's native gather is faster than a flat take


def _scatter_args(self, dim, index, src, op):
    """(wrapped dim, index tensors, values) for the scatter family; ``values`` is a scalar or src cut to index."""
    # torch names every scatter variant "scatter" here
    _check_index_dtype(index, op, _INDEX_DTYPES, "scatter(): Expected dtype int32/int64 for index, got {}")
    nd = self._data.ndim
    d = wrap_dim(dim, nd, op)
    if nd == 1:  # torch counts a 0-d index or src as 1-d (one-hot targets: zeros(10).scatter_(0, tensor(3), 1))
        index = _as_vector(index) if index._data.ndim == 0 else index
        src = _as_vector(src) if isinstance(src, Tensor) and src._data.ndim == 0 else src
    if index._data.ndim != nd:
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    if isinstance(src, Tensor) and src._data.ndim != nd:
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    too_big = any(k != d and i > s for k, (i, s) in enumerate(zip(index._data.shape, self._data.shape)))
    if isinstance(src, Tensor):
        if src.dtype is not self.dtype:
            raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
        if too_big or any(i > s for i, s in zip(index._data.shape, src._data.shape)):
            raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than self {list(self.shape)} "
                               f"apart from dimension {d} and to be no larger size than src {list(src.shape)}")
        src = _on(src, self)
        if src._data.shape != index._data.shape:
            src = apply(M.SLICE, src, key=tuple(slice(0, n) for n in index._data.shape))
    elif too_big:
        raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than self {list(self.shape)} apart "
                           f"from dimension {d}")
    return d, _dim_indices(_on(index, self), d), src


def _scatter(self, dim, index, src, reduce, inplace, op="scatter", accumulate=False):
    if reduce == "multiply":
        return _scatter_reduce(self, dim, index, src, "prod", True, inplace)
    if reduce not in (None, "add"):
        raise RuntimeError(f"{op}(): reduce argument must be either add or multiply, got {reduce}")
    if self._data.ndim == 0:
        view = self.reshape(1)
        out = _scatter(view, dim, _as_vector(index), _as_vector(src) if isinstance(src, Tensor) else src, reduce,
                       inplace, op, accumulate)
        return self if inplace else out.reshape(())
    d, indices, values = _scatter_args(self, dim, index, src, op)
    try:
        out = _put(self, values, indices, tuple(range(len(indices))), accumulate or reduce == "add", inplace, False)
        return _op_named(out, "ScatterAddBackward0" if accumulate else
                         "ScatterBackward0" if isinstance(values, Tensor) else "ScatterBackward1")
    except I.IndexOutOfBounds as e:
        raise RuntimeError(str(e)) from None


def scatter(input, dim, index, src=None, value=None, *, reduce=None):
    """A copy of ``input`` with ``src`` (a tensor, or a scalar ``value``) written at ``index`` along ``dim``."""
    return _scatter(input, dim, index, value if src is None else src, reduce, False)


def scatter_add(input, dim, index, src):
    """``scatter`` that adds into the positions; repeated positions accumulate."""
    return _scatter(input, dim, index, src, None, False, "scatter_add", accumulate=True)


def _scatter_reduce(self, dim, index, src, reduce, include_self, inplace):
    if reduce not in _REDUCES:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    if self._data.ndim == 0:
        out = _scatter_reduce(self.reshape(1), dim, _as_vector(index), _as_vector(src), reduce, include_self, inplace)
        return self if inplace else out.reshape(())
    d, indices, src = _scatter_args(self, dim, index, src, "scatter_reduce")
    index = indices[d]
    if reduce == "mean" and self.dtype.name == "bool":  # the composite below would fail in an unrelated division
        raise NotImplementedError('"scatter_gather_tensor_cpu_reduce_mean" not implemented for \'Bool\'')
    if reduce in ("sum", "mean"):
        base = self if include_self else self.scatter(d, index, 0)
        total = base.scatter_add(d, index, src)
        if reduce == "mean":
            count = _creation.ones_like(self)
            count = (count if include_self else count.scatter(d, index, 0)).scatter_add(d, index,
                                                                                        _creation.ones_like(src))
            total = total / count if self.is_floating_point() or self.is_complex() else \
                total.div(count, rounding_mode="floor")
        return _op_named(self.copy_(total) if inplace else total, "ScatterReduceBackward0")
    run = apply_inplace if inplace else apply
    try:
        return run(I.SCATTER_REDUCE, self, index, src, dim=d, reduce=reduce, include_self=include_self)
    except I.IndexOutOfBounds as e:
        raise RuntimeError(str(e)) from None


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """Reduce ``src`` into ``input`` at ``index`` along ``dim`` with sum, prod, mean, amax or amin."""
    return _scatter_reduce(input, dim, index, src, reduce, include_self, False)


def take_along_dim(input, indices, dim=None):
    """``gather`` after broadcasting ``input`` and ``indices`` against each other except along ``dim``."""
    _check_index_dtype(indices, "take_along_dim", ("int64",),
                       "torch.take_along_dim(): dtype of indices should be Long but got {}")
    if dim is None:  # unlike gather, negative indices wrap
        return _gather(input.reshape(-1), 0, indices.reshape(-1), True)
    if input._data.ndim != indices._data.ndim:
        raise RuntimeError(f"torch.take_along_dim(): input and indices should have the same number of dimensions, but "
                           f"got {input._data.ndim} dimensions for input, and {indices._data.ndim} dimensions for "
                           "indices")
    d = wrap_dim(dim, input._data.ndim, "take_along_dim")
    sizes = list(input._data.shape)
    sizes[d] = indices._data.shape[d]
    shape = list(broadcast_shapes(tuple(sizes), indices._data.shape, op="take_along_dim"))
    if indices._data.shape != tuple(shape):  # (an expand to its own shape would only add a node)
        indices = indices.expand(shape)
    shape[d] = input._data.shape[d]
    return _gather(input if input._data.shape == tuple(shape) else input.expand(shape), d, indices, True)


_INDEX_REDUCES = ("prod", "mean", "amax", "amin")


def _index_reduce(self, dim, index, source, reduce, include_self, inplace):
    """index_reduce as the scatter_reduce of ``source`` with ``index`` spread over its other dims."""
    if reduce not in _INDEX_REDUCES:
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.")
    _check_index_dtype(index, "index_reduce", ("int64", "int32"),
                       "index_reduce_(): Expected dtype int32/int64 for index but got: {}")
    if source.dtype is not self.dtype:
        raise RuntimeError(f"index_reduce_(): self ({_type_name(self)}) and source ({_type_name(source)}) must have "
                           "the same scalar type")
    if self._data.ndim == 0:
        out = _index_reduce(self.reshape(1), dim, index, _as_vector(source), reduce, include_self, inplace)
        return self if inplace else out.reshape(())
    d = wrap_dim(dim, self._data.ndim, "index_reduce")
    source = _as_vector(source) if source._data.ndim == 0 else source
    index = _as_vector(index) if index._data.ndim == 0 else index
    if index._data.ndim != 1 or source._data.ndim != self._data.ndim or source._data.shape[d] != index._data.size:
        raise IndexError(f"index_reduce_(): Index should have dimension 1 and as many elements as source.size({d}) "
                         f"({source._data.shape[d] if source._data.ndim > d else 1}), but got index of shape "
                         f"{list(index.shape)}")
    if any(k != d and a != b for k, (a, b) in enumerate(zip(self._data.shape, source._data.shape))):
        raise RuntimeError(f"index_reduce_(): self and source must have the same shape except at dim {d}, but got "
                           f"self.shape = {list(self.shape)} source.shape = {list(source.shape)}")
    spread = index.long().reshape([-1 if k == d else 1 for k in range(source._data.ndim)]).expand(source.shape)
    return _op_named(_scatter_reduce(self, d, spread, source, reduce, include_self, inplace), "IndexReduceBackward0")


def index_reduce(input, dim, index, source, reduce, *, include_self=True):
    """``input`` with ``source``'s slices reduced (prod, mean, amax, amin) into the slices ``index`` names."""
    return _index_reduce(input, dim, index, source, reduce, include_self, False)


Tensor.index_reduce_ = lambda self, dim, index, source, reduce, *, include_self=True: _index_reduce(
    self, dim, index, source, reduce, include_self, True)
