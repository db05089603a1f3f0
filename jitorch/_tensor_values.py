"""A tensor's values read out (bound onto ``Tensor`` in ``_tensor.py``): Python numbers (``item``, ``int()``,
``float()``, ``bool()``, ``format``), lists, NumPy arrays (``numpy``, ``__array__``), DLPack, the CUDA array
interface, ``len``/``iter``/``in``, and the printed form.

>>> import jitorch
>>> t = jitorch.tensor([1.5, 2.0])
>>> t.tolist(), float(t[0]), f"{t[1]:.2f}", 2.0 in t
([1.5, 2.0], 1.5, '2.00', True)
"""
from __future__ import annotations

import builtins

import numpy as np

from . import _dtype
from ._grad_state import GradState
from .runtime.meta import MetaArray

# The Tensor class, set by ``_tensor.py`` once it exists (this module defines part of it).
Tensor = None


_SCALAR_OF_GRAD_WARNED = []  # torch's float()/complex() warning is TORCH_WARN_ONCE: once per process


def _warn_scalar_of_grad(t):
    if t._requires_grad and GradState.enabled and not _SCALAR_OF_GRAD_WARNED:
        import warnings

        _SCALAR_OF_GRAD_WARNED.append(True)
        warnings.warn("Converting a tensor with requires_grad=True to a scalar may lead to unexpected behavior.\n"
                      "Consider using tensor.detach() first.", UserWarning, stacklevel=3)


def _meta_read_error(what):
    """torch's refusal to read a meta tensor's value (``item()``, ``numpy()``)."""
    if what == "item":
        return RuntimeError("Tensor.item() cannot be called on meta tensors")
    return TypeError("can't convert meta device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host "
                     "memory first.")


def item(self):
    if self._data.size != 1:
        raise RuntimeError(f"a Tensor with {self._data.size} elements cannot be converted to Scalar")
    if type(self._data) is MetaArray:
        raise _meta_read_error("item")
    return self._host().reshape(()).item()


def tolist(self):
    return self._host().tolist()


def _host(self):
    data = self._data
    if type(data) is not np.ndarray:
        data = data.get()
    return data


def numpy(self, *, force=False):
    if self._requires_grad and not force and GradState.enabled:  # as torch: fine under no_grad (op kernels)
        raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
    if type(self._data) is not np.ndarray:
        if type(self._data) is MetaArray:
            raise _meta_read_error("numpy")
        if not force:
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                            "to host memory first.")
        return self._data.get()
    return self._data


def __array__(self, dtype=None, copy=None):
    # NumPy 2 hands ``copy`` over and trusts the answer: ``np.array(t)`` (copy=True) must not return the
    # tensor's own memory, or later in-place updates of the tensor would show through the "copy".
    if self._requires_grad and GradState.enabled:
        raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
    if type(self._data) is MetaArray:  # torch's __array__ is numpy(): its refusal, not a failed host copy
        raise _meta_read_error("numpy")
    arr = self._host()
    if copy is False and (arr is not self._data or dtype is not None and np.dtype(dtype) != arr.dtype):
        raise ValueError(f"Unable to avoid copy while creating an array from a {self.device.type} tensor of "
                         f"dtype {self.dtype} as requested (dtype={dtype}).")
    if dtype is not None:
        arr = arr.astype(dtype, copy=bool(copy) and arr is self._data)
    elif copy and arr is self._data:
        arr = arr.copy()
    return arr


def __array_wrap__(self, array, context=None, return_scalar=False):
    # torch turns a boolean result (np.isnan(t)) into uint8, and 0-d results stay tensors.
    from ._creation import from_numpy

    array = np.asarray(array)
    return from_numpy(array.astype(np.uint8) if array.dtype == np.bool_ else array)


def __dlpack__(self, *args, **kwargs):
    if self._requires_grad:
        raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")
    return self._data.__dlpack__(*args, **kwargs)


def __dlpack_device__(self):
    return self._data.__dlpack_device__()


@property
def __cuda_array_interface__(self):
    """CUDA tensors only (an AttributeError otherwise, so ``hasattr`` tells them apart), as in torch."""
    if type(self._data) is np.ndarray:
        raise AttributeError(f"Can't get __cuda_array_interface__ on non-CUDA tensor type: {self.type()} If CUDA "
                             "data is required use tensor.cuda() to copy tensor to device memory.")
    if self._requires_grad:
        raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad. If gradients "
                           "aren't required, use var.detach() to get Variable that doesn't require grad.")
    return self._data.__cuda_array_interface__


def record_stream(self, stream):
    """Mark this CUDA tensor's memory as in use by ``stream`` (see ``jitorch.cuda.streams.record_stream``)."""
    from .cuda.streams import record_stream

    record_stream(self, stream)


def __len__(self):
    if self._data.ndim == 0:
        raise TypeError("len() of a 0-d tensor")
    return self._data.shape[0]


def __iter__(self):
    if self._data.ndim == 0:
        raise TypeError("iteration over a 0-d tensor")
    return iter(self.unbind(0))


def __contains__(self, element):
    # Without it, ``in`` iterates rows and asks each for a bool: ambiguous past 1-D. torch compares elementwise.
    if isinstance(element, (Tensor, int, float, complex, np.number, np.bool_)):
        return bool((self == element).any())
    raise RuntimeError(f"Tensor.__contains__ only supports Tensor or scalar, but you passed in a {type(element)}.")


def _scalar_for(self, kind):
    n = self._data.size
    if n != 1 and kind in ("int", "float", "complex"):
        raise ValueError(f"only one element tensors can be converted to Python scalars (a Tensor with {n} "
                         "elements cannot be converted)")
    if n != 1:
        raise RuntimeError(f"{kind}: a Tensor with {n} elements cannot be converted to Scalar" if n else
                           f"{kind}: a Tensor with 0 elements cannot be converted to Scalar")
    if type(self._data) is MetaArray:
        raise _meta_read_error("item")
    return self._host().reshape(()).item()


def __bool__(self):
    n = self._data.size
    if n != 1:
        raise RuntimeError(f"Boolean value of Tensor with {'more than one value' if n else 'no values'} is "
                           "ambiguous")
    return bool(self._scalar_for("bool"))


def _real_scalar(self, kind, c_type):
    """The value for ``int()``/``float()``: a complex one with no imaginary part gives its real part, as torch."""
    value = self._scalar_for(kind)
    if type(value) is builtins.complex:
        if value.imag != 0:
            raise RuntimeError(f"value cannot be converted to type {c_type} without overflow")
        return value.real
    return value


def __int__(self):
    return int(_real_scalar(self, "int", "int64_t"))


def __float__(self):
    _warn_scalar_of_grad(self)
    return float(_real_scalar(self, "float", "double"))


def __complex__(self):
    _warn_scalar_of_grad(self)
    return complex(self._scalar_for("complex"))


def __index__(self):
    if self._data.dtype.kind not in "iub" or self._data.size != 1:
        raise TypeError("only integer tensors of a single element can be converted to an index")
    return int(self._scalar_for("index"))


def __format__(self, spec):
    # Only a plain tensor formats as its number: a Parameter prints whole, as torch's (a distribution's repr).
    # A compiled step's deferred tensor (LazyTensor) stands for a plain one.
    plain = type(self) is Tensor or getattr(type(self), "_stands_for_plain_tensor", False)
    if plain and (self._data.ndim == 0 or (spec and self._data.size == 1)):
        return format(self._scalar_for("format"), spec)
    if spec:  # object.__format__'s refusal, as torch's
        raise TypeError(f"unsupported format string passed to {type(self).__name__}.__format__")
    return repr(self)


def __repr__(self, *, tensor_contents=None):
    from ._printing import format_tensor

    suffixes = []
    if type(self._data) is MetaArray:
        suffixes = ["requires_grad=True"] if self._requires_grad and self.grad_fn is None else \
            [f"grad_fn=<{type(self.grad_fn).__name__}>"] if self.grad_fn is not None else []
        from ._meta import meta_repr

        return meta_repr(self, suffixes)
    if self.is_cuda:
        suffixes.append(f"device='{self.device}'")
    if self.grad_fn is not None:
        suffixes.append(f"grad_fn=<{type(self.grad_fn).__name__}>")  # as torch: <CopySlices>, not its name()
    elif self._requires_grad:
        suffixes.append("requires_grad=True")
    from ._subclass import is_user_type

    # A user's subclass prints its own name, as torch's ``_str_intern`` does (continuation lines indented under it).
    prefix = f"{type(self).__name__}(" if is_user_type(type(self)) else "tensor("
    return format_tensor(self._host(), dtype_name=self.dtype.name,
                         default_float=_dtype.get_default_dtype().name, suffixes=suffixes, prefix=prefix)


__str__ = __repr__
