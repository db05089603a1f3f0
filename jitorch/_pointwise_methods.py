"""The Tensor methods, operators and in-place forms of the pointwise functions (``x.add_(y)``, ``x + y``,
``x /= y``, ``2 ** x``...), bound onto ``Tensor`` at import: the row's in-place write where there is one, the
composite's result copied into ``self`` (with torch's dtype and shape checks) otherwise.

Split from ``_pointwise.py``, which imports it last, once every function it binds is defined.

>>> import jitorch
>>> x = jitorch.tensor([1.0, 2.0])
>>> (x + 1, 1 / x, x.mul_(3).tolist(), x.addcmul_(x, x).tolist())
(tensor([2., 3.]), tensor([1.0000, 0.5000]), [3.0, 6.0], [12.0, 42.0])
"""
from __future__ import annotations

import numpy as np

from . import _dtype
from . import _pointwise as F
from ._dispatch import apply_inplace, fast_binary, fast_unary
from ._dispatch_inplace import refuse_operand_overlap
from ._dispatch_fast import _OPERANDS
from ._pointwise_arithmetic import check_alpha_range, parsed_ints
from ._pointwise import (_reject_bool_sub, _rsub_operator, _scaled_by_alpha, _sub_operator, addcdiv, addcmul,
                         allclose, bitwise_and, bitwise_left_shift, bitwise_not, bitwise_or, bitwise_right_shift,
                         bitwise_xor, clamp_max, clamp_min, copysign, deg2rad, div, eq, equal, floor_divide, ge, gt,
                         hypot, isclose, le, lerp, logit, lt, ne, pow, rad2deg, reciprocal, remainder, sinc, where)
from ._pointwise_checks import check_alpha, check_bounds, check_float32_numbers
from ._tensor import Tensor
from .ops import pointwise as P
from .ops.scaled_add_ops import ADD_ALPHA, SUB_ALPHA, scaled_add_
from .ops.xlogy_ops import XLOGY


def _inplace(op, **fixed):
    def method(self, *args, **attrs):
        return apply_inplace(op, self, *args, **fixed, **attrs)
    method.__name__ = op.name + "_"
    return method


def _add_(self, other, *, alpha=1):
    if alpha.__class__ is int and alpha == 1 and other.__class__ is not int:
        return apply_inplace(P.ADD, self, other)  # (nothing to check: the hot call)
    return _with_alpha_(P.ADD, self, other, alpha)


def _sub_(self, other, *, alpha=1):
    _reject_bool_sub(self, other)
    return _with_alpha_(P.SUB, self, other, alpha)


def _with_alpha_(row, self, other, alpha):
    """``self.add_(other, alpha=alpha)`` (``sub_``): the fused row where it takes the operands, else the composite."""
    if other.__class__ is int or (alpha != 1 and alpha.__class__ is int):
        row, alpha = parsed_ints(row, other, alpha)
    if alpha != 1 and (done := scaled_add_(ADD_ALPHA if row is P.ADD else SUB_ALPHA, self, other, alpha)) is not None:
        return done  # float32/float64: ATen's fused multiply-add (`ops.scaled_add_ops`)
    check_alpha(alpha, self, other)
    if alpha != 1:
        check_alpha_range(row, alpha, self, other)
        refuse_operand_overlap(self, (other,))  # (the scaled operand below is a new tensor)
        other = _scaled_by_alpha(self, other, alpha)
    return apply_inplace(row, self, other)


def _div_(self, other, *, rounding_mode=None):
    if rounding_mode is None:
        return apply_inplace(P.DIV, self, other)
    refuse_operand_overlap(self, (other,))
    result = div(self, other, rounding_mode=rounding_mode)
    _check_composite_result("div", result, self)
    return self.copy_(result)


def _clamp_(self, min=None, max=None):
    check_bounds(self, min, max)
    check_float32_numbers(self, min, max)
    return apply_inplace(P.CLAMP, self, min, max)


def _rdiv_operator(self, other):
    # PyTorch's Tensor.__rtruediv__ is reciprocal(self) * other: two roundings, which other / self does not match
    # (1.3 / x differs in the last bit for a quarter of float32 values).
    if not isinstance(other, _OPERANDS):
        return NotImplemented
    return reciprocal(self) * other


def _reflect(fn):
    return lambda self, other: fn(other, self)


def _operator(fn):
    """``fn`` as an operator. An operand no op takes (None, a list, a string) gives NotImplemented, so Python falls
    back as it does for torch: ``mask == None`` is False (not an elementwise tensor), ``t != [1]`` True, ``t < None``
    a TypeError."""
    def method(self, other):
        if type(other) is not Tensor and not isinstance(other, _OPERANDS):
            return NotImplemented
        return fn(self, other)
    method.__name__ = f"__{fn.__name__}__"
    return method


def _pos(self):
    if self.dtype is _dtype.bool:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return self


def _invert(self):
    if self.dtype.category >= _dtype.FLOAT:
        raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type tensors")
    return bitwise_not(self)


def _composite_inplace(fn):
    """``self.fn_(...)`` for a composite ``fn``: PyTorch's in-place dtype and shape rules, then a copy into self."""
    def method(self, *args, **kwargs):
        refuse_operand_overlap(self, args + tuple(kwargs.values()))  # as torch's in-place kernel would
        # The composite may save ``self`` for backward; computing from a clone keeps that saved value intact.
        result = fn(self.clone() if self._requires_grad else self, *args, **kwargs)
        _check_composite_result(fn.__name__, result, self)
        return self.copy_(result)
    method.__name__ = fn.__name__ + "_"
    return method


def _real_only_inplace(method, message):
    def inplace(self):
        if self.is_complex():
            raise RuntimeError(message)
        return method(self)
    inplace.__name__ = method.__name__
    return inplace


def _sgn_(self):
    """``sign_`` of a real tensor; ``z / |z|`` written into a complex one (sign refuses complex tensors)."""
    return _composite_inplace(F.sgn)(self) if self.is_complex() else apply_inplace(P.SIGN, self)


def _check_composite_result(name, result, self):
    """torch's in-place rules for a result computed out of place: its dtype may not drop a category (float -> int,
    int -> bool), its shape must be ``self``'s."""
    from ._dispatch import TORCH_TYPE_NAMES

    if result.dtype.category > self.dtype.category:
        raise RuntimeError(f"{name}_: result type {TORCH_TYPE_NAMES[result.dtype.name]} can't be cast to the desired "
                           f"output type {TORCH_TYPE_NAMES[self.dtype.name]}")
    if result.shape != self.shape:
        raise RuntimeError(f"{name}_: output with shape {list(self.shape)} doesn't match the broadcast shape "
                           f"{list(result.shape)}")


_METHODS = {name: getattr(F, name) for name in F.__all__ if name not in ("where", "equal", "allclose", "isclose")}
_METHODS.update(
    where=lambda self, condition, other: where(condition, self, other), equal=equal, allclose=allclose,
    isclose=isclose,
    add_=_add_, sub_=_sub_, subtract_=_sub_, div_=_div_, divide_=_div_, clamp_=_clamp_, clip_=_clamp_,
    __add__=fast_binary(P.ADD, operator=True), __radd__=fast_binary(P.ADD, reflected=True, operator=True),
    __iadd__=_add_,
    __sub__=_sub_operator, __rsub__=_rsub_operator, __isub__=_sub_,
    __mul__=fast_binary(P.MUL, operator=True), __rmul__=fast_binary(P.MUL, reflected=True, operator=True),
    __truediv__=fast_binary(P.DIV, operator=True), __rtruediv__=_rdiv_operator, __itruediv__=_div_,
    __floordiv__=_operator(floor_divide), __rfloordiv__=_operator(_reflect(floor_divide)),
    __mod__=_operator(remainder), __rmod__=_operator(_reflect(remainder)), __pow__=_operator(pow),
    __rpow__=_operator(_reflect(pow)), __neg__=fast_unary(P.NEG),
    __pos__=_pos,
    __abs__=F.abs, __eq__=_operator(eq), __ne__=_operator(ne), __lt__=_operator(lt), __le__=_operator(le),
    __gt__=_operator(gt), __ge__=_operator(ge),
    # PyTorch's &, |, ^ and ~ are the bitwise ops, which on bool tensors are the logical ones.
    __and__=bitwise_and, __or__=bitwise_or, __xor__=bitwise_xor, __invert__=_invert,
    __rand__=_reflect(bitwise_and), __ror__=_reflect(bitwise_or), __rxor__=_reflect(bitwise_xor),
    __lshift__=bitwise_left_shift, __rshift__=bitwise_right_shift, __rlshift__=_reflect(bitwise_left_shift),
    __rrshift__=_reflect(bitwise_right_shift),
)
for _op in (P.MUL, P.POW, P.REMAINDER, P.FMOD, P.FLOOR_DIVIDE, P.MAXIMUM, P.MINIMUM, P.ATAN2, P.NEG, P.ABS, P.EXP,
            P.EXP2, P.EXPM1, P.LOG, P.LOG2, P.LOG10, P.LOG1P, P.SQRT, P.RSQRT, P.SIN, P.COS, P.TAN, P.ASIN, P.ACOS,
            P.ATAN, P.SINH, P.COSH, P.TANH, P.ASINH, P.ACOSH, P.ATANH, P.SIGMOID, P.ERF, P.ERFC, P.ERFINV,
            P.RECIPROCAL, P.RELU, P.FLOOR, P.CEIL, P.TRUNC, P.SIGN, P.FRAC, P.ROUND, P.NAN_TO_NUM, P.EQ, P.NE,
            P.LT, P.LE, P.GT, P.GE, P.LOGICAL_AND, P.LOGICAL_OR, P.LOGICAL_XOR, P.LOGICAL_NOT, P.BITWISE_AND,
            P.BITWISE_OR, P.BITWISE_XOR, P.BITWISE_NOT, P.BITWISE_LEFT_SHIFT, P.BITWISE_RIGHT_SHIFT):
    _METHODS[_op.name + "_"] = _inplace(_op)
_METHODS["abs_"] = _real_only_inplace(_METHODS["abs_"], "In-place abs is not supported for complex tensors.")
_METHODS.update(multiply_=_METHODS["mul_"], negative_=_METHODS["neg_"], absolute_=_METHODS["abs_"],
                fix_=_METHODS["trunc_"], sgn_=_sgn_, square_=lambda self: self.pow_(2),
                __imul__=_METHODS["mul_"], __ipow__=_METHODS["pow_"], __imod__=_METHODS["remainder_"],
                __ifloordiv__=_METHODS["floor_divide_"],
                __iand__=_METHODS["bitwise_and_"], __ior__=_METHODS["bitwise_or_"],
                __ixor__=_METHODS["bitwise_xor_"], __ilshift__=_METHODS["bitwise_left_shift_"],
                __irshift__=_METHODS["bitwise_right_shift_"],
                arcsin_=_METHODS["asin_"], arccos_=_METHODS["acos_"], arctan_=_METHODS["atan_"])


def _ndarray_falls_back(method):
    # torch: ``t += ndarray`` is ``t = t + ndarray`` (a new tensor, promoted as the operator promotes), not an
    # in-place op: the in-place operator declines and Python falls back to the binary one.
    def inplace(self, other):
        if type(other) is np.ndarray:
            return NotImplemented
        return method(self, other)
    inplace.__name__ = method.__name__
    return inplace


for _name in ("__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__", "__iand__",
              "__ior__", "__ixor__", "__ilshift__", "__irshift__"):
    _METHODS[_name] = _ndarray_falls_back(_METHODS[_name])
_METHODS.update({fn.__name__ + "_": _composite_inplace(fn) for fn in (
    addcmul, addcdiv, lerp, hypot, copysign, logit, sinc, deg2rad, rad2deg, clamp_min, clamp_max)})
_METHODS["xlogy_"] = _inplace(XLOGY)
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
