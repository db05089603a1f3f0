"""Operand checks of the pointwise functions, as torch's: ``alpha`` of ``add``/``sub`` against the computed dtype,
Python bounds and operands range-checked into the tensor's dtype (``clamp``, ``where``, ``pow``), integer division's
zero divisor (``fmod``, ``remainder``, ``floor_divide``)."""
from __future__ import annotations

from . import _dtype
from ._tensor import Tensor

__all__ = ["check_alpha", "check_bounds", "check_float32_numbers", "is_integer", "check_integer_divisor"]


def check_alpha(alpha, input, other):
    # torch's alpha_check, against the dtype the op computes in.
    if alpha.__class__ is int:
        return
    category = _dtype.result_type(input, other).category
    if isinstance(alpha, bool) and category != _dtype.BOOL:
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if isinstance(alpha, float) and category < _dtype.FLOAT:
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    if isinstance(alpha, complex) and category != _dtype.COMPLEX:
        raise RuntimeError("For non-complex input tensors, argument alpha must not be a complex number.")


def check_bounds(input, *bounds):
    # torch converts Python bounds to the input's dtype (when they do not promote it) with c10's overflow check:
    # int8.clamp(max=200) raises instead of clamping to a wrapped -56.
    d = input.dtype if isinstance(input, Tensor) else None
    if d is None or d.category > _dtype.FLOAT:
        return
    if d.category == _dtype.FLOAT:
        for b in bounds:  # a complex bound converts to double for a float tensor (an integer one refuses it)
            if b.__class__ is complex and b.imag:
                raise RuntimeError("value cannot be converted to type double without overflow")
            if b.__class__ is int and not -2 ** 63 <= b < 2 ** 64:
                _dtype.check_parsed_int(b)
        if d.itemsize > 2:
            return  # (the common float32 case: nothing more to check)
    for b in bounds:  # (checked_scalar refuses an int the argument parser would)
        if b is not None and not isinstance(b, Tensor) and _dtype.result_type(input, b) is input.dtype:
            _dtype.checked_scalar(b, input.dtype)


FLOAT32_MAX = _dtype._FLOAT_MAX[_dtype.float32]


def check_float32_numbers(input, *numbers):
    # c10's checked conversion of a double Scalar into a float32 tensor's type (clamp's bounds, where's branch):
    # a finite number past float32's range raises; inf and nan convert. An integer tensor with a float number
    # computes in the default dtype.
    for b in numbers:
        if b.__class__ is float and not -FLOAT32_MAX <= b <= FLOAT32_MAX and abs(b) != float("inf") and b == b:
            d = input.dtype if isinstance(input, Tensor) else None
            if d is _dtype.float32 or (d is not None and d.category < _dtype.FLOAT
                                       and _dtype.get_default_dtype() is _dtype.float32):
                raise RuntimeError("value cannot be converted to type float without overflow")


def is_integer(x):
    """Whether an array operand (its dtype) or a Python number is integral (bool included)."""
    dt = getattr(x, "dtype", None)
    return dt.kind in "iub" if dt is not None else isinstance(x, int)


def check_integer_divisor(a, b, op):
    # Either side may be a weak Python scalar (``True // int_tensor``): the division is integral when both are.
    if is_integer(a) and is_integer(b):
        if (b == 0) if not hasattr(b, "shape") else bool((b == 0).any()):
            raise RuntimeError(f"{op}: ZeroDivisionError (integer division by zero)")
