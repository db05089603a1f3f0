"""Elementwise primitives: one row each (kernel, backward in jitorch ops, fusion expression). The binary,
comparison, logical and ternary rows are here; the unary rows in ``pointwise_unary.py`` and the shared refusals in
``pointwise_common.py`` (split for size), re-exported here.

>>> import jitorch
>>> x = jitorch.tensor([0.5, 1.0], requires_grad=True)
>>> y = jitorch.tanh(x) * 2 + 1
>>> y.backward(jitorch.ones(2))
>>> x.grad
tensor([1.5729, 0.8399])
"""
from __future__ import annotations

import math

import numpy as np

from .._dispatch_fast import plain_binary
from .._pointwise_checks import check_integer_divisor, is_integer
from . import bf16_unary, half_cast, native_complex, native_select
from .first_layout import in_first_layout
from .pointwise_common import half_with_number
from .half_cast import converted
from . import pointwise_grad  # noqa: F401 - its fused backward rows register before these, as before the split
from .fmod_ops import FMOD, REMAINDER  # noqa: F401 - re-exported
from .pointwise_common import (_COMPLEX64, _HALVES, _holomorphic, _not_implemented,  # noqa: F401 - re-exported
                               _reject_bool, _reject_bool_complex, _times)
from .table import NOT_DIFFERENTIABLE, Pointwise, defop

_F32 = np.dtype(np.float32)
_BF16 = half_cast.BF16  # (compared by identity: NumPy keeps one bfloat16 dtype object)


# -- binary arithmetic ---------------------------------------------------------------------------------------------
def _laid_out(xp, ufunc, a, b):
    """``ufunc(a, b)``, in ``a``'s memory order where ``a`` and ``b`` have one shape and two layouts (torch's
    TensorIterator takes the first operand's; NumPy's "K" order takes row-major: `first_layout`)."""
    if xp is np and type(a) is np.ndarray and type(b) is np.ndarray and a.ndim > 1 and not a.flags.c_contiguous \
            and a.shape == b.shape and a.strides != b.strides and (out := in_first_layout(ufunc, a, b)) is not None:
        return out
    return ufunc(a, b)


def _add_kernel(xp, a, b):
    if (getattr(a, "dtype", None) is _BF16 or getattr(b, "dtype", None) is _BF16) and (
            out := half_cast.bf16_row(xp, np.add, a, b, commutes=True)) is not None:  # bfloat16: one native pass
        return out
    if type(b) in (int, float) or type(a) in (int, float):
        return _half_scalar_in_half(xp.add, a, b)
    return _laid_out(xp, xp.add, a, b)


ADD = defop("add", _add_kernel, lambda ctx, g: (g, g), Pointwise("{0} + {1}"),
            promotion="promote", meta=True, ufunc="add")


def _sub_kernel(xp, a, b):
    if getattr(a, "dtype", None) is _BF16 and (out := half_cast.bf16_row(xp, np.subtract, a, b)) is not None:
        return out  # bfloat16: one native pass
    if type(b) in (int, float) or type(a) in (int, float):
        return _half_scalar_in_half(xp.subtract, a, b)
    try:
        return _laid_out(xp, xp.subtract, a, b)
    except TypeError:  # the array modules refuse bool - bool, as PyTorch does
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                           "Use the `^` or `logical_xor()` operator instead.") from None


SUB = defop("sub", _sub_kernel, lambda ctx, g: (g, -g if ctx.needs_grad(1) else None), Pointwise("{0} - {1}"),
            promotion="promote", meta=True, ufunc="subtract")




def _half_scalar_in_half(ufunc, a, b):
    """``ufunc(a, b)`` for a half array and a Python number as ATen's CPU add/sub compute it: the number rounded to
    the half type, the result computed in float32 and rounded once. (ml_dtypes' bfloat16 + a Python float computes
    in float64 with the exact number: an ulp off for about one bfloat16 ``x + 0.1`` in seventy.)"""
    pair = _half_and_scalar(a, b)
    if pair is None:
        return ufunc(a, b)
    half = pair[0].dtype.type
    return ufunc(*(x if x is pair[0] else half(x) for x in (a, b)))


def _half_and_scalar(a, b):
    """(half array, Python number) when one operand is each, else None."""
    if type(b) in (int, float) and getattr(a, "dtype", None) in _HALVES:
        return a, b
    if type(a) in (int, float) and getattr(b, "dtype", None) in _HALVES:
        return b, a
    return None


# PyTorch's CPU mul and div of a half tensor by a scalar compute in float32 with the scalar as a float32 ("opmath",
# not first rounded to the half type) and round once: x * 1.1 differs from x * half(1.1) in the last bit for about
# half of the values. (``scalar / x`` is Tensor.__rtruediv__, reciprocal(x) * scalar: a mul.)
def _mul_kernel(xp, a, b):
    if (getattr(a, "dtype", None) is _BF16 or getattr(b, "dtype", None) is _BF16) and (
            out := half_cast.bf16_row(xp, np.multiply, a, b, True, commutes=True)) is not None:  # bfloat16: one pass
        return out
    pair = _half_and_scalar(a, b)
    if pair is None:
        return _laid_out(xp, xp.multiply, a, b)
    x, s = pair
    return converted(xp.multiply(converted(x, _F32), np.float32(s)), x.dtype)


def _div_kernel(xp, a, b):
    if getattr(a, "dtype", None) is _BF16 and (out := half_cast.bf16_row(xp, np.true_divide, a, b, True)) is not None:
        return out  # bfloat16: one native pass
    if type(b) in (int, float) and getattr(a, "dtype", None) in _HALVES:
        return converted(xp.true_divide(converted(a, _F32), np.float32(b)), a.dtype)
    if getattr(a, "dtype", None) == _COMPLEX64 or getattr(b, "dtype", None) == _COMPLEX64:
        out = native_complex.divide(a, b)  # ATen's division (NumPy's differs in last bits and at zero and inf)
        if out is not None:
            return out
    return _laid_out(xp, xp.true_divide, a, b)


# The dispatcher's float16 fast path runs these ufuncs in float32 (``dtype=float32``) for a scalar operand.
_mul_kernel.half_scalar_opmath = _div_kernel.half_scalar_opmath = True


def _mul_backward(ctx, g):
    a, b = ctx.inputs
    return (_times(g, b) if ctx.needs_grad(0) else None), (_times(g, a) if ctx.needs_grad(1) else None)


MUL = defop("mul", _mul_kernel, _holomorphic(_mul_backward), Pointwise("{0} * {1}"), promotion="promote",
            saves="inputs", meta=True, ufunc="multiply", save_if=lambda needs: (needs[1], needs[0]))


def _div_backward(ctx, g):
    a, b = ctx.inputs
    ga = None
    if ctx.needs_grad(0):
        ga = plain_binary(np.true_divide, g, b)
        if ga is None:
            ga = g / b
    gb = -g * ((a / b) / b) if ctx.needs_grad(1) else None  # ATen's order: b * b underflows for tiny b
    return ga, gb


DIV = defop("div", _div_kernel, _holomorphic(_div_backward), Pointwise("{0} / {1}"), promotion="float",
            saves="inputs", meta=True, ufunc="true_divide", save_if=lambda needs: (needs[1], True))


def _pow_kernel(xp, a, b):
    _reject_bool("pow", b)
    if getattr(a, "dtype", None) == np.bool_:  # only a Python bool exponent gets here: x ** True is x, x ** False is 1
        return a.copy() if b else xp.ones_like(a)
    if getattr(a, "dtype", None) is not None and a.dtype.kind in "iu" and getattr(b, "dtype", None) is None \
            and isinstance(b, int) and b < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    if getattr(b, "dtype", None) is not None and b.dtype.kind == "i" and is_integer(a) and bool((b < 0).any()):
        return _int_pow_negative(xp, a, b)
    if isinstance(b, (int, float)) and getattr(a, "dtype", None) is not None and \
            (a.dtype.kind == "f" or a.dtype in _HALVES):
        special = _POW_BY_SCALAR.get(b)
        if special is not None:
            if a.dtype == np.float16:  # ATen runs float16's formula in float and rounds once, bfloat16's in
                # bfloat16 steps (x ** 3: rsqrt's gradient), but bfloat16 x ** -0.5 as pow itself
                return converted(special(xp, converted(a, _F32)), a.dtype)
            if b != -0.5 or a.dtype.kind == "f":
                return special(xp, a)
        if xp is np and (out := half_with_number(np.power, a, b)) is not None:
            return out  # bfloat16 ** a number: NumPy would compute it in float64
    return xp.power(a, b)


def _int_pow_negative(xp, a, b):
    # An integer exponent tensor may hold negative powers (NumPy raises): torch's integer pow gives 1 ** -n = 1,
    # (-1) ** -n = +-1 and 0 elsewhere (the truncated reciprocal), not an error.
    neg = b < 0
    out = xp.power(a, xp.where(neg, 0, b))
    one = xp.where(a == 1, 1, xp.where(a == -1, xp.where(b % 2 == 0, 1, -1), 0))
    return xp.where(neg, one, out).astype(out.dtype, copy=False)


# PyTorch's formulas for a float tensor to these scalar powers (codegen/ir.py's ``_POW_BY_CONSTANT`` for kernels):
# their special values and roundings are what torch returns, not C99 pow's ((-0) ** -0.5 is -inf, x ** 3 rounds twice).
_POW_BY_SCALAR = {
    0.5: lambda xp, a: xp.sqrt(a),
    2: lambda xp, a: a * a,
    3: lambda xp, a: a * a * a,
    -0.5: lambda xp, a: 1 / xp.sqrt(a),
    -1: lambda xp, a: 1 / a,
    -2: lambda xp, a: 1 / (a * a),
}


def _pow_backward(ctx, g):
    # ATen's pow_backward_self / pow_backward_exponent: both gradients are zero where x ** y is constant in the
    # variable (y == 0 for the base, where y * x ** (y - 1) is 0 * inf at x == 0; x == 0 with y >= 0 for the exponent,
    # where x ** y * log(x) is 0 * -inf), masked by a where around the formula so double backward masks too.
    from .. import where, zeros_like
    from ..autograd.grad_mode import GradState

    a, b = ctx.inputs
    ga = gb = None
    if ctx.needs_grad(0):
        if not hasattr(b, "_data"):
            # Building a graph (create_graph), ATen's form y * x ** (y - 1) also for y == 2: its x ** 1 is a pow
            # node, so d/dx of x ** 2 twice stays in the graph, requiring grad, as torch's. Otherwise 2 * x is
            # the same values at a third of the cost.
            square = b == 2 and not GradState.enabled
            ga = zeros_like(a) if b == 0 else g * (b * a if square else b * a ** (b - 1))
        else:
            ga = where(b == 0, 0.0, g * (b * a ** (b - 1)))
    if ctx.needs_grad(1):
        out = ctx.out
        # ATen's test of a non-negative exponent; a complex one must be real and non-negative (complex ``>=`` raises)
        nonneg = (b.imag == 0) & (b.real >= 0) if b.is_complex() else b >= 0
        if hasattr(a, "_data"):
            # the log in the promoted dtype, as ATen's (a float32 base of a float64 exponent: log in float64)
            wide = a if a.dtype == out.dtype else a.to(out.dtype)
            gb = g * where((a == 0) & nonneg, 0.0, out * wide.log())
        elif a == 0:  # a Python number base: 0 ** y
            gb = g * where(nonneg, 0.0, out * float("-inf"))
        else:  # log of a negative Python number is nan, as ATen's Scalar::log
            gb = g * (out * (math.log(a) if a > 0 else float("nan")))
    return ga, gb


POW = defop("pow", _pow_kernel, _holomorphic(_pow_backward), Pointwise("pow({0}, {1})"), promotion="promote",
            saves="both", meta=True, ufunc="power")


def _extremum_backward(ctx, g):
    from .. import where

    # ATen's: the side that lost gets 0 and every other element the gradient (halved on ties), so where either
    # input is NaN (no order) both inputs get the whole gradient.
    a, b = ctx.inputs
    ga = where(a == b, g / 2, where(a < b if ctx.op is MAXIMUM else a > b, 0.0, g)) if ctx.needs_grad(0) else None
    gb = where(a == b, g / 2, where(b < a if ctx.op is MAXIMUM else b > a, 0.0, g)) if ctx.needs_grad(1) else None
    return ga, gb


MAXIMUM = defop("maximum", lambda xp, a, b: xp.maximum(a, b), _extremum_backward, Pointwise("max({0}, {1})"),
                promotion="promote", saves="inputs", meta=True, ufunc="maximum")
MINIMUM = defop("minimum", lambda xp, a, b: xp.minimum(a, b), _extremum_backward, Pointwise("min({0}, {1})"),
                promotion="promote", saves="inputs", meta=True, ufunc="minimum")


def _atan2_backward(ctx, g):
    # ATen's atan2_backward: 1 / (a^2 + b^2) with its infinities (a == b == 0, or squares underflowing) set to 0,
    # so atan2(0, 0) has zero gradients instead of 0 / 0.
    from .. import where

    a, b = ctx.inputs
    recip = (a * a + b * b).reciprocal()
    recip = where(recip.isinf(), 0.0, recip)
    return (g * b * recip if ctx.needs_grad(0) else None), (g * -a * recip if ctx.needs_grad(1) else None)


def _atan2_kernel(xp, a, b):
    _reject_bool_complex("atan2_cpu", a, b)
    return xp.arctan2(a, b)


ATAN2 = defop("atan2", _atan2_kernel, _atan2_backward, Pointwise("atan2({0}, {1})"),
              promotion="float", saves="inputs", meta=True)


def _floor_divide_kernel(xp, a, b):
    _reject_bool_complex("div_floor_cpu", a, b)
    check_integer_divisor(a, b, "floor_divide")
    return xp.floor_divide(a, b)


FLOOR_DIVIDE = defop("floor_divide", _floor_divide_kernel,
                     lambda ctx, g: (g * 0, g * 0 if ctx.needs_grad(1) else None),  # torch's zeros for both
                     Pointwise("floor({0} / {1})"), promotion="promote", meta=True, ufunc="floor_divide")

_F16 = np.dtype(np.float16)

# -- comparisons and logic (no gradient) --------------------------------------------------------------------------
_COMPARISONS = {"eq": ("equal", "=="), "ne": ("not_equal", "!="), "lt": ("less", "<"), "le": ("less_equal", "<="),
                "gt": ("greater", ">"), "ge": ("greater_equal", ">=")}


def _comparison_kernel(ufunc_name):
    ufunc = getattr(np, ufunc_name)

    def kernel(xp, a, b):  # (NumPy widens float16 in software; a number compares as float16, as NumPy's)
        if xp is np and getattr(a, "dtype", None) == _F16 and (out := half_cast.binary(ufunc, a, b)) is not None:
            return out
        if getattr(a, "dtype", None) is _BF16 and (out := half_cast.bf16_row(xp, ufunc, a, b)) is not None:
            return out  # bfloat16: one native pass
        return _laid_out(xp, getattr(xp, ufunc_name), a, b)
    return kernel


for _name, (_ufunc, _sym) in _COMPARISONS.items():
    globals()[_name.upper()] = defop(_name, _comparison_kernel(_ufunc), NOT_DIFFERENTIABLE,
                                     Pointwise(f"{{0}} {_sym} {{1}}"), promotion="compare")

for _name, _sym in (("logical_and", "&&"), ("logical_or", "||"), ("logical_xor", "!=")):
    globals()[_name.upper()] = defop(_name, (lambda u: lambda xp, a, b: getattr(xp, u)(a, b))(_name),
                                     NOT_DIFFERENTIABLE, Pointwise(f"(bool){{0}} {_sym} (bool){{1}}"),
                                     promotion="compare")
LOGICAL_NOT = defop("logical_not", lambda xp, a: xp.logical_not(a), NOT_DIFFERENTIABLE, Pointwise("!{0}"),
                    promotion="compare")

for _name, _ufunc, _sym in (("bitwise_and", "bitwise_and", "&"), ("bitwise_or", "bitwise_or", "|"),
                            ("bitwise_xor", "bitwise_xor", "^")):
    globals()[_name.upper()] = defop(_name, (lambda u: lambda xp, a, b: getattr(xp, u)(a, b))(_ufunc),
                                     NOT_DIFFERENTIABLE, Pointwise(f"{{0}} {_sym} {{1}}"), promotion="integral")


def _shift_kernel(ufunc, kernel_name):
    def kernel(xp, a, b):
        _reject_bool(kernel_name, a, b)  # shifts, unlike &, | and ^, have no bool form in PyTorch
        return getattr(xp, ufunc)(a, b)
    return kernel


BITWISE_LEFT_SHIFT = defop("bitwise_left_shift", _shift_kernel("left_shift", "lshift_cpu"), NOT_DIFFERENTIABLE,
                           Pointwise("{0} << {1}"), promotion="integral")
BITWISE_RIGHT_SHIFT = defop("bitwise_right_shift", _shift_kernel("right_shift", "rshift_cpu"), NOT_DIFFERENTIABLE,
                            Pointwise("{0} >> {1}"), promotion="integral")
BITWISE_NOT = defop("bitwise_not", lambda xp, a: xp.invert(a), NOT_DIFFERENTIABLE, Pointwise("~{0}"),
                    promotion="integral")

for _name, _ufunc in (("isnan", "isnan"), ("isinf", "isinf"), ("isfinite", "isfinite"), ("signbit", "signbit")):
    globals()[_name.upper()] = defop(_name, (lambda u: lambda xp, a: getattr(xp, u)(a))(_ufunc), NOT_DIFFERENTIABLE,
                                     Pointwise(f"{_name}({{0}})"), promotion="compare")


# -- unary math (pointwise_unary.py) -----------------------------------------------------------------------------------
# (split for size; imported here so that the rows register in the order they had)
from .pointwise_unary import (  # noqa: E402,F401
    ABS, ACOS, ACOSH, ASIN, ASINH, ATAN, ATANH, CEIL, COS, COSH, ERF, ERFC, ERFINV, EXP, EXP2, EXPM1, FLOOR, FRAC,
    LOG, LOG10, LOG1P, LOG2, NAN_TO_NUM, NEG, RECIPROCAL, RELU, ROUND, RSQRT, SIGMOID, SIGN, SIN, SINH, SQRT, TAN,
    TANH, TRUNC)


# -- ternary -------------------------------------------------------------------------------------------------------
def _where_backward(ctx, g):
    cond = ctx.inputs[0]
    # (a number zero takes g's dtype, as a 0-d zero of it would: making that tensor took as long as the select)
    gb = None
    if ctx.needs_grad(2):
        from .. import where

        gb = where(cond, 0.0, g)
    return None, (g.where(cond, 0.0) if ctx.needs_grad(1) else None), gb


def _where_kernel(xp, cond, a, b):
    out = native_select.where(cond, a, b)  # float32: a branch-free native select (NumPy's branches per element)
    return xp.where(cond, a, b) if out is None else out


# Only the condition is saved, as ATen's WhereBackward: writing in place to a branch later must not fail backward.
WHERE = defop("where", _where_kernel, _where_backward, Pointwise("{0} ? {1} : {2}"), promotion="promote",
              saves="inputs", meta=True, masks=True, save_if=lambda needs: (True, False, False))


def _reject_bool_clamp(a, lo, hi):
    # ATen picks the kernel by overload: a Python bound takes the Scalar kernels, none of which has a bool version;
    # one tensor bound alone is maximum/minimum (bool is fine); two tensor bounds take clamp_cpu (no bool).
    # Bounds reach the kernel as Python scalars or arrays, so the overload torch chose is still visible here.
    if lo is None or hi is None:
        bound = hi if lo is None else lo
        if not hasattr(bound, "dtype"):
            raise _not_implemented("clamp_max_scalar_cpu" if lo is None else "clamp_min_scalar_cpu", a)
        return
    scalar = not hasattr(lo, "dtype") or not hasattr(hi, "dtype")
    raise _not_implemented("clamp_scalar_cpu" if scalar else "clamp_cpu", a)


def _clamp_kernel(xp, a, lo, hi):
    if lo is None and hi is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    if a.dtype == np.bool_:
        _reject_bool_clamp(a, lo, hi)
    out = native_select.clamp_scalars(CLAMP, a, lo, hi)  # float32, Scalar bounds: one pass (NumPy: a scalar loop)
    if out is not None:
        return out
    # float16 with number bounds (rounded to float16 first, as NumPy's weak numbers) computes widened: NumPy widens in
    # software, and float32's maximum keeps its second operand on a tie of zeros, so x's -0.0 stays, as in torch's
    # clamp. Tensor bounds stay in float16, whose first-operand ties agree with torch's there.
    narrow = xp is np and a.dtype in _HALVES and all(
        b is None or type(b) in (int, float) and half_cast.holds(b, a.dtype) for b in (lo, hi))
    if narrow:  # (the bounds round through float32, as ATen's Scalar conversion; float32 holds them)
        lo, hi = (b if b is None else float(half_cast.scalar_as(b, a.dtype)) for b in (lo, hi))
        if (out := bf16_unary.clamp_numbers(a, lo, hi)) is not None:  # one pass, widened as it loads
            return out
        a16, a = a, converted(a, _F32)
        out = native_select.clamp_scalars(CLAMP, a, lo, hi)  # one native float32 pass, the same ties and NaNs
        if out is not None:
            return converted(out, a16.dtype)
    out = a
    # The bound first: NumPy's maximum/minimum keep the second operand on a tie, so -0.0 clamped at 0 stays -0.0,
    # as ATen's clamp (the native kernel's select does the same).
    if lo is not None:
        out = xp.maximum(lo, out)
    if hi is not None:
        out = xp.minimum(hi, out)
    if narrow:
        return converted(out, a16.dtype) if out is not a else a16.copy()
    return out if out is not a else a.copy()


def _clamp_backward(ctx, g):
    x, lo, hi = ctx.inputs
    keep = None
    if lo is not None:
        keep = x >= lo
    if hi is not None:
        keep = (x <= hi) if keep is None else keep & (x <= hi)
    # Masked with where, not multiplied (as ATen's clamp_backward): a nan or inf upstream gradient at a clamped
    # element gives 0, not nan (Pareto's mean clamps alpha at 1, where the quotient's derivative is infinite).
    gx = g.where(keep, 0.0) if ctx.needs_grad(0) else None
    # Where min > max the result is max: that element's gradient goes to max, none to min (as PyTorch).
    glo = g.where((x < lo) & (lo < hi) if hi is not None else x < lo, 0.0) if ctx.needs_grad(1) else None
    ghi = g.where((x > hi) | (hi < lo) if lo is not None else x > hi, 0.0) if ctx.needs_grad(2) else None
    return gx, glo, ghi


CLAMP = defop("clamp", _clamp_kernel, _clamp_backward, Pointwise(native_select.CLAMP_BOTH), promotion="promote",
              saves="inputs", meta=True)
