"""Argument checks of the creation and sampling functions (``_creation``, ``_random``) that raise PyTorch's errors
where NumPy would quietly convert: ragged nested lists, Python complex numbers for a real dtype, ``asarray(copy=False)``
that cannot alias, ``complex``/``polar`` parts, negative sizes, ``randperm`` counts a dtype cannot hold, and text.

>>> ragged_error([[1, 2], [3]], "tensor")
ValueError('tensor: expected sequence of length 2 at dim 1 (got 1)')
>>> string_data_error([1, "a"])
TypeError("new(): invalid data type 'str'")
"""
from __future__ import annotations

import builtins
import numbers

import numpy as np

from . import _dtype
from ._device import device as _device
from ._tensor import Tensor

__all__ = ["ragged_error", "huge_ints", "has_python_complex", "check_no_python_complex", "check_can_alias",
           "check_parts", "checked_shape", "check_randperm", "string_data_error"]


def ragged_error(data, op):
    """torch's error for the first element of ragged ``data`` that breaks the shape its first elements set."""
    def is_seq(x):
        return isinstance(x, (list, tuple)) or (isinstance(x, (np.ndarray, Tensor)) and x.ndim > 0)

    shape, first = [], data
    while is_seq(first):
        shape.append(len(first))
        if not len(first):
            break
        first = first[0]

    def check(x, dim):
        if dim == len(shape):
            return TypeError(f"{op}: expected a number at dim {dim}, got a {type(x).__name__}") if is_seq(x) else None
        if not is_seq(x):
            return TypeError(f"{op}: expected a sequence at dim {dim}, got {type(x).__name__} (not a sequence)")
        if len(x) != shape[dim]:
            return ValueError(f"{op}: expected sequence of length {shape[dim]} at dim {dim} (got {len(x)})")
        return next((err for err in (check(y, dim + 1) for y in x) if err is not None), None)

    return check(data, 0)


def huge_ints(arr, dtype, op):
    """``arr``, NumPy's object array for Python ints past 64 bits, as torch reads them: floats for a floating or
    complex result (``tensor(2**70, dtype=float64)``, ``tensor([1.5, 2**70])``), else torch's overflow error; None
    when it holds anything but numbers."""
    flat = arr.reshape(-1).tolist()
    if not all(isinstance(v, numbers.Number) for v in flat):
        return None
    if dtype is not None:
        category = _dtype.to_dtype(dtype).category
    elif any(not isinstance(v, numbers.Real) for v in flat):
        category = _dtype.COMPLEX
    else:
        category = _dtype.INT if all(isinstance(v, numbers.Integral) for v in flat) else _dtype.FLOAT
    if category == _dtype.FLOAT:
        return arr.astype(np.float64)
    if category == _dtype.COMPLEX:
        return arr.astype(np.complex128)
    raise ValueError("Overflow when unpacking long long")  # torch's words, without naming the op


def string_data_error(data):
    """torch's error for text in tensor data: a string first in a nested list reads as one more dimension, any other
    string or bytes (or a top-level text scalar) as a value of an invalid type."""
    first, depth = data, 0
    while isinstance(first, (list, tuple)) and first:
        first, depth = first[0], depth + 1
    if depth and isinstance(first, str):
        return ValueError("too many dimensions 'str'")
    bad = first if depth == 0 else next(_text_leaves(data), first)
    kind = type(bad)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
    return TypeError(f"new(): invalid data type '{name}'")


def _text_leaves(data):
    for item in data:
        if isinstance(item, (list, tuple)):
            yield from _text_leaves(item)
        elif isinstance(item, (str, bytes)):
            yield item


def has_python_complex(data):
    if isinstance(data, (list, tuple)):
        return any(has_python_complex(d) for d in data)
    return type(data) is builtins.complex


def check_no_python_complex(data, dt):
    """torch converts each Python number on its own: a complex one into a real dtype is a TypeError (NumPy's complex
    scalars and arrays are cast, dropping the imaginary part, as torch casts them)."""
    if dt.category in (_dtype.INT, _dtype.FLOAT) and has_python_complex(data):
        raise TypeError(f"tensor(): must be real number, not complex (for dtype {dt})" if dt.is_floating_point
                        else f"tensor(): 'complex' object cannot be interpreted as an integer (for dtype {dt})")


def check_can_alias(obj, dtype, device):
    """asarray(copy=False) shares memory or raises, as torch: no conversions, no sequences."""
    if isinstance(obj, np.generic):
        raise RuntimeError("asarray: can't alias NumPy scalars. Either remove copy=False or transform it in a ndarray.")
    if isinstance(obj, (list, tuple, builtins.bool, builtins.int, builtins.float, builtins.complex)):
        raise ValueError(f"asarray: can't alias arbitrary sequence into a tensor (got a {type(obj).__name__}); "
                         "remove copy=False")
    if isinstance(obj, (Tensor, np.ndarray)):
        from ._dispatch import TORCH_TYPE_NAMES

        have = obj.dtype if isinstance(obj, Tensor) else _dtype.from_numpy_dtype(obj.dtype)
        if dtype is not None and _dtype.to_dtype(dtype) is not have:
            names = [TORCH_TYPE_NAMES[d.name] for d in (have, _dtype.to_dtype(dtype))]
            raise ValueError(f"asarray: can't alias tensor with dtype '{names[0]}' into dtype '{names[1]}'.")
        here = obj.device if isinstance(obj, Tensor) else _device("cpu")
        if device is not None and _device(device).type != here.type:
            raise ValueError(f"asarray: can't alias tensor from device '{here}' to '{_device(device)}'.")


def check_parts(op, a, b, names):
    """torch.complex and torch.polar take two real tensors of one dtype (no promotion)."""
    from ._dispatch import TORCH_TYPE_NAMES

    for t, name in zip((a, b), names):
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(t).__name__}")
    kinds = [TORCH_TYPE_NAMES[t.dtype.name] for t in (a, b)]
    if not all(k in ("Half", "Float", "Double") for k in kinds):
        raise RuntimeError(f"{op}: Expected both inputs to be Half, Float or Double tensors but got {kinds[0]} and "
                           f"{kinds[1]}")
    if a.dtype is not b.dtype:
        raise RuntimeError(f"{op}: Expected object of scalar type {kinds[0]} but got scalar type {kinds[1]} for "
                           "second argument")


def checked_shape(shape, op):
    if any(s < 0 for s in shape):
        raise RuntimeError(f"{op}: Trying to create tensor with negative dimension {min(shape)}: {list(shape)}")
    return shape


def check_randperm(n, dt):
    """ATen's randperm checks: every value 0 .. n-1 must be exact in ``dt`` (float16 to 2049; bfloat16 unchecked)."""
    from ._random_inplace import not_implemented

    checked_shape((n,), "randperm")
    if dt.category in (_dtype.BOOL, _dtype.COMPLEX):
        raise not_implemented("randperm", dt)
    if dt is _dtype.float16 and n > 2049:
        raise RuntimeError(f"randperm: n cannot be greater than 2049 for Half type, got n={n}")
    if dt.category == _dtype.INT and n > 0:
        _dtype.checked_scalar(n - 1, dt)
