"""Creation functions of a given size: ``zeros``/``ones``/``full``/``empty`` (and ``empty_strided``,
``scalar_tensor``), their ``*_like`` forms in the input's layout, ``eye``, ``tril/triu_indices`` and the
``Tensor.new_*`` methods; re-exported by ``_creation.py``.

>>> import jitorch
>>> jitorch.full((2,), 7).dtype, jitorch.zeros_like(jitorch.ones(2, 3).t()).stride(), jitorch.eye(2).tolist()
(jitorch.int64, (1, 3), [[1.0, 0.0], [0.0, 1.0]])
"""
from __future__ import annotations

import math

import numpy as np

from . import _device, _dtype
from ._dtype import fills_exactly
from ._misc import FILL_EMPTY
from . import _memory_format as MF
from ._creation import _resolve, _xp_for, tensor
from ._creation_checks import checked_shape
from ._creation_watchers import WATCHERS, noted
from ._shape import int_sizes, normalize_shape, sizes_or_keyword
from ._tensor import Tensor
from .runtime import array_module_for
from .runtime.meta import MetaArray, dense_strides_like, empty as meta_empty


def _filled(size, value, dtype, device, requires_grad, op):
    shape = int_sizes(size)  # (the common ``zeros(2, 3)``: no conversion to do)
    if shape is None or min(shape, default=0) < 0:
        shape = checked_shape(normalize_shape(size, op), op)
    xp = np if device is None and _device._default_device.type == "cpu" else _xp_for(device)[0]
    dt = _resolve(dtype)
    t = Tensor._make(_new_array(xp, shape, dt.np, value))
    if requires_grad:
        t.requires_grad_(True)
    return t


def _new_array(xp, shape, np_dtype, value):
    """An array of ``shape`` filled with ``value`` (None: uninitialized). NumPy's ``full`` is a Python function over
    ``empty`` and ``copyto``: ``fill`` stores the same values (`fills_exactly`) in a third of its time."""
    if value is None:
        data = xp.empty(shape, dtype=np_dtype)
        if FILL_EMPTY[0] and type(data) is not MetaArray:
            data.fill(_uninitialized_value(np_dtype))
        return data
    if value == 0 and not (type(value) is float and math.copysign(1.0, value) < 0):  # (-0.0 keeps its sign)
        return xp.zeros(shape, dtype=np_dtype)
    if xp is np and fills_exactly(value, np_dtype):
        data = np.empty(shape, np_dtype)
        data.fill(value)
        return data
    return xp.full(shape, value, dtype=np_dtype)


def _uninitialized_value(np_dtype):
    """What torch's deterministic mode writes into uninitialized memory: NaN (a complex's real part), the largest
    integer, True."""
    kind = np_dtype.kind
    if kind in "iu":
        return np.iinfo(np_dtype).max
    if kind == "b":
        return True
    return complex(np.nan, 0) if kind == "c" else np.nan  # float, and bfloat16 (kind "V")


def zeros(*sizes, size=None, out=None, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False):
    t = _filled(sizes_or_keyword(sizes, size, "zeros"), 0, dtype, device, requires_grad, "zeros")
    return noted("zeros", t, sizes, size=size, dtype=dtype, device=device, requires_grad=requires_grad) if WATCHERS \
        else t


def ones(*sizes, size=None, out=None, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False):
    t = _filled(sizes_or_keyword(sizes, size, "ones"), 1, dtype, device, requires_grad, "ones")
    return noted("ones", t, sizes, size=size, dtype=dtype, device=device, requires_grad=requires_grad) if WATCHERS \
        else t


def empty(*sizes, size=None, out=None, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False,
          memory_format=None):
    out = _filled(sizes_or_keyword(sizes, size, "empty"), None, dtype, device, requires_grad, "empty")
    if memory_format is MF.preserve_format:
        raise RuntimeError("empty: unsupported memory format Preserve (only *_like functions preserve a layout)")
    if memory_format is not None and memory_format is not MF.contiguous_format:
        MF.check_rank(memory_format, out.ndim)
        out._data = MF.in_format(_xp_for(device)[0], out._data, memory_format)
    if WATCHERS:
        noted("empty", out, sizes, size=size, dtype=dtype, device=device, requires_grad=requires_grad,
              memory_format=memory_format)
    return out


def empty_strided(size, stride, *, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False):
    """An uninitialized tensor of ``size`` laid out with ``stride`` (in elements) over a buffer just large enough.

    >>> empty_strided((2, 3), (1, 2)).stride()
    (1, 2)
    """
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"empty_strided: mismatch in length of strides and shape: {len(size)} sizes, "
                           f"{len(stride)} strides")
    if any(s < 0 for s in size) or any(s < 0 for s in stride):
        raise RuntimeError(f"empty_strided: sizes {list(size)} and strides {list(stride)} must be non-negative")
    span = 0 if 0 in size else 1 + sum((n - 1) * st for n, st in zip(size, stride))
    buffer = empty(span, dtype=dtype, device=device)._data
    if type(buffer) is MetaArray:  # geometry alone; as_strided would return a plain array over the zero pages
        out = Tensor._make(meta_empty(size, buffer.dtype, stride))
        return out.requires_grad_() if requires_grad else out
    xp = np if type(buffer) is np.ndarray else array_module_for("cuda")
    item = buffer.itemsize
    data = xp.lib.stride_tricks.as_strided(buffer, size, tuple(st * item for st in stride))
    out = Tensor._make(data)
    return out.requires_grad_() if requires_grad else out


def _fill_dtype(fill_value):
    if isinstance(fill_value, Tensor):
        return fill_value.dtype
    return _dtype.scalar_dtype(fill_value)


def full(size, fill_value, *, out=None, dtype=None, layout=None, device=None, requires_grad=False):
    """A tensor of ``size`` filled with ``fill_value``; the dtype follows the value (bool, int64, default float)."""
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    dt = _dtype.to_dtype(dtype) if dtype is not None else _fill_dtype(fill_value)
    fill_value = _dtype.checked_scalar(fill_value, dt)
    t = _filled((tuple(size),) if not isinstance(size, int) else (size,), fill_value, dt, device, requires_grad,
                "full")
    return noted("full", t, (size, fill_value), dtype=dt, device=device, requires_grad=requires_grad) if WATCHERS \
        else t


def scalar_tensor(s, *, dtype=None, device=None, requires_grad=False):
    return full((), s, dtype=dtype or _dtype.get_default_dtype(), device=device, requires_grad=requires_grad)


def _like(input, dtype, device):
    return (input.dtype if dtype is None else _dtype.to_dtype(dtype)), (input.device if device is None else device)


def keep_layout(out, input, memory_format):
    """A new tensor ``out`` made for ``*_like(input)`` given the layout PyTorch's ``memory_format`` asks for (the
    default ``preserve_format``: ``input``'s strides when it is dense, else its dims' stride order)."""
    if type(out._data) is MetaArray and memory_format in (None, MF.preserve_format):
        # A dense layout in the input's stride order is preserve_format's answer, from the strides alone.
        out._data = meta_empty(out.shape, out._data.dtype, dense_strides_like(input._data))
        return out
    xp = array_module_for(out.device.type)
    data = MF.like_layout(xp, out._data, input._data, memory_format)
    if data is not out._data:
        out._data = data
    return out


def _host_like(input, dtype, device, memory_format, value):
    """``*_like(input)``'s tensor for a CPU ``input`` in row-major layout (or of fewer than 2 dims) and no dtype,
    device or memory format asked: ``input``'s shape and dtype, row-major (what `keep_layout` keeps), filled with
    ``value`` (None: uninitialized); None for the general path. Without the dtype and device objects `_like` and
    `keep_layout` make on every call (half the time of a small ``zeros_like``)."""
    data = input._data
    if dtype is not None or device is not None or memory_format is not None or type(data) is not np.ndarray or (
            data.ndim > 1 and not MF.exactly_row_major(data)):  # (a channels-last array with C=1 is c_contiguous)
        return None
    return Tensor._make(_new_array(np, data.shape, _dtype.FROM_NP[data.dtype].np, value))


def zeros_like(input, *, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None):
    t = None if WATCHERS else _host_like(input, dtype, device, memory_format, 0)
    if t is not None:
        return t.requires_grad_(True) if requires_grad else t
    dt, dev = _like(input, dtype, device)
    t = keep_layout(zeros(input.shape, dtype=dt, device=dev, requires_grad=requires_grad), input, memory_format)
    return noted("zeros_like", t, (input,), dtype=dtype, device=device, requires_grad=requires_grad,
                 memory_format=memory_format) if WATCHERS else t


def ones_like(input, *, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None):
    t = None if WATCHERS else _host_like(input, dtype, device, memory_format, 1)
    if t is not None:
        return t.requires_grad_(True) if requires_grad else t
    dt, dev = _like(input, dtype, device)
    t = keep_layout(ones(input.shape, dtype=dt, device=dev, requires_grad=requires_grad), input, memory_format)
    return noted("ones_like", t, (input,), dtype=dtype, device=device, requires_grad=requires_grad,
                 memory_format=memory_format) if WATCHERS else t


def empty_like(input, *, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None):
    t = None if WATCHERS else _host_like(input, dtype, device, memory_format, None)
    if t is not None:
        return t.requires_grad_(True) if requires_grad else t
    dt, dev = _like(input, dtype, device)
    t = keep_layout(empty(input.shape, dtype=dt, device=dev, requires_grad=requires_grad), input, memory_format)
    return noted("empty_like", t, (input,), dtype=dtype, device=device, requires_grad=requires_grad,
                 memory_format=memory_format) if WATCHERS else t


def full_like(input, fill_value, *, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None):
    dt, dev = _like(input, dtype, device)
    t = keep_layout(full(input.shape, fill_value, dtype=dt, device=dev, requires_grad=requires_grad), input,
                    memory_format)
    return noted("full_like", t, (input, fill_value), dtype=dtype, device=device, requires_grad=requires_grad,
                 memory_format=memory_format) if WATCHERS else t


def eye(n, m=None, *, out=None, dtype=None, layout=None, device=None, requires_grad=False):
    m = n if m is None else m
    for name, v in (("n", n), ("m", m)):
        if v < 0:
            raise RuntimeError(f"eye(): {name} must be greater or equal to 0, got {v}")
    xp, dev = _xp_for(device)
    t = Tensor._make(xp.eye(n, m, dtype=_resolve(dtype).np))
    if requires_grad:
        t.requires_grad_(True)
    return noted("eye", t, (n, m), dtype=dtype, device=device, requires_grad=requires_grad) if WATCHERS else t


def _tri_indices(row, col, offset, upper, dtype, device):
    for name, n in (("row", row), ("col", col)):
        if n < 0:  # NumPy would return an empty result
            raise RuntimeError(f"{'triu' if upper else 'tril'}_indices: {name} must be non-negative, got {n}")
    xp, dev = _xp_for(device)
    r, c = (xp.triu_indices if upper else xp.tril_indices)(row, offset, col)
    return Tensor._make(xp.stack([r, c]).astype(_resolve(dtype, _dtype.int64).np))


def tril_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    return _tri_indices(row, col, offset, False, dtype, device)


def triu_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    return _tri_indices(row, col, offset, True, dtype, device)


def _new_kw(self, dtype, device):
    return (self.dtype if dtype is None else dtype), (self.device if device is None else device)


def _new_sized(fn):
    # NOTE: ``size`` is torch's keyword for the sizes; a catch-all ``**kwargs`` here once swallowed it silently.
    def method(self, *sizes, size=None, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False):
        dt, dev = _new_kw(self, dtype, device)
        return fn(*sizes_or_keyword(sizes, size, f"new_{fn.__name__}"), dtype=dt, device=dev,
                  requires_grad=requires_grad)
    method.__name__ = f"new_{fn.__name__}"
    return method


def _new_tensor(self, data, *, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False):
    dt, dev = _new_kw(self, dtype, device)
    return tensor(data, dtype=dt, device=dev, requires_grad=requires_grad)


def _new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False, layout=None,
              pin_memory=False):
    dt, dev = _new_kw(self, dtype, device)
    return full(size, fill_value, dtype=dt, device=dev, requires_grad=requires_grad)


Tensor.new_tensor, Tensor.new_full = _new_tensor, _new_full
Tensor.new_zeros, Tensor.new_ones, Tensor.new_empty = _new_sized(zeros), _new_sized(ones), _new_sized(empty)
