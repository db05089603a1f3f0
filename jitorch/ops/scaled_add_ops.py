"""``add``/``sub`` with ``alpha != 1`` of floating tensors as rows: ATen's ``fmadd(other, alpha, self)``, rounded once.

ATen's CPU add kernel computes ``self + alpha * other`` as one fused multiply-add (``alpha`` and a number ``other``
first rounded to the tensors' type; ``sub`` adds ``-alpha``), float32 and float64 alike. As a composite (``other *
alpha``, then ``add``) the product rounded first: an ulp off torch on 9% of float32 elements, at every SGD step
(``p.add_(grad, alpha=-lr)``), and two dispatches plus the alpha checks' promotion (13-21 us on 32x32 floats, torch
2). Here one row each, whose fusion rule is the IR's ``fma`` (captured and compiled graphs give torch's bits too) and
whose CPU kernel is one generated ``fma`` pass over contiguous float32/float64 arrays, into a new array or into
``self`` (`add_into`; `scaled_add_arrays` serves the optimizers' array updates). Other host layouts (broadcast,
sliced) are made contiguous first; device arrays compute float32 through float64 (the product exact, the sum
rounded twice: off only where the double lands on a float's rounding midpoint) and float64 unfused.

torch's own CPU results leave the fused form in the scalar tail of a vectorized loop whose ``other`` is a number or
broadcast along the innermost dim (under 16 elements per thread's chunk); those elements may differ here by an ulp.
Half types, integers, bool and complex keep `_pointwise`'s composite (torch's rules for those: its docstring).

>>> import jitorch
>>> x = jitorch.tensor([1.0, 2.0], requires_grad=True)
>>> y = jitorch.add(x, jitorch.tensor([4.0, 8.0]), alpha=0.25)
>>> y.tolist(), type(y.grad_fn).__name__
([2.0, 4.0], 'AddBackward0')
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .._dispatch import _NO_ATTRS, MODES, TENSOR_TYPES, apply, apply_inplace, sync_view
from .._dispatch_fast import keep_result
from .._pointwise_checks import FLOAT32_MAX
from .._dispatch_inplace import writable_plain
from .._grad_state import GradState
from ..codegen.ir import FLOAT_IR_DTYPES
from ..runtime import host_cache
from .native_eager import _int_as_float32, dense_operands, expression_kernel, launch_arrays, memory_order
from .half_cast import converted, scalar_as
from .table import Pointwise, defop

__all__ = ["ADD_ALPHA", "SUB_ALPHA", "scaled_add", "scaled_add_", "add_into", "scaled_add_arrays"]

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_FLOATS = (_F32, _F64)
_HALVES = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
_GRAIN = 1 << 15
_kernels: dict = {}  # (IR dtype, other is a number) -> the compiled fma pass
_scalars: dict = {}  # (dtype, number) -> a one-element array the kernels read the number from
_SCALARS_MAX = 256


def _kernel(dt, number_other):
    """``out = fma(other, alpha, self)`` over ``[0, n)``: buffers self, other (stride 0 for a number), alpha
    (stride 0), out."""
    kernel = _kernels.get((dt, number_other))
    if kernel is None:
        kernel = _kernels[dt, number_other] = expression_kernel("fma({1}, {2}, {0})", 1 if number_other else 2,
                                                                FLOAT_IR_DTYPES[dt], 2 if number_other else 1)
    return kernel


def _scalar(value, dt):
    """``value`` as ATen casts a Scalar to the tensors' type, in a cached one-element array."""
    key = (dt, value) if value else (dt, repr(value))  # (-0.0 == 0.0)
    array = _scalars.get(key)
    if array is None:
        if dt is _F32 and type(value) is int:
            value = _int_as_float32(value)  # C's int64 -> float, not through a double
        if len(_scalars) >= _SCALARS_MAX:
            _scalars.clear()
        array = _scalars[key] = np.array([value], dt)
    return array


def _check_alpha_fits(dt, alpha):
    # c10's checked conversion of the Scalar to float: a finite alpha beyond float32's range is refused
    if dt is _F32 and type(alpha) is float and FLOAT32_MAX < abs(alpha) < float("inf"):
        raise RuntimeError("value cannot be converted to type float without overflow")


def scaled_add_arrays(a, b, alpha, out=None):
    """``fma(b, alpha, a)`` of host float32/float64 arrays (``b`` the same dtype, or a number) into ``out`` (a new
    array in ``a``'s layout when None), or None where the arrays do not fit one contiguous pass."""
    if type(a) is not np.ndarray:
        return None
    dt = a.dtype
    if dt is not _F32 and dt is not _F64:
        return None
    number = type(b) is not np.ndarray
    if not number and (b.dtype is not dt or b.shape != a.shape):
        return None
    shape = a.shape
    if not (a.flags.c_contiguous and (number or b.flags.c_contiguous)):
        order = memory_order(a)
        if out is not None or order is None:
            return None
        # a transposed or channels-last self: the pass runs in its memory order (ATen keeps that layout)
        a_t, b_t = a.transpose(order), b if number else b.transpose(order)
        if not (a_t.flags.c_contiguous and (number or b_t.flags.c_contiguous)):
            return None
        return scaled_add_arrays(a_t, b_t, alpha).transpose(np.argsort(order))
    if out is None:
        out = np.empty(shape, dt) if a.nbytes < host_cache.THRESHOLD else host_cache.empty(shape, dt)
    scale = _scalars.get((dt, alpha) if alpha else None)
    if scale is None:
        scale = _scalar(alpha, dt)
    kernel = _kernels.get((dt, number))
    if kernel is None:
        kernel = _kernel(dt, number)
    n = a.size
    launch_arrays(kernel, [a, _scalar(b, dt) if number else b, scale, out], n, _GRAIN, n)
    return out


def _scaled_add_array(a, b, alpha):
    """``a + alpha * b`` for what `scaled_add_arrays` does not take: host operands made contiguous in the memory
    order of the first that has the result's shape (broadcast, sliced), device and meta arrays with the float32
    product in float64."""
    if type(a) is np.ndarray and a.dtype in _FLOATS and (type(b) is not np.ndarray or b.dtype == a.dtype):
        if type(b) is np.ndarray:
            (dense, other), back = dense_operands([a, b])
        else:
            (dense,), back = dense_operands([a])
            other = b
        out = scaled_add_arrays(dense, other, alpha)
        if out is not None:
            return out if back is None else out.transpose(back)
    dtype = a.dtype
    if dtype in _HALVES and type(a) is np.ndarray:
        # ATen's reduced-float add: alpha (and a number other) converted to the dtype as a Scalar is, then
        # ``self + alpha * other`` in float32 (the product of two halves is exact there), rounded once
        def wide(v):
            return scalar_as(v, dtype) if type(v) in (int, float) else converted(v, _F32)
        return converted(converted(a, _F32) + wide(alpha) * wide(b), dtype)
    if dtype == _F32:
        b = b.astype(np.float64) if hasattr(b, "astype") else float(np.float32(b))
        return (a.astype(np.float64) + b * float(np.float32(alpha))).astype(dtype)
    return a + b * dtype.type(alpha)


def _add_alpha_kernel(xp, a, b, alpha):
    out = scaled_add_arrays(a, b, alpha)
    return out if out is not None else _scaled_add_array(a, b, alpha)


def _sub_alpha_kernel(xp, a, b, alpha):
    return _add_alpha_kernel(xp, a, b, -alpha)


def _add_alpha_backward(ctx, g):
    return g, (g * ctx.inputs[2] if ctx.needs_grad(1) else None), None


def _sub_alpha_backward(ctx, g):
    return g, (-g * ctx.inputs[2] if ctx.needs_grad(1) else None), None  # torch's ``maybe_multiply(-grad, alpha)``


# ``{2}`` is alpha, a number: rounded to the row's type, as ATen's Scalar (an operand ``{1}`` that is a number too).
ADD_ALPHA = defop("add_alpha", _add_alpha_kernel, _add_alpha_backward,
                  Pointwise("fma(({dtype}){1}, ({dtype}){2}, {0})"), promotion="promote", saves="inputs", meta=True,
                  grad_name="AddBackward0", save_if=lambda needs: (False, False, True))
SUB_ALPHA = defop("sub_alpha", _sub_alpha_kernel, _sub_alpha_backward,
                  Pointwise("fma(({dtype}){1}, -({dtype}){2}, {0})"), promotion="promote", saves="inputs", meta=True,
                  grad_name="SubBackward0", save_if=lambda needs: (False, False, True))


def scaled_add(row, input, other, alpha):
    """``row`` (`ADD_ALPHA`/`SUB_ALPHA`) of ``input`` and ``other``, or None for the cases it does not take (a
    result that is not float32/float64, a complex or bool operand, an alpha that is not a real number): the caller's
    composite computes those. Same-dtype host tensors skip the dispatcher (a 32x32 ``add`` costs what ``a + b``
    does); anything else goes through `apply` (modes, promotion, devices)."""
    ta = type(alpha)
    if ta is not float and ta is not int or type(input) not in TENSOR_TYPES:
        return None
    x = input._data
    if type(other) in TENSOR_TYPES:
        y = other._data
        if not MODES and type(x) is np.ndarray and type(y) is np.ndarray and x.dtype is y.dtype \
                and x.dtype in _FLOATS and x.shape == y.shape:
            _check_alpha_fits(x.dtype, alpha)
            if input._base is not None and input._view_ver != input._ver_owner._ver:
                sync_view(input)
            if other._base is not None and other._view_ver != other._ver_owner._ver:
                sync_view(other)
            out = scaled_add_arrays(x, y, alpha if row is ADD_ALPHA else -alpha)
            if out is not None:
                return keep_result(row, (input, other, alpha), _NO_ATTRS, out,
                                   input._requires_grad or other._requires_grad)
    common = _common_float(input, other)
    if common is None or common.np in _HALVES and not _half_fits(common.np, alpha, other):
        return None
    _check_alpha_fits(common.np, alpha)
    return apply(row, input, other, alpha)


def _half_fits(dtype, *numbers):
    """Whether the Python numbers among ``numbers`` are finite and within half type ``dtype``'s range (c10's checked
    conversion refuses what overflows: the composite raises its error)."""
    top = float(ml_dtypes.finfo(dtype).max)
    return all(-top <= v <= top for v in numbers if type(v) in (int, float))


def _common_float(input, other):
    """The result dtype of ``input`` and ``other`` when the rows take it (float32/float64 from real operands, tensors
    that broadcast or Python floats and ints: the composite raises torch's errors, naming ``add``), else None."""
    from .. import _dtype

    if type(other) in TENSOR_TYPES:
        kind_dtype = getattr(other._data, "dtype", None)
        if getattr(kind_dtype, "kind", None) not in ("f", "i", "u") and kind_dtype not in _HALVES:
            return None
    elif type(other) is not float and type(other) is not int:
        return None
    common = _dtype.result_type(input, other)
    if common.np not in _FLOATS and (common.np not in _HALVES or type(input._data) is not np.ndarray):
        return None
    if type(other) in TENSOR_TYPES:
        try:
            np.broadcast_shapes(input.shape, other.shape)
        except ValueError:
            return None
    return common


def scaled_add_(row, self, other, alpha):
    """``self.add_(other, alpha=alpha)`` (``sub_``) through the row, or None for the composite: anything but a real
    ``alpha``, and a float32/float64 ``self`` that the result keeps (dtype and shape; the composite raises torch's
    refusals)."""
    ta = type(alpha)
    if ta is not float and ta is not int or type(self) not in TENSOR_TYPES:
        return None
    x = self._data
    if writable_plain(self) is not None and add_into(row, self, other, alpha):
        return self
    if type(other) in TENSOR_TYPES:
        try:
            if np.broadcast_shapes(tuple(self.shape), tuple(other.shape)) != tuple(self.shape):
                return None
        except ValueError:
            return None
    common = _common_float(self, other)
    if common is None or common.np != x.dtype or common.np in _HALVES and not _half_fits(common.np, alpha, other):
        return None
    _check_alpha_fits(common.np, alpha)
    return apply_inplace(row, self, other, alpha)


def add_into(row, self, other, alpha):
    """``self.add_(other, alpha=alpha)`` (or ``sub_``) written straight into ``self``'s memory, for the plain case
    (no history to record: `writable_plain`'s conditions, checked by the caller) of a contiguous float32/float64
    ``self`` and a same-shape, same-dtype host ``other`` or a number. True when done."""
    if self._base is not None and self._view_ver != self._ver_owner._ver:
        sync_view(self)
    x = self._data
    if type(other) in TENSOR_TYPES:
        if GradState.enabled and other._requires_grad:
            return False
        y = other._data
        if type(y) is not np.ndarray or y.dtype is not x.dtype or y.shape != x.shape or (
                y is not x and np.may_share_memory(x, y)):  # (an overlapping view would read what the pass wrote)
            return False
        if other._base is not None and other._view_ver != other._ver_owner._ver:
            sync_view(other)
    elif type(other) is float or type(other) is int:
        y = other
    else:
        return False
    if x.dtype not in _FLOATS or not x.flags.c_contiguous:
        return False
    _check_alpha_fits(x.dtype, alpha)
    if scaled_add_arrays(x, y, alpha if row is ADD_ALPHA else -alpha, out=x) is None:
        return False
    self._bump_version()
    return True
