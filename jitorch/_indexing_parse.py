"""Reading a subscript: ``x[key]``'s key as a view key, an ``index`` row key template and index tensors.

Split from ``_indexing.py`` (which uses these for ``__getitem__``/``__setitem__`` and the index_* ops).
`_quick_parse` answers the common keys (``x[idx]``, ``x[:, idx]``) without the general `_parse`.

>>> import jitorch
>>> x = jitorch.arange(12.0).reshape(3, 4)
>>> basic, template, indices = _parse(x, (slice(1, None), [0, 2]))
>>> basic, template, [t.tolist() for t in indices]
((slice(1, 3, 1), slice(None, None, None)), (slice(None, None, None), 0), [[0, 2]])
"""
from __future__ import annotations

import operator

import numpy as np

from . import _creation
from ._dtype import bool as _bool
from ._dtype import int64 as _int64
from ._tensor import Tensor

_ALL = slice(None)


def _on(t, like):
    if type(t._data) is np.ndarray and type(like._data) is np.ndarray:
        return t
    return t if t.device == like.device else t.to(like.device)


def _index_tensor(t, like):
    if t.dtype.name not in ("int64", "int32", "uint8", "bool"):
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    return _on(t.bool() if t.dtype.name == "uint8" else t, like)  # PyTorch's legacy byte masks


def _classify(item, like):
    """(kind, value): kind is int, slice, none, ellipsis, bool (a 0-d mask) or tensor (an index tensor)."""
    if item is None:
        return "none", None
    if item is Ellipsis:
        return "ellipsis", None
    if isinstance(item, (bool, np.bool_)):
        return "bool", bool(item)
    if isinstance(item, slice):
        return "slice", item
    if isinstance(item, (int, np.integer)):
        return "int", operator.index(item)
    if isinstance(item, Tensor):
        if item._data.ndim == 0 and item._data.dtype.kind in "iub":
            # 0-d integer tensors select (a view), 0-d bool tensors mask, as in PyTorch.
            return ("bool", bool(item)) if item._data.dtype.kind == "b" or item.dtype.name == "uint8" else \
                ("int", int(item))
        return "tensor", _index_tensor(item, like)
    if isinstance(item, (list, tuple, np.ndarray, range)):
        arr = np.asarray(item)
        if arr.dtype.kind == "b" or arr.dtype == np.uint8:
            arr = arr.astype(np.bool_)
        elif arr.dtype.kind in "iuf" or arr.size == 0:
            arr = arr.astype(np.int64)  # PyTorch truncates float sequences used as indices
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are "
                             f"valid indices (got {type(item).__name__})")
        if arr.ndim == 0:
            return ("bool", bool(arr)) if arr.dtype.kind == "b" else ("int", int(arr))
        return "tensor", _creation.tensor(arr, device=like.device)
    if hasattr(item, "__index__") and not isinstance(item, float):
        return "int", operator.index(item)
    raise IndexError("only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid "
                     f"indices (got {type(item).__name__})")


def _as_items(key):
    if type(key) is tuple:
        return key
    # PyTorch (and old NumPy) read a short list holding slices, sequences, tensors, None or ... as a tuple.
    if type(key) is list and len(key) < 32 and any(
            isinstance(k, (Tensor, list, tuple, slice, np.ndarray)) or k is None or k is Ellipsis for k in key):
        return tuple(key)
    return (key,)


def _norm_slice(s, size):
    if s.step is not None and operator.index(s.step) < 0:
        raise ValueError("step must be greater than zero")
    start, stop, step = s.indices(size)
    return slice(start, max(start, stop), step), len(range(start, stop, step))


def _parse(x, key):
    """(basic key for the ``slice`` view row or None, key template for the ``index`` rows, index tensors)."""
    items = [_classify(k, x) for k in _as_items(key)]
    shape = x._data.shape
    nd = len(shape)
    consumed = 0
    for kind, v in items:
        if kind in ("int", "slice"):
            consumed += 1
        elif kind == "tensor":
            consumed += v._data.ndim if v._data.dtype == np.bool_ else 1
    if consumed > nd:
        if nd == 0 and any(kind == "int" for kind, _ in items):
            raise IndexError("invalid index of a 0-dim tensor. Use `tensor.item()` in Python or `tensor.item<T>()` in "
                             "C++ to convert a 0-dim tensor to a number")
        raise IndexError(f"too many indices for tensor of dimension {nd}")
    basic, template, indices, vshape, masks = [], [], [], [], []
    dim = 0
    for position, (kind, v) in enumerate(items):
        if kind == "int":
            size = shape[dim]
            if not -size <= v < size:  # torch names the item's place in the key, not the dim it indexes
                raise IndexError(f"index {v} is out of bounds for dimension {position} with size {size}")
            basic.append(v + size if v < 0 else v)
            dim += 1
            continue
        if kind == "slice":
            s, n = _norm_slice(v, shape[dim])
            basic.append(s)
            vshape.append(n)
            template.append(_ALL)
            dim += 1
        elif kind == "ellipsis":  # PyTorch accepts several; the first one takes all the unnamed dims
            n = min(nd - consumed, nd - dim)
            basic += [_ALL] * n
            template += [_ALL] * n
            vshape += shape[dim:dim + n]
            dim += n
        elif kind in ("none", "bool"):
            basic.append(None)
            vshape.append(1)
            if kind == "none":
                template.append(_ALL)
            else:  # ``x[True]`` is a 1-element mask over a new unit dim
                template.append(len(indices))
                # as torch: an index (not a mask), so it never takes setitem's masked_fill path
                indices.append(_creation.tensor([0] if v else [], dtype=_int64, device=x.device))
        else:
            k = v._data.ndim if v._data.dtype == np.bool_ else 1
            if v._data.dtype == np.bool_:
                masks.append((v, len(vshape)))
            basic += [_ALL] * k
            vshape += shape[dim:dim + k]
            template.append(len(indices))
            indices.append(v)
            dim += k
    vshape += shape[dim:]
    for mask, at in masks:
        for j, n in enumerate(mask._data.shape):
            if vshape[at + j] != n:
                raise IndexError(f"The shape of the mask {list(mask.shape)} at index {j} does not match the shape of "
                                 f"the indexed tensor {list(vshape)} at index {at + j}")
    while template and template[-1] == _ALL:
        template.pop()
    if indices and all(b == _ALL for b in basic):
        return None, tuple(template), indices
    return tuple(basic), tuple(template), indices


def quick_basic(shape, key):
    """`_parse`'s view key for the commonest keys of an array of ``shape``: an int in range (or a 0-d integer CPU
    tensor but uint8, which torch reads as one), a slice of int or None bounds and a positive step, None, or a
    tuple of them with at most one Ellipsis; None for any other key (the general parse then reads it, or raises)."""
    items = key if type(key) is tuple else (key,)
    if not items:
        return None
    basic = []
    nd, dim = len(shape), 0
    for at, k in enumerate(items):
        if type(k) is Tensor and type(k._data) is np.ndarray and not k._data.ndim and (
                k._data.dtype.kind == "i" or k._data.dtype.kind == "u" and k._data.dtype.itemsize > 1):
            k = int(k._data)  # (uint8, like bool, is a mask to torch)
        if type(k) is int:
            if dim == nd or not -shape[dim] <= k < shape[dim]:
                return None
            basic.append(k + shape[dim] if k < 0 else k)
            dim += 1
        elif type(k) is slice and (k.start is None or type(k.start) is int) and (
                k.stop is None or type(k.stop) is int) and (k.step is None or type(k.step) is int and k.step > 0):
            if dim == nd:
                return None
            start, stop, step = k.indices(shape[dim])
            basic.append(slice(start, max(start, stop), step))
            dim += 1
        elif k is None:
            basic.append(None)
        elif k is Ellipsis:  # the dims the items after it do not take; a second Ellipsis is the parser's error
            rest = items[at + 1:]
            if any(r is Ellipsis for r in rest):
                return None
            spanned = nd - dim - sum(r is not None for r in rest)
            if spanned < 0:
                return None
            basic.extend([_ALL] * spanned)
            dim += spanned
        else:
            return None
    return tuple(basic)


def _quick_parse(self, key):
    """`_parse`'s answer for the common keys, ``x[idx]`` and ``x[:, ..., :, idx]`` with ``idx`` an integer tensor or
    a bool mask (of the indexed dims' shape) of the same (CPU) device; None for any other key."""
    if type(key) is tuple:
        if len(key) > self._data.ndim or len(key) < 2:
            return None
        *whole, index = key
        if any(type(k) is not slice or k != _ALL for k in whole):
            return None
    else:
        index, whole = key, ()
    if type(index) is not Tensor or type(index._data) is not np.ndarray or type(self._data) is not np.ndarray:
        return None
    nd, at = index._data.ndim, len(whole)
    if not nd or not self._data.ndim:
        return None
    if index._data.dtype not in _QUICK_INDEX and (  # a mask must cover dims of its own shape
            index._data.dtype != np.bool_ or self._data.shape[at:at + nd] != index._data.shape):
        return None
    return None, (_ALL,) * at + (0,), [index]


_QUICK_INDEX = (np.dtype(np.int64), np.dtype(np.int32))


def _check_index_shapes(indices):
    shapes = []
    for t in indices:  # a k-d mask indexes like its k nonzero() columns
        shapes += [(int(t.count_nonzero()),)] * t._data.ndim if t.dtype is _bool else [tuple(t._data.shape)]
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes "
                         + ", ".join(str(list(s)) for s in shapes)) from None


def basic_index_name(key, shape):
    """torch applies a basic index item by item (select, slice, unsqueeze); its grad_fn is the last one's. Inside a
    tuple a slice over a whole dim is no op to torch, so the name is the item before it (or AliasBackward0 if none);
    a lone slice always slices."""
    if type(key) is not tuple:
        return "UnsqueezeBackward0" if key is None else "SliceBackward0" if isinstance(key, slice) else \
            "AliasBackward0" if key is Ellipsis else "SelectBackward0"
    named_items, dim = [], 0
    for at, item in enumerate(key):
        if item is Ellipsis:
            dim = len(shape) - sum(k is not None and k is not Ellipsis for k in key[at + 1:])
        elif item is None:
            named_items.append("UnsqueezeBackward0")
        elif isinstance(item, slice):
            n = shape[dim] if dim < len(shape) else 0
            start, stop, step = item.indices(n)
            named_items.append(None if (start, max(start, stop), step) == (0, n, 1) else "SliceBackward0")
            dim += 1
        else:
            named_items.append("SelectBackward0")
            dim += 1
    return next((name for name in reversed(named_items) if name is not None), "AliasBackward0")


def whole_key(basic, shape):
    """Whether the view key ``basic`` is every dim whole, no view at all to torch (its slices over a whole dim are
    no ops)."""
    return all(type(b) is slice and b.indices(n) == (0, n, 1) for b, n in zip(basic, shape))


def strip_leading_ones(v):
    """A setitem value without its leading size-1 dims (torch's ``slicePrefix1sSize``: ``x[0] = ones(1, 3)``)."""
    shape = v._data.shape
    k = 0
    while k < len(shape) and shape[k] == 1:
        k += 1
    return v.reshape(shape[k:]) if k else v
