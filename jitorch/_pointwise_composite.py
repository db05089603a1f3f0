"""Elementwise composites of the pointwise rows: value tests (``isposinf``/``isneginf``, ``isreal``, ``equal``,
``isclose``/``allclose``, PyTorch's algorithm) and formulas (``addcmul``/``addcdiv`` in the common dtype, ``xlogy``
through its row (`jitorch.ops.xlogy_ops`), ``copysign``, ``deg2rad``/``rad2deg``, ``logit``, ``sinc``).

Split from ``_pointwise.py``, which re-exports them and attaches the Tensor methods.

>>> import jitorch
>>> x = jitorch.tensor([0.0, 1.0])
>>> jitorch.xlogy(x, x).tolist(), jitorch.isclose(x, x + 1e-9).tolist(), jitorch.sinc(x)[0].item()
([0.0, 0.0], [True, True], 1.0)
"""
from __future__ import annotations

import math

from . import _dtype
from ._dispatch import TORCH_TYPE_NAMES, apply
from ._pointwise import _write_out, abs, clamp, eq, log, named, signbit, sin, where
from ._tensor import Tensor
from .ops import muladd_ops, xlogy_ops


def isposinf(input):
    return input.isinf() & (input > 0)


def isneginf(input):
    return input.isinf() & (input < 0)


def isreal(input):
    if input.is_complex():
        return input.imag == 0
    from ._creation import ones_like

    return ones_like(input, dtype=_dtype.bool)


def equal(input, other) -> bool:
    """True when both tensors have the same shape and elements."""
    return input.shape == other.shape and bool(eq(input, other).all())


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """``|input - other| <= atol + rtol * |other|`` (finite errors only), or equal; PyTorch's algorithm."""
    if input.dtype is not other.dtype:
        from ._dispatch import TORCH_TYPE_NAMES

        raise RuntimeError(f"isclose: {TORCH_TYPE_NAMES[input.dtype.name]} did not match "
                           f"{TORCH_TYPE_NAMES[other.dtype.name]}")
    close = input == other
    if equal_nan and input.is_floating_point():
        close = close | (input.isnan() & other.isnan())
    if rtol == 0 and atol == 0:
        return close
    if input.dtype is _dtype.bool:  # bool has no subtraction: compare as the default float type
        input, other = input.to(_dtype.get_default_dtype()), other.to(_dtype.get_default_dtype())
    error = (input - other).abs()
    return close | (error.isfinite() & (error <= atol + (rtol * other).abs()))


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    return bool(isclose(input, other, rtol, atol, equal_nan).all())


def addcmul(input, tensor1, tensor2, *, value=1, out=None):
    read = (input, tensor1, tensor2) if out is not None else ()  # (an out may not overlap them partially)
    if _one_float_dtype(input, tensor1, tensor2) and type(value) in (int, float):  # the row, checks skipped
        return _write_out(muladd_ops.addcmul(input, tensor1, tensor2, value), out, "addcmul", inputs=read)
    dt = _common_dtype(input, tensor1, tensor2)
    if dt is _dtype.bool:
        raise NotImplementedError('"addcmul_cpu_out" not implemented for \'Bool\'')
    # torch computes the product in the common dtype: uint8 * uint8 must not wrap before meeting an int16 input,
    # and bool * bool must not become int64 by meeting the Python ``value``.
    input, tensor1, tensor2 = (t.to(dt) if isinstance(t, Tensor) and t.dtype is not dt else t
                               for t in (input, tensor1, tensor2))
    if _row_operands(dt, value, input, tensor1, tensor2):  # ATen's float kernel, its multiply-add fused
        return _write_out(muladd_ops.addcmul(input, tensor1, tensor2, value), out, "addcmul", inputs=read)
    if dt.category == _dtype.INT and isinstance(value, float):
        value = int(value)  # torch converts value to the integer dtype (truncating) rather than promoting
    return _write_out(input + value * tensor1 * tensor2 if value != 1 else input + tensor1 * tensor2, out, "addcmul",
                      inputs=read)


def addcdiv(input, tensor1, tensor2, *, value=1, out=None):
    read = (input, tensor1, tensor2) if out is not None else ()
    if _one_float_dtype(input, tensor1, tensor2) and type(value) in (int, float):
        return _write_out(muladd_ops.addcdiv(input, tensor1, tensor2, value), out, "addcdiv", inputs=read)
    if _common_dtype(tensor1, tensor2).category < _dtype.FLOAT:
        raise RuntimeError("Integer division with addcdiv is no longer supported, and in a future release addcdiv will "
                           "perform a true division of tensor1 and tensor2. Use (input + value * tensor1 / tensor2) "
                           "instead.")
    # torch divides in the common dtype: float32 operands of a float64 input must not round their quotient first
    dt = _common_dtype(input, tensor1, tensor2)
    input, tensor1, tensor2 = (t.to(dt) if isinstance(t, Tensor) and t.dtype is not dt else t
                               for t in (input, tensor1, tensor2))
    if _row_operands(dt, value, input, tensor1, tensor2):
        return _write_out(muladd_ops.addcdiv(input, tensor1, tensor2, value), out, "addcdiv", inputs=read)
    return _write_out(input + value * (tensor1 / tensor2), out, "addcdiv", inputs=read)


def _one_float_dtype(a, b, c):
    """Whether ``a``, ``b``, ``c`` are tensors of one real float dtype."""
    tensor = Tensor
    if not (isinstance(a, tensor) and isinstance(b, tensor) and isinstance(c, tensor)):
        return False
    dt = a.dtype  # (read once: each read is a property's lookup, and addcmul asks on every call)
    return b.dtype is dt and c.dtype is dt and dt.category == _dtype.FLOAT


def _common_dtype(*tensors):
    """``result_type`` of the operands, without its rules where they are tensors of one dtype (the common case)."""
    dt = getattr(tensors[0], "dtype", None)
    if all(isinstance(t, Tensor) and t.dtype is dt for t in tensors):
        return dt
    return _dtype.result_type(*tensors)


def _row_operands(dt, value, *tensors):
    """Whether addcmul/addcdiv run as their rows: real float tensors and a real number ``value``."""
    return (dt.category == _dtype.FLOAT and not dt.is_complex and type(value) in (int, float)
            and all(isinstance(t, Tensor) for t in tensors))


def xlogy(input, other, *, out=None):
    """``input * log(other)``, 0 where ``input`` is 0 unless ``other`` is NaN: the ``xlogy`` row (torch's value,
    gradients and grad_fn names; integer inputs compute in the default float dtype).

    >>> import jitorch
    >>> jitorch.xlogy(jitorch.tensor([0.0, 2.0]), jitorch.tensor([0.0, 1.0])).tolist()
    [0.0, 0.0]
    """
    return _write_out(_binary_float_row(xlogy_ops.xlogy, xlogy_ops.XLOGY, "XlogyBackward", input, other), out,
                      "xlogy", inputs=(input, other) if out is not None else ())


def _binary_float_row(fast, row, grad_name, input, other):
    """``row`` (``fast``: its dispatcher shortcut) on ``input`` and ``other``, one of which may be a Python number
    (torch's Scalar overloads, whose nodes are ``<grad_name>1`` for a number ``input`` and ``<grad_name>2`` for a
    number ``other``)."""
    if isinstance(input, Tensor):
        result = fast(input, other)
        return result if isinstance(other, Tensor) else named(result, grad_name + "2")
    if not isinstance(other, Tensor):
        raise TypeError(f"{row.name}() received an invalid combination of arguments - got "
                        f"({type(input).__name__}, {type(other).__name__}): pass at least one Tensor "
                        "(Tensor input, Tensor other), (Number self, Tensor other) or (Tensor input, Number other)")
    return named(apply(row, input, other), grad_name + "1")


def copysign(input, other):
    """``|input|`` with the sign of ``other``, in the promoted floating dtype (ints give the default float)."""
    dt = _dtype.result_type(input, other)
    if dt.category < _dtype.FLOAT:
        dt = _dtype.get_default_dtype()
    elif dt.category == _dtype.COMPLEX:
        raise NotImplementedError(f'"copysign_cpu" not implemented for \'{TORCH_TYPE_NAMES[dt.name]}\'')
    magnitude = abs(input.to(dt))
    if not isinstance(other, Tensor):
        return -magnitude if math.copysign(1.0, other) < 0 else magnitude
    return where(signbit(other), -magnitude, magnitude)


def deg2rad(input):
    _refuse_complex_angle(input, "deg2rad")
    return input * (math.pi / 180)


def rad2deg(input):
    _refuse_complex_angle(input, "rad2deg")
    return input * (180 / math.pi)


def _refuse_complex_angle(input, name):
    if input.is_complex():
        raise RuntimeError(f"{name} is not supported for complex tensors.")


def logit(input, eps=None):
    if input.is_complex():  # (the cast below would drop the imaginary part)
        raise NotImplementedError(f'"logit_cpu" not implemented for \'{TORCH_TYPE_NAMES[input.dtype.name]}\'')
    if not input.is_floating_point():
        input = input.to(_dtype.get_default_dtype())
    x = input if eps is None else clamp(input, eps, 1 - eps)
    return log(x / (1 - x))


def sinc(input):
    if input.dtype in (_dtype.float16, _dtype.bfloat16):  # torch computes halves in float32 and rounds once
        return sinc(input.float()).to(input.dtype)
    px = input * math.pi
    return where(input == 0, 1.0, sin(px) / where(input == 0, 1.0, px))
