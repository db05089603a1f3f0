"""Joining tensors into new memory, as PyTorch's: ``cat`` (and its names ``concat``/``concatenate``), ``stack``,
the ``hstack``/``vstack``/``dstack``/``column_stack`` family and the ``atleast_*d`` they build on; a quick path for
plain CPU tensors of one dtype, torch's checks, type promotion and memory format otherwise.

Split from ``_movement_copy.py``, which re-exports them (and ``_movement.py`` in turn).

>>> import jitorch
>>> x = jitorch.arange(4).reshape(2, 2)
>>> jitorch.stack([x, x]).shape, jitorch.hstack([x, x]).tolist()
(jitorch.Size([2, 2, 2]), [[0, 1, 0, 1], [2, 3, 2, 3]])
"""
from __future__ import annotations

import functools

import numpy as np

from . import _dispatch
from . import _memory_format as MF
from ._dispatch import TENSOR_TYPES, TORCH_TYPE_NAMES, apply, sync_view
from ._dispatch_fast import keep_result
from ._dispatch_inplace import refuse_internal_overlap, refuse_operand_overlap
from ._dispatch_modes import MODES
from ._dtype import promote_types
from ._out_variants import check_out_tensor
from ._shape import wrap_dim
from ._tensor import Tensor
from .autograd.grad_mode import GradState
from .autograd.graph import named
from .ops import movement as M
# _movement imports _movement_copy, and so this module, at its end, once these are defined.
from ._movement import _flat, unsqueeze


def _quick_join(op, tensors, dim, stacking):
    """The ``cat`` (``stacking`` false) or ``stack`` row's result for plain CPU tensors of one dtype whose shapes
    fit, else None: the general path then checks, promotes and names what is wrong. A cat of
    two 10x10 tensors spent three quarters of its 8 us in those checks and the dispatcher's; torch's call: 2.6 us."""
    if MODES or (type(tensors) is not list and type(tensors) is not tuple) or not tensors:
        return None
    first = tensors[0]
    if type(first) not in TENSOR_TYPES:
        return None
    data = first._data
    if type(data) is not np.ndarray:
        return None
    shape = data.shape
    ndim = len(shape) + stacking
    if type(dim) is not int or not -ndim <= dim < ndim or ndim == 0:
        return None
    d = dim + ndim if dim < 0 else dim
    if not stacking and ndim == 1 and shape[0] == 0:  # a legacy empty: skipped, though promoted with (general path)
        return None
    # channels-last inputs take the cat of views (see stack); a cat's other layouts, ATen's format rule (`_cat_format`)
    contiguous = not stacking or ndim in (5, 6)
    dtype = data.dtype
    arrays = []
    grad = False
    for t in tensors:
        if type(t) not in TENSOR_TYPES:
            return None
        if t._base is not None and t._view_ver != t._ver_owner._ver:
            sync_view(t)
        a = t._data
        if type(a) is not np.ndarray or a.dtype is not dtype and a.dtype != dtype:  # mixed: the general path promotes
            return None
        s = a.shape  # (other sizes only along d: the general path names what is wrong)
        if s != shape and (stacking or len(s) != ndim or s[:d] != shape[:d] or s[d + 1:] != shape[d + 1:]
                           or ndim == 1 and s[0] == 0) or contiguous and not a.flags.c_contiguous:
            return None
        if t._requires_grad:
            grad = True
        arrays.append(a)
    attrs = {"dim": d}
    return keep_result(op, tuple(tensors), attrs, op.kernel(_dispatch.CPU_XP, *arrays, **attrs), grad)


def cat(tensors, dim=0, *, out=None):
    if out is None:
        result = _quick_join(M.CAT, tensors, dim, False)
        if result is not None:
            return result
    else:
        check_out_tensor(out, "cat")
    tensors = _tensor_list(tensors, "cat")
    if not tensors:
        raise ValueError("jitorch.cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if t._data.ndim == 0:
            raise RuntimeError(f"cat(): zero-dimensional tensor (at position {i}) cannot be concatenated; use "
                               "torch.stack, or reshape it to (1,) first")
    # PyTorch skips legacy 1-D empty tensors, whatever the other shapes; when all are such, it wraps no dim.
    kept = [t for t in tensors if not (t._data.ndim == 1 and t._data.shape[0] == 0)]
    if not kept:
        kept, dim = tensors[:1], 0
    ref = kept[0]
    d = wrap_dim(dim, ref._data.ndim, "cat")
    for i, t in enumerate(kept):
        if t._data.ndim != ref._data.ndim:
            raise RuntimeError(f"cat(): Tensors must have same number of dimensions: got {ref._data.ndim} and "
                               f"{t._data.ndim}")
        for ax, (a, b) in enumerate(zip(ref._data.shape, t._data.shape)):
            if ax != d and a != b:
                raise RuntimeError(f"cat(): Sizes of tensors must match except in dimension {d}. Expected size {a} but "
                                   f"got size {b} for tensor number {i} in the list.")
    fmt = _cat_format(kept)
    if len(kept) < len(tensors) and GradState.enabled and any(t._requires_grad for t in tensors):
        # A skipped empty that requires grad still makes torch's result require grad (its gradient is empty):
        # joined as an empty slab of the result's shape, it takes part in the graph.
        slab = tuple(0 if ax == d else n for ax, n in enumerate(ref._data.shape))
        kept = [t if t._data.ndim == ref._data.ndim or t._data.shape[0] else t.reshape(slab) for t in tensors]
    result = apply(M.CAT, *kept, dim=d) if fmt is None else apply(M.CAT, *kept, dim=d, fmt=fmt)
    if len(kept) < len(tensors):
        # The skipped empties still take part in the type promotion (a float accumulator started as tensor([])).
        promoted = functools.reduce(promote_types, (t.dtype for t in tensors))
        if promoted != result.dtype:
            result = result.to(promoted)
    if out is not None:
        from ._pointwise import _write_out

        if result.dtype.category > out.dtype.category:  # torch's cat says so with a TypeError of its own
            raise TypeError(f"cat(): input types can't be cast to the desired output type "
                            f"{TORCH_TYPE_NAMES[out.dtype.name]}; pass an out tensor of dtype {result.dtype}")
        # ATen's cat refuses an out sharing memory with any input, even an input that is out itself (an out of
        # another shape too: resized within its storage first).
        refuse_internal_overlap("cat", out._data)
        refuse_operand_overlap(out, tensors, full_too=True)
        return _write_out(result, out, "cat")
    return result


def concat(tensors, dim=0, *, out=None):
    """``cat`` under the name torch's errors then use.

    >>> import jitorch
    >>> jitorch.concat([jitorch.ones(1), jitorch.zeros(1)]).tolist()
    [1.0, 0.0]
    """
    _check_sequence(tensors, "concat")
    if out is not None:
        check_out_tensor(out, "concat")
    return cat(tensors, dim, out=out)


def concatenate(tensors, dim=0, *, out=None):
    """``cat`` under the name torch's errors then use (NumPy's).

    >>> import jitorch
    >>> jitorch.concatenate((jitorch.ones(1), jitorch.zeros(1))).tolist()
    [1.0, 0.0]
    """
    _check_sequence(tensors, "concatenate")
    if out is not None:
        check_out_tensor(out, "concatenate")
    return cat(tensors, dim, out=out)


def _cat_format(tensors):
    """ATen's memory format for a cat's result: the inputs' common suggested format, else ``contiguous_format``;
    None for C-contiguous inputs, whose NumPy concatenate is row-major already (a transposed input's would not be)."""
    if all(t._data.flags.c_contiguous for t in tensors):
        return None
    found = None
    for t in tensors:
        fmt = MF.suggested_format(t)
        if fmt is MF.contiguous_format or found is not None and fmt is not found:
            return MF.contiguous_format
        found = fmt
    return found


def _c_type_name(kind):
    """A type's name as torch's argument parser prints it: dotted for extension types (numpy.ndarray,
    collections.deque), bare for builtins and Python classes (heap types)."""
    heap = kind.__flags__ & (1 << 9)
    return kind.__name__ if heap or kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"


def _check_sequence(tensors, op):
    """torch's TypeError for a ``tensors`` argument that is not a list or tuple: a Tensor (iterating would silently
    unbind it, ``default_collate(tensor)`` say), a generator, a set, ..."""
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{op}(): argument 'tensors' (position 1) must be tuple of Tensors, not "
                        f"{_c_type_name(type(tensors))}")


def _tensor_list(tensors, op):
    """``tensors`` as a list, refusing other containers and entries with torch's TypeError (a collate of mixed
    items)."""
    _check_sequence(tensors, op)
    tensors = list(tensors)
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got {_c_type_name(type(t))}")
    return tensors


def _nonempty_list(tensors, op, out=None):
    """`_tensor_list`, and torch's error for an empty one (stack and the h/v/d/column stacks); its refusal of an
    ``out`` that is not a tensor."""
    if out is not None:
        check_out_tensor(out, op)
    tensors = _tensor_list(tensors, op)
    if not tensors:
        raise RuntimeError(f"{op} expects a non-empty TensorList")
    return tensors


def stack(tensors, dim=0, *, out=None):
    if out is None:
        result = _quick_join(M.STACK, tensors, dim, True)
        if result is not None:
            return result
    else:
        check_out_tensor(out, "stack")
    tensors = _nonempty_list(tensors, "stack")
    shape = tensors[0]._data.shape
    for i, x in enumerate(tensors):
        if x._data.shape != shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(shape)} at entry 0 and "
                               f"{list(x.shape)} at entry {i}")
    d = wrap_dim(dim, len(shape) + 1, "stack")
    # One row for row-major inputs and inputs of other ranks (a permuted image stacks row-major, as torch's); a
    # non-contiguous 4-D/5-D input (channels-last) takes ATen's composite, whose layout is cat's (`_cat_format`):
    # a cat along ``d`` viewed with the new dim split off, or along a new last dim a cat of unsqueezed views.
    if out is None and not MODES and (len(shape) not in (4, 5) or all(x._data.flags.c_contiguous for x in tensors)):
        return apply(M.STACK, *tensors, dim=d)
    if out is None and d < len(shape):
        return named(cat(tensors, d).view(shape[:d] + (len(tensors),) + shape[d:]), "StackBackward0")
    return named(cat([unsqueeze(x, d) for x in tensors], d, out=out), "StackBackward0")


def atleast_1d(*tensors):
    out = [x.reshape(1) if x._data.ndim == 0 else x for x in _flat(tensors)]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_2d(*tensors):
    out = [x.reshape(1, -1) if x._data.ndim < 2 else x for x in _flat(tensors)]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_3d(*tensors):
    out = []
    for x in _flat(tensors):
        if x._data.ndim == 0:
            x = x.reshape(1, 1, 1)
        elif x._data.ndim == 1:
            x = x.reshape(1, -1, 1)
        elif x._data.ndim == 2:
            x = x.unsqueeze(-1)
        out.append(x)
    return out[0] if len(out) == 1 else tuple(out)


def hstack(tensors, *, out=None):
    tensors = _nonempty_list(tensors, "hstack", out)
    tensors = atleast_1d(*tensors)
    tensors = [tensors] if isinstance(tensors, Tensor) else tensors
    return cat(tensors, 0 if tensors[0]._data.ndim == 1 else 1, out=out)


def vstack(tensors, *, out=None):
    tensors = _nonempty_list(tensors, "vstack", out)
    t2 = atleast_2d(*tensors)
    return cat([t2] if isinstance(t2, Tensor) else t2, 0, out=out)


def dstack(tensors, *, out=None):
    tensors = _nonempty_list(tensors, "dstack", out)
    t3 = atleast_3d(*tensors)
    return cat([t3] if isinstance(t3, Tensor) else t3, 2, out=out)


def column_stack(tensors, *, out=None):
    tensors = _nonempty_list(tensors, "column_stack", out)
    return hstack([x.reshape(-1, 1) if x._data.ndim <= 1 else x for x in tensors], out=out)
