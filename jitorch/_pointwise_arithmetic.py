"""The arithmetic with torch's own rules past a plain row call: ``add``/``sub`` with ``alpha`` (ATen's fused
multiply-add, or the scaling in the result's dtype) and the refusal of bool subtraction, ``div``'s rounding modes
(an exact integer ``trunc``), and the powers (``pow``'s shortcuts for ``x ** 2`` and a float tensor ** a number,
``float_power``, ``square``). Split from ``_pointwise.py``, which re-exports them.

>>> import jitorch
>>> a = jitorch.tensor([7, -7])
>>> jitorch.sub(a, 1, alpha=2), jitorch.div(a, 2, rounding_mode="trunc"), jitorch.square(a)
(tensor([ 5, -9]), tensor([ 3, -3]), tensor([49, 49]))
"""
from __future__ import annotations

import numpy as np

from . import _dtype
from ._dispatch import TORCH_TYPE_NAMES, apply, fast_binary
from ._dispatch_fast import _OPERANDS
from ._grad_state import GradState
from .autograd.graph import named
from ._pointwise_checks import check_alpha, check_bounds
from ._tensor import Tensor
from .ops import pointwise as P
from .ops.scaled_add_ops import ADD_ALPHA, SUB_ALPHA, scaled_add
# _pointwise imports this module near its end, once these are defined.
from ._pointwise import _numbers_as_tensor, _write_out, where


def add(input, other, *, alpha=1, out=None):
    """``input + alpha * other`` (on float32/float64, ATen's fused multiply-add: `ops.scaled_add_ops`)."""
    return _with_alpha(ADD_ALPHA, P.ADD, "add", _numbers_as_tensor(input, other), other, alpha, out)


def _with_alpha(scaled_row, row, name, input, other, alpha, out):
    """``row`` of ``input`` and ``alpha * other``: the fused row where it takes the operands, else the composite."""
    if other.__class__ is int or (alpha != 1 and alpha.__class__ is int):
        row, alpha = parsed_ints(row, other, alpha)
        if row is P.ADD:
            scaled_row = ADD_ALPHA
    if alpha != 1:
        result = scaled_add(scaled_row, input, other, alpha)
        if result is not None:
            return _write_out(result, out, name, inputs=(input, other))
    check_alpha(alpha, input, other)
    if alpha != 1:
        check_alpha_range(row, alpha, input, other)
        scaled = _scaled_by_alpha(input, other, alpha)
        return _write_out(apply(row, input, scaled), out, name, inputs=(input, other))
    result = apply(row, input, other)
    return result if out is None else _write_out(result, out, name, inputs=(input, other))


def parsed_ints(row, other, alpha):
    """``(row, alpha)`` of ``add``/``sub`` (`P.ADD`/`P.SUB`) after torch's argument parser read their Python ints:
    an int Scalar is an int64 or a uint64 (OverflowError beyond). ATen subtracts by adding ``-alpha`` negated in
    64-bit integers, which wraps for ``-2**63`` and a uint64: such a ``sub`` is the ``add`` it computes."""
    if other.__class__ is int:
        _dtype.check_parsed_int(other)
    if alpha.__class__ is int and not -2 ** 63 < alpha < 2 ** 63:
        _dtype.check_parsed_int(alpha)
        if row is P.SUB:
            return P.ADD, (2 ** 63 - alpha) % 2 ** 64 - 2 ** 63
    return row, alpha


def check_alpha_range(row, alpha, input, other):
    """c10's checked conversion of an int ``alpha`` (``-alpha`` for ``sub``) to the computed dtype: refused where it
    overflows (``int8 + 200 * t``, a uint64 alpha of an int64 sum), as torch does instead of wrapping it."""
    if alpha.__class__ is int and not -128 <= alpha <= 127:  # (every dtype takes these)
        _dtype.checked_scalar(-alpha if row is P.SUB else alpha, _dtype.result_type(input, other))


def _scaled_by_alpha(input, other, alpha):
    """``alpha * other`` as torch computes it inside ``add``/``sub`` of the dtypes `scaled_add` leaves (integers,
    bool, half types, complex): in the dtype of the result. A uint8 ``other``
    of an int16 sum must not wrap at 255 before the scaling, a bfloat16 one of a float32 sum must not round to its own
    precision after it, and a bool sum stays bool (``alpha`` converts to the result dtype, never promotes it)."""
    common = _dtype.result_type(input, other)
    if not isinstance(other, Tensor):
        scaled = other * alpha
        if common.category == _dtype.INT and scaled.__class__ is int and not -2 ** 63 <= scaled < 2 ** 63:
            scaled = (scaled + 2 ** 63) % 2 ** 64 - 2 ** 63  # ATen's product wraps in the integer dtype
        return bool(scaled) if common is _dtype.bool else scaled
    if other.dtype is not common:
        other = other.to(common)
    other = apply(P.MUL, other, alpha)
    return other if other.dtype is common else other.to(common)


def _reject_bool_sub(a, b):
    # PyTorch refuses any bool operand of a subtraction (tensor or Python bool), whatever the other operand is;
    # its message differs when both operands are bool.
    flags = [x.__class__ is bool or (x.__class__ is Tensor and x._data.dtype == bool) for x in (a, b)]
    if all(flags):
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                           "Use the `^` or `logical_xor()` operator instead.")
    if any(flags):
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying "
                           "to invert a mask, use the `~` or `logical_not()` operator instead.")


def _times_itself(x, _two, out=None, **kw):
    return np.multiply(x, x, out=out, **kw)


def _pow_by_number(x, exponent, out=None, **kw):
    return P.POW.kernel(np, x, exponent)  # (torch's formulas for x ** 0.5, ** -1...: NumPy's power rounds otherwise)


_fast_square = fast_binary(P.POW, array_fn=_times_itself)  # pow(x, 2) recorded as pow, computed as x * x
_fast_pow = fast_binary(P.POW, array_fn=_pow_by_number)  # a float tensor ** a number past the dispatcher's promotion
_fast_mul = fast_binary(P.MUL)
_fast_sub, _fast_rsub = fast_binary(P.SUB, operator=True), fast_binary(P.SUB, reflected=True, operator=True)


def _sub_operator(self, other):
    if not isinstance(other, _OPERANDS):
        return NotImplemented
    _reject_bool_sub(self, other)
    return _fast_sub(self, other)


def _rsub_operator(self, other):
    if not isinstance(other, _OPERANDS):
        return NotImplemented
    _reject_bool_sub(self, other)
    return named(_fast_rsub(self, other), "RsubBackward1")  # ``1 - x`` is torch's rsub


def sub(input, other, *, alpha=1, out=None):
    """``input - alpha * other``."""
    input = _numbers_as_tensor(input, other)
    _reject_bool_sub(input, other)
    return _with_alpha(SUB_ALPHA, P.SUB, "sub", input, other, alpha, out)


subtract = sub


def div(input, other, *, rounding_mode=None, out=None):
    """True division, or ``rounding_mode='floor'`` / ``'trunc'``."""
    input = _numbers_as_tensor(input, other)
    if rounding_mode is None:
        result = apply(P.DIV, input, other)
    elif rounding_mode == "floor":
        result = apply(P.FLOOR_DIVIDE, input, other)
    elif rounding_mode == "trunc":
        result = _div_trunc(input, other)
    else:
        raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                         f"'{rounding_mode}'")
    return _write_out(result, out, "div", inputs=(input, other))


def _div_trunc(input, other):
    dt = _dtype.result_type(input, other)
    if dt.category in (_dtype.BOOL, _dtype.COMPLEX):
        raise NotImplementedError(f"\"div_trunc_cpu\" not implemented for '{TORCH_TYPE_NAMES[dt.name]}'")
    if dt.category == _dtype.FLOAT:
        a, b = (x.detach() if isinstance(x, Tensor) else x for x in (input, other))
        q = apply(P.TRUNC, apply(P.DIV, a, b))
        if not any(isinstance(x, Tensor) and x.requires_grad for x in (input, other)):
            return q
        # PyTorch's gradient of a rounded division is zero, also where other == 0 (where trunc's zero times 1/other
        # would be nan): floor division's zero-gradient row links q to the inputs. Both are nan at the same places.
        return where(q.isnan(), apply(P.FLOOR_DIVIDE, input, other), q)
    # Integers stay exact (a float quotient rounds above 2**24 or 2**53) and division by zero raises as floor
    # division does: the floor quotient is one below the truncated one where it is negative and inexact.
    try:
        q = apply(P.FLOOR_DIVIDE, input, other)
    except RuntimeError as e:
        if "ZeroDivisionError" not in str(e):
            raise
        raise RuntimeError("div(rounding_mode='trunc'): ZeroDivisionError (integer division by zero)") from None
    return q + ((q * other != input) & (q < 0))


divide = div


def pow(input, exponent, *, out=None):
    """``input ** exponent`` (either may be a scalar)."""
    if type(exponent) is int and exponent < 0 and isinstance(input, Tensor) and input.dtype.category == _dtype.INT:
        # Checked before the dispatcher wraps the scalar into the input's dtype (uint8 ** -3 would be ** 253).
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    if isinstance(exponent, (int, float)) and not isinstance(exponent, bool) and isinstance(input, Tensor):
        check_bounds(input, exponent)
        # x * x has the input's dtype, which is pow's only for an int 2 on a non-bool tensor (bool ** 2 is int64) or
        # any 2 on a float one: an integer tensor ** 2.0 promotes to the default float dtype. Recorded for autograd,
        # it stays pow (one PowBackward0 edge, as torch's: x * x gives x two gradients, summed with x's others in
        # another order, which rounds differently).
        if exponent == 2 and input.dtype is not _dtype.bool and not (input._requires_grad and GradState.enabled) and (
                type(exponent) is int or input.dtype.is_floating_point or input.dtype.is_complex):
            return _write_out(_fast_mul(input, input), out, "pow", inputs=(input,))
        if exponent == 2 and input.dtype is not _dtype.bool and out is None:
            return _fast_square(input, exponent)  # a float's square on the shortcut (NumPy's power squares exactly)
        if out is None:
            return _fast_pow(input, exponent)
    result = apply(P.POW, input, exponent)
    if not isinstance(input, Tensor) and out is None:
        result = result.contiguous()  # ATen's pow(Scalar, Tensor) writes a new row-major tensor
    if isinstance(exponent, Tensor):  # torch's overloads: Tensor_Tensor (1), Scalar_Tensor (2)
        named(result, "PowBackward1" if isinstance(input, Tensor) else "PowBackward2")
    return _write_out(result, out, "pow", inputs=(input, exponent))


def float_power(input, exponent):
    # torch computes in double, or complex double when either side is complex (a .double() would drop the imaginary
    # part).
    def is_complex(v):
        return v.dtype.is_complex if isinstance(v, Tensor) else isinstance(v, complex)

    wide = _dtype.complex128 if is_complex(input) or is_complex(exponent) else _dtype.float64
    x = input.to(wide) if isinstance(input, Tensor) else input
    e = exponent.to(wide) if isinstance(exponent, Tensor) else exponent
    return pow(x, e)


def square(input, *, out=None):
    if input.dtype is _dtype.bool:  # PyTorch's square is pow(x, 2): a bool tensor with an int exponent is int64
        return _write_out(apply(P.POW, input, 2), out, "square", inputs=(input,))
    if out is None and input._requires_grad and GradState.enabled:
        return _fast_square(input, 2)  # one PowBackward0 edge, as torch's (see `pow`)
    return _write_out(apply(P.MUL, input, input), out, "square", inputs=(input,))
