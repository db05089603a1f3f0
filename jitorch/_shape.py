"""Pure shape arithmetic: dim wrapping, ``-1`` inference, broadcasting, and when a reshape can be a view.

>>> from jitorch._shape import view_strides, broadcast_shapes
>>> view_strides((2, 3), (1, 2), (6,)) is None   # a transposed 2x3 cannot be flattened without a copy
True
>>> broadcast_shapes((3, 1), (4,))
(3, 4)
"""
from __future__ import annotations

import operator

from .runtime.meta import contiguous_strides as _contiguous_strides

__all__ = ["wrap_dim", "wrap_dims", "infer_shape", "broadcast_shapes", "view_strides", "normalize_shape", "int_sizes",
           "quick_infer"]


def wrap_dim(dim, ndim, op="op"):
    """``dim`` in ``[-ndim, ndim)`` mapped to ``[0, ndim)``; a 0-d tensor accepts -1 and 0."""
    if type(dim) is int and -ndim <= dim < ndim:  # (the common call: a plain int in range)
        return dim + ndim if dim < 0 else dim
    try:
        dim = operator.index(dim)
    except TypeError:
        raise TypeError(f"{op}: dim must be an int, got {type(dim).__name__}") from None
    lo, hi = (-1, 0) if ndim == 0 else (-ndim, ndim - 1)
    if not lo <= dim <= hi:
        raise IndexError(f"{op}: Dimension out of range (expected to be in range of [{lo}, {hi}], but got {dim})")
    return dim % ndim if ndim else 0


def wrap_dims(dims, ndim, op="op"):
    """A tuple of wrapped, distinct dims (``None`` means all)."""
    if type(dims) is int and -ndim <= dims < ndim:  # (the common call: one plain int in range)
        return (dims + ndim if dims < 0 else dims,)
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, (list, tuple)):
        out = tuple(wrap_dim(d, ndim, op) for d in dims)
        if len(set(out)) != len(out):
            raise RuntimeError(f"{op}: dim {list(dims)} appears multiple times in the list of dims")
        return out
    return (wrap_dim(dims, ndim, op),)


def normalize_shape(args, op="op"):
    """``f(2, 3)``, ``f((2, 3))``, ``f([2, 3])`` and ``f(Size)`` all mean the shape ``(2, 3)``."""
    if len(args) == 1 and type(args[0]) is tuple:
        args = args[0]
        if all(type(s) is int for s in args):  # the common case needs no conversion
            return args
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = args[0]
    elif len(args) == 1 and hasattr(args[0], "tolist") and not isinstance(args[0], int):
        listed = args[0].tolist()  # a NumPy integer or a 0-d tensor gives one number: one size (torch's __index__)
        args = listed if isinstance(listed, list) else (args[0],)
    try:
        return tuple(operator.index(s) for s in args)
    except TypeError:
        raise TypeError(f"{op}: size must be a sequence of ints, got {args!r}") from None


def int_sizes(args):
    """`normalize_shape`'s answer for the common spellings (``f(2, 3)``, ``f((2, 3))``, ``f([2, 3])``, ``f(Size)``)
    of plain ints, without its conversions; None for anything else (the general path converts or raises)."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = args[0]
    for s in args:
        if type(s) is not int:
            return None
    return args if type(args) is tuple else tuple(args)


def quick_infer(shape, numel):
    """`infer_shape`'s answer for a tuple of ints ``shape`` with at most one ``-1`` that fits ``numel`` elements;
    None for anything it would refuse (it then raises torch's error)."""
    if shape == (-1,):  # (flattening: the commonest)
        return (numel,)
    known = 1
    free = -1
    for i, s in enumerate(shape):
        if s >= 0:
            known *= s
        elif s == -1 and free < 0:
            free = i
        else:
            return None
    if free < 0:
        return shape if known == numel else None
    if not known or numel % known:
        return None
    return shape[:free] + (numel // known,) + shape[free + 1:]


def sizes_or_keyword(args, keyword, op, name="size"):
    """Positional sizes (``zeros(2, 3)``) or torch's keyword for them (``zeros(size=(2, 3))``), never both."""
    if keyword is None:
        return args
    if args:
        raise TypeError(f"{op}() got multiple values for argument '{name}'")
    return (keyword,)


def infer_shape(shape, numel, op="view"):
    """Resolve one ``-1`` in ``shape`` against ``numel`` elements."""
    if -1 not in shape and min(shape, default=0) >= 0:
        known = 1
        for s in shape:
            known *= s
        if known == numel:
            return tuple(shape)
    unknown = [i for i, s in enumerate(shape) if s == -1]
    if len(unknown) > 1:
        raise RuntimeError(f"{op}: only one dimension can be inferred")
    if any(s < -1 for s in shape):
        raise RuntimeError(f"{op}: invalid shape dimension {min(shape)}")
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    if unknown:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape = tuple(numel // known if s == -1 else s for s in shape)
    elif known != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return tuple(shape)


def broadcast_shapes(*shapes, op="broadcast_shapes"):
    """The shape that all ``shapes`` broadcast to; raises naming the shapes otherwise."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, n in enumerate(s, ndim - len(s)):
            if n != 1:
                if out[i] != 1 and out[i] != n:
                    raise RuntimeError(f"{op}: shapes {' and '.join(str(tuple(x)) for x in shapes)} are not "
                                       "broadcastable")
                out[i] = n
    return tuple(out)


def torch_broadcast_shapes(shapes):
    """``torch.broadcast_shapes`` of int or sequence ``shapes`` as a list, with torch's errors (which name the first
    argument that does not fit the shape of those before it)."""
    result = [1] * max((1 if isinstance(s, int) else len(s) for s in shapes), default=0)
    for j, shape in enumerate(shapes):
        sizes = (shape,) if isinstance(shape, int) else tuple(shape)
        for i in range(-1, -1 - len(sizes), -1):
            n = sizes[i]
            if n < 0:
                raise ValueError("Attempting to broadcast a dimension with negative length!")
            if n == 1 or n == result[i]:
                continue
            if result[i] != 1:
                raise RuntimeError(f"Attempting to broadcast a dimension of length {n} at {i}! Mismatching argument at "
                                   f"index {j} had {shape}; but expected shape should be broadcastable to {result}")
            result[i] = n
    return result


def raise_tensors_not_broadcastable(shapes):
    """ATen's error of ``broadcast_tensors``: the shapes folded pairwise, the first pair that clashes named as a, b."""
    a = ()
    for b in shapes:
        ndim = max(len(a), len(b))
        a_full, b_full = (1,) * (ndim - len(a)) + tuple(a), (1,) * (ndim - len(b)) + tuple(b)
        for i, (x, y) in enumerate(zip(a_full, b_full)):
            if x != y and x != 1 and y != 1:
                raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b ({y}) at "
                                   f"non-singleton dimension {i}")
        a = tuple(y if x == 1 else x for x, y in zip(a_full, b_full))


def view_strides(shape, strides, new_shape):
    """Strides for viewing (shape, strides) as ``new_shape`` without copying, or ``None`` if that is impossible.

    Dimensions are grouped into runs that are contiguous with each other; a new dimension may not straddle two runs.
    """
    numel = 1
    for s in shape:
        numel *= s
    if numel == 0 or not shape:
        return _contiguous_strides(new_shape)
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = strides[-1]
    tensor_numel = 1
    view_numel = 1
    for tensor_d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[tensor_d]
        if tensor_d == 0 or (shape[tensor_d - 1] != 1 and strides[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = strides[tensor_d - 1]
                tensor_numel = 1
                view_numel = 1
    if view_d != -1:
        return None
    return tuple(new_strides)


