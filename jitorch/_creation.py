"""Tensor creation: ``tensor``, ``from_numpy``, ``zeros``/``ones``/``full``/``empty`` and ``_like``, ranges, ``eye``.

This file makes tensors from data; it re-exports the sized constructors (``_creation_filled.py``) and the ranges
(``_ranges.py``).

>>> import jitorch
>>> jitorch.tensor([[1, 2], [3, 4]]).dtype, jitorch.tensor(2.5).dtype, jitorch.arange(0, 1, 0.25)
(jitorch.int64, jitorch.float32, tensor([0.0000, 0.2500, 0.5000, 0.7500]))
"""
from __future__ import annotations

import builtins

import numpy as np

from . import _dtype
from ._creation_checks import check_can_alias, check_no_python_complex, check_parts, huge_ints, \
    ragged_error, string_data_error
from ._creation_watchers import WATCHERS, noted
from ._device import device as _device, get_default_device
from ._tensor import Tensor
from .runtime import array_module_for, move_array

__all__ = [
    "tensor", "as_tensor", "asarray", "from_numpy", "zeros", "ones", "full", "empty", "zeros_like", "ones_like",
    "full_like", "empty_like", "arange", "range", "linspace", "logspace", "eye", "tril_indices", "triu_indices",
    "scalar_tensor", "empty_strided", "complex", "polar",
]


def _finish(data, requires_grad=False, device=None):
    """Wrap a host array, moving it to ``device`` when that is not the CPU."""
    dev = get_default_device() if device is None else _device(device)
    if dev.type != "cpu":
        data = move_array(data, dev.type, dev.index)
    t = Tensor._make(data)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _xp_for(device):
    dev = get_default_device() if device is None else _device(device)
    return array_module_for(dev.type), dev


def _default_for_kind(arr):
    kind = arr.dtype.kind
    if kind == "f" and arr.dtype == np.float64:
        return _dtype.get_default_dtype()
    if kind == "c" and arr.dtype == np.complex128:
        return _dtype.default_complex()
    if kind in "iu" and arr.dtype.itemsize == 8:
        return _dtype.int64
    return _dtype.from_numpy_dtype(arr.dtype)


def _contains_tensor(data):
    if isinstance(data, Tensor):
        return True
    if isinstance(data, (list, tuple)) and data:
        return any(_contains_tensor(d) for d in data) if not isinstance(data[0], _PY_SCALARS) else False
    return False


def _to_array(data, op, dtype=None):
    if isinstance(data, (list, tuple)) and _contains_tensor(data):
        data = _nested_host(data)
    try:
        arr = np.array(data)
    except ValueError as e:
        raise ragged_error(data, op) or ValueError(f"{op}: expected a rectangular nested sequence of numbers ({e})") \
            from None
    if arr.dtype.kind in "SU":
        raise string_data_error(data)
    if arr.dtype == object:
        arr = huge_ints(arr, dtype, op)
    if arr is None:
        raise RuntimeError(f"{op}: could not infer dtype of {type(data).__name__} elements; expected numbers, bools or "
                        "nested sequences of them")
    return arr


def _nested_host(data):
    if isinstance(data, Tensor):
        # torch reads a tensor inside a sequence as one number (its item), of its dtype: ``[t([1.]), t([2.])]`` has
        # shape (2,), not (2, 1)
        if data.numel() != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return data._host().reshape(())
    if isinstance(data, (list, tuple)):
        return [_nested_host(d) for d in data]
    return data


_PY_SCALARS = (builtins.bool, builtins.int, builtins.float, builtins.complex)  # ``complex`` is shadowed below


def _python_scalar_dtype(kinds):
    """The dtype torch infers for a sequence of Python numbers of these types (floats: the default dtype)."""
    if builtins.complex in kinds:
        return _dtype.default_complex()
    if builtins.float in kinds:
        return _dtype.get_default_dtype()
    return _dtype.int64 if builtins.int in kinds else _dtype.bool


def _inferred_dtype(data):
    """torch's dtype for nested ``data``: Python numbers by kind (floats: the default dtype), NumPy scalars, arrays
    and tensors keep their own dtype, all promoted together; None for anything else (NumPy's inference then rules).

    NOTE: NumPy would make ``[np.float64(1.5), 2.0]`` float64 and so would torch, but jitorch maps NumPy's float64 to
    the default dtype for Python floats, so the NumPy scalars must be told apart from the floats here.
    """
    if isinstance(data, (list, tuple)):
        kinds = set(map(type, data))
        if kinds <= set(_PY_SCALARS):  # the common case: one C-level pass, no recursion
            return _python_scalar_dtype(kinds) if kinds else _dtype.get_default_dtype()
        out = _python_scalar_dtype(kinds & set(_PY_SCALARS)) if kinds & set(_PY_SCALARS) else None
        for d in data:
            if type(d) in _PY_SCALARS:
                continue
            dt = _inferred_dtype(d)
            if dt is None:
                return None
            out = dt if out is None else _dtype.promote_types(out, dt)
        return out
    if isinstance(data, Tensor):
        return data.dtype
    if isinstance(data, (np.ndarray, np.generic)):
        return _dtype.FROM_NP.get(data.dtype)
    return None


def _check_python_numbers_fit(arr, dt):
    """torch converts each Python number with a range check, so out-of-range values raise instead of wrapping."""
    if dt.np.kind not in "iu" or arr.dtype.kind not in "iuf" or not arr.size:
        return
    if arr.dtype == np.uint64 and dt.np != np.uint64:  # NumPy's type for Python ints of 2**63 and above
        raise ValueError("Overflow when unpacking long long")
    info = np.iinfo(dt.np)
    if arr.dtype.kind == "f":
        bad = np.isnan(arr) | (arr < info.min) | (arr > info.max)
    elif info.min == 0:  # unsigned: negative ints wrap around, as far as -max
        bad = (arr > info.max) | (arr < -int(info.max))
    elif arr.dtype.itemsize > dt.np.itemsize:
        bad = (arr < info.min) | (arr > info.max)
    else:
        return
    if bad.any():
        raise RuntimeError(f"value cannot be converted to type {dt.name} without overflow")


def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A new tensor holding a copy of ``data`` (nested sequences, scalars, NumPy arrays or tensors)."""
    huge_ints = False
    if isinstance(data, Tensor):
        from ._stat_checks import warn_at_caller  # (it imports the dispatcher, which imports this module)

        warn_at_caller("To copy construct from a tensor, it is recommended to use sourceTensor.detach().clone() or "
                       "sourceTensor.detach().clone().requires_grad_(True), rather than torch.tensor(sourceTensor).")
        arr = data._host().copy()
        dt = data.dtype
    elif isinstance(data, np.ndarray):
        arr = data.copy()
        dt = _dtype.from_numpy_dtype(arr.dtype)
    else:
        arr = _to_array(data, "tensor", dtype)
        if isinstance(data, np.generic):
            dt = _dtype.from_numpy_dtype(arr.dtype)
        else:
            dt = (_inferred_dtype(data) if isinstance(data, (list, tuple)) else None) or _default_for_kind(arr)
            # Python ints only, yet NumPy made floats: one was beyond int64 (``[2**63, 1]``), which torch refuses
            # unless asked for uint64 (or a float or bool dtype); casting the floats back would wrap silently.
            huge_ints = arr.dtype.kind == "f" and dt.np.kind in "iu"
    if dtype is not None:
        dt = _dtype.to_dtype(dtype)
    if huge_ints and dt.np.kind in "iu" and dt.np != np.uint64:
        raise ValueError("Overflow when unpacking long long")
    if not isinstance(data, (Tensor, np.ndarray, np.generic)):
        if arr.dtype.kind == "c":
            check_no_python_complex(data, dt)
        _check_python_numbers_fit(arr, dt)
    if arr.dtype != dt.np:
        arr = arr.astype(dt.np)
    if device is None and isinstance(data, Tensor):
        device = data.device
    t = _finish(arr if arr.flags.c_contiguous else arr.copy(), requires_grad, device)
    return noted("tensor", t, (data,), dtype=dtype, device=device, requires_grad=requires_grad) if WATCHERS else t


def as_tensor(data, dtype=None, device=None):
    """Like ``tensor`` but shares memory with a tensor or NumPy array of matching dtype and device."""
    if isinstance(data, Tensor):
        out = data if dtype is None else data.to(_dtype.to_dtype(dtype))
        return out if device is None else out.to(device)
    if isinstance(data, np.ndarray) and (device is None or _device(device).type == "cpu"):
        if dtype is None or _dtype.to_dtype(dtype).np == data.dtype:
            return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=None):
    """``obj`` as a tensor, shared when it can be (``copy=None``), always (``False``) or never (``True``). A tensor's
    conversion or copy stays in its graph unless ``requires_grad`` is given, as in torch 2.x."""
    if copy is False:
        check_can_alias(obj, dtype, device)
    if isinstance(obj, Tensor):
        out = obj.to(dtype=dtype, device=device)
        if copy and out is obj:
            out = obj.clone()
    else:
        out = tensor(obj, dtype=dtype, device=device) if copy else as_tensor(obj, dtype=dtype, device=device)
    if requires_grad is None:
        return out
    if out.grad_fn is not None or (out.requires_grad and not requires_grad):
        out = out.detach()
    return out.requires_grad_(True) if requires_grad else out


def from_numpy(ndarray):
    """A tensor sharing memory with ``ndarray`` (writes are visible on both sides)."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    _dtype.from_numpy_dtype(ndarray.dtype)  # raises PyTorch's message for unsupported dtypes
    if any(s < 0 for s in ndarray.strides):
        raise ValueError("At least one stride in the given numpy array is negative, and tensors with negative strides "
                         "are not currently supported. (You can probably work around this by making a copy of your "
                         "array  with array.copy().) ")  # torch's text, its double and trailing spaces too
    if any(s % ndarray.itemsize for s in ndarray.strides):  # a field of a structured array: torch's refusal
        raise ValueError("given numpy array strides not a multiple of the element byte size. Copy the numpy array to "
                         "reallocate the memory.")
    if isinstance(ndarray, np.memmap) or type(ndarray) is not np.ndarray:
        ndarray = ndarray.view(np.ndarray)
    return Tensor._make(ndarray)


def _resolve(dtype, default=None):
    if dtype is None:
        return default or _dtype.get_default_dtype()
    return _dtype.to_dtype(dtype)


from ._creation_filled import (  # noqa: E402,F401 - split for size; re-exported here
    empty, empty_like, empty_strided, eye, full, full_like, ones, ones_like, scalar_tensor,
    tril_indices, triu_indices, zeros, zeros_like)
from ._ranges import arange, linspace, logspace, range  # noqa: E402 - split for size; re-exported here


def complex(real, imag):
    check_parts("complex", real, imag, ("real", "imag"))
    if real.dtype.itemsize >= 4:
        # The parts side by side, read as complex: ``real + imag * 1j`` would make (0, inf) nan + inf j (inf * 1j is
        # nan + inf j in IEEE arithmetic).
        from ._movement import broadcast_tensors, stack
        from ._movement_extra import view_as_complex

        return view_as_complex(stack(broadcast_tensors(real, imag), -1))
    return real.to(real.dtype.to_complex()) + imag * 1j


def polar(abs, angle):
    check_parts("polar", abs, angle, ("abs", "angle"))
    return complex(abs * angle.cos(), abs * angle.sin())

