"""Elementwise primitives: one row each (kernel, backward in jitorch ops, fusion expression).

>>> import jitorch
>>> x = jitorch.tensor([0.5, 1.0], requires_grad=True)
>>> y = jitorch.tanh(x) * 2 + 1
>>> y.backward(jitorch.ones(2))
>>> x.grad
tensor([1.5729, 0.8399])
"""
from __future__ import annotations

import math
import os

import ml_dtypes as _ml_dtypes
import numpy as np

from .. import _dtype
from .._dispatch_fast import plain_binary
from .._memory_format import preserve_copy
from ..runtime import special_module
from . import native_eager
from . import pointwise_grad
from .table import NOT_DIFFERENTIABLE, Pointwise, defop


def _not_implemented(kernel_name, a):
    """PyTorch's dtype-dispatch error: ``NotImplementedError`` (a ``RuntimeError``) naming the kernel and dtype."""
    from .._dispatch import TORCH_TYPE_NAMES
    from .._dtype import FROM_NP

    return NotImplementedError(f'"{kernel_name}" not implemented for \'{TORCH_TYPE_NAMES[FROM_NP[a.dtype].name]}\'')


def _reject_bool(kernel_name, *arrays):
    # Kernels receive promoted operands: a bool array here means the op computes in bool, which PyTorch rejects.
    for a in arrays:
        if getattr(a, "dtype", None) == np.bool_:
            raise _not_implemented(kernel_name, a)


def _reject_bool_complex(kernel_name, *arrays):
    # Rounding division, remainders and atan2 have no complex kernels in PyTorch (NumPy's would raise TypeError).
    _reject_bool(kernel_name, *arrays)
    for a in arrays:
        if getattr(a, "dtype", None) is not None and a.dtype.kind == "c":
            raise _not_implemented(kernel_name, a)

def _holomorphic(backward):
    """The backward of a holomorphic op for complex values too, from its real formula ``g * f'(x)``.

    PyTorch's gradient at complex ``z`` is ``g * conj(f'(z))`` (the conjugate Wirtinger derivative), which is the real
    formula run on ``conj(g)`` and conjugated: a row keeps one formula for both, and real gradients skip the wrapper.
    """
    def run(ctx, *grads):
        g = grads[0]
        try:
            real = g is None or g._data.dtype.kind != "c"
        except RuntimeError:  # a sparse gradient (sparse=True embeddings of a computed weight) has no array
            real = not g.is_complex()
        if real:
            return backward(ctx, *grads)
        out = backward(ctx, *(x.conj() if x is not None else None for x in grads))
        if isinstance(out, tuple):
            return tuple(o.conj() if o is not None else None for o in out)
        return out.conj()

    return run


# -- binary arithmetic ---------------------------------------------------------------------------------------------
def _add_kernel(xp, a, b):
    if type(b) in (int, float) or type(a) in (int, float):
        return _half_scalar_in_half(xp.add, a, b)
    return xp.add(a, b)


ADD = defop("add", _add_kernel, lambda ctx, g: (g, g), Pointwise("{0} + {1}"),
            promotion="promote", meta=True, ufunc="add")


def _sub_kernel(xp, a, b):
    if type(b) in (int, float) or type(a) in (int, float):
        return _half_scalar_in_half(xp.subtract, a, b)
    try:
        return xp.subtract(a, b)
    except TypeError:  # the array modules refuse bool - bool, as PyTorch does
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                           "Use the `^` or `logical_xor()` operator instead.") from None


SUB = defop("sub", _sub_kernel, lambda ctx, g: (g, -g if ctx.needs_grad(1) else None), Pointwise("{0} - {1}"),
            promotion="promote", meta=True, ufunc="subtract")


_HALVES = _dtype.HALF_NP


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
    pair = _half_and_scalar(a, b)
    if pair is None:
        return xp.multiply(a, b)
    x, s = pair
    return xp.multiply(x.astype(np.float32), np.float32(s)).astype(x.dtype)


def _div_kernel(xp, a, b):
    if type(b) in (int, float) and getattr(a, "dtype", None) in _HALVES:
        return xp.true_divide(a.astype(np.float32), np.float32(b)).astype(a.dtype)
    return xp.true_divide(a, b)


# The dispatcher's float16 fast path runs these ufuncs in float32 (``dtype=float32``) for a scalar operand.
_mul_kernel.half_scalar_opmath = _div_kernel.half_scalar_opmath = True


def _times(g, other):
    out = plain_binary(np.multiply, g, other)  # first-order backward: the product without its dispatch
    return g * other if out is None else out


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
    gb = -g * a / (b * b) if ctx.needs_grad(1) else None
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
    if getattr(b, "dtype", None) is not None and b.dtype.kind == "i" and _is_integer(a) and bool((b < 0).any()):
        return _int_pow_negative(xp, a, b)
    if isinstance(b, (int, float)) and getattr(a, "dtype", None) is not None and \
            (a.dtype.kind == "f" or a.dtype in _HALVES):
        special = _POW_BY_SCALAR.get(b)
        if special is not None:
            if a.dtype == np.float16:  # ATen runs float16's formula in float and rounds once, bfloat16's in
                # bfloat16 steps (x ** 3: rsqrt's gradient), but bfloat16 x ** -0.5 as pow itself
                return special(xp, a.astype(np.float32)).astype(a.dtype)
            if b != -0.5 or a.dtype.kind == "f":
                return special(xp, a)
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

    a, b = ctx.inputs
    ga = gb = None
    if ctx.needs_grad(0):
        if not hasattr(b, "_data"):
            # (x ** 1 is x: ATen's pow(x, 1) is a copy)
            ga = zeros_like(a) if b == 0 else g * (b * a if b == 2 else b * a ** (b - 1))
        else:
            ga = where(b == 0, 0.0, g * (b * a ** (b - 1)))
    if ctx.needs_grad(1):
        out = ctx.out
        # ATen's test of a non-negative exponent; a complex one must be real and non-negative (complex ``>=`` raises)
        nonneg = (b.imag == 0) & (b.real >= 0) if b.is_complex() else b >= 0
        if hasattr(a, "_data"):
            gb = g * where((a == 0) & nonneg, 0.0, out * a.log())
        elif a == 0:  # a Python number base: 0 ** y
            gb = g * where(nonneg, 0.0, out * float("-inf"))
        else:  # log of a negative Python number is nan, as ATen's Scalar::log
            gb = g * (out * (math.log(a) if a > 0 else float("nan")))
    return ga, gb


POW = defop("pow", _pow_kernel, _holomorphic(_pow_backward), Pointwise("pow({0}, {1})"), promotion="promote",
            saves="both", meta=True, ufunc="power")


def _extremum_backward(ctx, g):
    from .. import where

    a, b = ctx.inputs
    ga = where(a == b, g / 2, where(a > b if ctx.op is MAXIMUM else a < b, g, 0.0)) if ctx.needs_grad(0) else None
    gb = where(a == b, g / 2, where(b > a if ctx.op is MAXIMUM else b < a, g, 0.0)) if ctx.needs_grad(1) else None
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


def _remainder_backward(ctx, g):
    a, b = ctx.inputs
    return g, (-g * (a / b).floor() if ctx.needs_grad(1) else None)


def _fmod_backward(ctx, g):
    a, b = ctx.inputs
    return g, (-g * (a / b).trunc() if ctx.needs_grad(1) else None)


def _is_integer(x):
    dt = getattr(x, "dtype", None)
    return dt.kind in "iub" if dt is not None else isinstance(x, int)


def _check_int_zero(xp, a, b, op):
    # Either side may be a weak Python scalar (``True // int_tensor``): the division is integral when both are.
    if _is_integer(a) and _is_integer(b):
        if (b == 0) if not hasattr(b, "shape") else bool((b == 0).any()):
            raise RuntimeError(f"{op}: ZeroDivisionError (integer division by zero)")


def _remainder_kernel(xp, a, b):
    _reject_bool_complex("remainder_cpu", a, b)
    _check_int_zero(xp, a, b, "remainder")
    return xp.remainder(a, b)


def _fmod_kernel(xp, a, b):
    _reject_bool_complex("fmod_cpu", a, b)
    _check_int_zero(xp, a, b, "fmod")
    return xp.fmod(a, b)


def _floor_divide_kernel(xp, a, b):
    _reject_bool_complex("div_floor_cpu", a, b)
    _check_int_zero(xp, a, b, "floor_divide")
    return xp.floor_divide(a, b)


REMAINDER = defop("remainder", _remainder_kernel, _remainder_backward, Pointwise("remainder({0}, {1})"),
                  promotion="promote", saves="inputs", meta=True, ufunc="remainder")
FMOD = defop("fmod", _fmod_kernel, _fmod_backward, Pointwise("fmod({0}, {1})"), promotion="promote",
             saves="inputs", meta=True)
FLOOR_DIVIDE = defop("floor_divide", _floor_divide_kernel,
                     lambda ctx, g: (g * 0, g * 0 if ctx.needs_grad(1) else None),  # torch's zeros for both
                     Pointwise("floor({0} / {1})"), promotion="promote", meta=True, ufunc="floor_divide")

# -- comparisons and logic (no gradient) --------------------------------------------------------------------------
_COMPARISONS = {"eq": ("equal", "=="), "ne": ("not_equal", "!="), "lt": ("less", "<"), "le": ("less_equal", "<="),
                "gt": ("greater", ">"), "ge": ("greater_equal", ">=")}
for _name, (_ufunc, _sym) in _COMPARISONS.items():
    globals()[_name.upper()] = defop(_name, (lambda u: lambda xp, a, b: getattr(xp, u)(a, b))(_ufunc),
                                     NOT_DIFFERENTIABLE, Pointwise(f"{{0}} {_sym} {{1}}"), promotion="compare")

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


# -- unary math ----------------------------------------------------------------------------------------------------
def _unary(name, kernel, backward, expr, saves="inputs", promotion="float", ufunc=None, holomorphic=False):
    backward = _holomorphic(backward) if holomorphic else backward
    return defop(name, kernel, backward, Pointwise(expr), promotion=promotion, saves=saves, ufunc=ufunc)


def _special(name):
    # scipy.special has no half-precision loops: it returns float32/float64, so cast back to the input's dtype.
    return lambda xp, a: getattr(special_module(xp), name)(a).astype(a.dtype, copy=False)


def _x(ctx):
    return ctx.inputs[0]


def _neg_kernel(xp, a):
    if a.dtype == np.bool_:
        raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert "
                           "a mask, use the `~` or `logical_not()` operator instead.")
    return xp.negative(a)


def _abs_kernel(xp, a):
    _reject_bool("abs_cpu", a)
    return xp.absolute(a)


NEG = _unary("neg", _neg_kernel, lambda ctx, g: -g, "-{0}", saves=None, promotion="keep", ufunc="negative")
ABS = _unary("abs", _abs_kernel, lambda ctx, g: g * _x(ctx).sgn(), "abs({0})", promotion="keep", ufunc="absolute")
EXP = _unary("exp", lambda xp, a: xp.exp(a), lambda ctx, g: _times(g, ctx.out), "exp({0})", saves="outputs",
             ufunc="exp", holomorphic=True)
EXP2 = _unary("exp2", lambda xp, a: xp.exp2(a), lambda ctx, g: g * ctx.out * math.log(2.0), "exp2({0})",
              saves="outputs", holomorphic=True)
EXPM1 = _unary("expm1", lambda xp, a: xp.expm1(a), lambda ctx, g: g * (ctx.out + 1), "expm1({0})", saves="outputs",
               holomorphic=True)
LOG = _unary("log", lambda xp, a: xp.log(a), lambda ctx, g: g / _x(ctx), "log({0})", ufunc="log", holomorphic=True)
LOG2 = _unary("log2", lambda xp, a: xp.log2(a), lambda ctx, g: g / (_x(ctx) * math.log(2.0)), "log2({0})",
              holomorphic=True)
LOG10 = _unary("log10", lambda xp, a: xp.log10(a), lambda ctx, g: g / (_x(ctx) * math.log(10.0)), "log10({0})",
               holomorphic=True)
LOG1P = _unary("log1p", lambda xp, a: xp.log1p(a), lambda ctx, g: g / (_x(ctx) + 1), "log1p({0})", holomorphic=True)
SQRT = _unary("sqrt", lambda xp, a: xp.sqrt(a), lambda ctx, g: g / (2 * ctx.out), "sqrt({0})", saves="outputs",
              ufunc="sqrt", holomorphic=True)
def _aten_half_block():
    """Elements of a half type in one vector of ATen's vectorized CPU loop (64 bytes where PyTorch picks its
    AVX-512 kernels, 32 otherwise); its scalar loop takes the remainder."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # pragma: no cover - NumPy 1.x
        from numpy.core._multiarray_umath import __cpu_features__ as features
    avx512 = all(features.get(f, False) for f in ("AVX512F", "AVX512BW", "AVX512VL", "AVX512DQ"))
    chosen = os.environ.get("ATEN_CPU_CAPABILITY", "").lower()
    return 32 if avx512 and chosen in ("", "avx512") else 16


_HALF_BLOCK = _aten_half_block()


def _rsqrt_kernel(xp, a):
    out = 1 / xp.sqrt(a)
    if a.dtype in _HALVES and a.ndim and (a.flags.c_contiguous or a.flags.f_contiguous):
        # ATen's vectorized loop computes a half type's rsqrt in float and rounds once, over whole vectors in memory
        # order; its scalar loop (the last size % vector elements, and inputs it cannot run as one contiguous row)
        # rounds the sqrt too, as above.
        body = a.size - a.size % _HALF_BLOCK
        if body and out.flags.c_contiguous == a.flags.c_contiguous:
            flat, values = (out, a) if a.flags.c_contiguous else (out.T, a.T)
            flat.reshape(-1)[:body] = 1 / xp.sqrt(values.reshape(-1)[:body].astype(np.float32))
    return out


RSQRT = _unary("rsqrt", _rsqrt_kernel, lambda ctx, g: -0.5 * g * ctx.out ** 3, "rsqrt({0})",
               saves="outputs", holomorphic=True)
SIN = _unary("sin", lambda xp, a: xp.sin(a), lambda ctx, g: g * _x(ctx).cos(), "sin({0})", holomorphic=True)
COS = _unary("cos", lambda xp, a: xp.cos(a), lambda ctx, g: -g * _x(ctx).sin(), "cos({0})", holomorphic=True)
TAN = _unary("tan", lambda xp, a: xp.tan(a), lambda ctx, g: g * (1 + ctx.out * ctx.out), "tan({0})",
             saves="outputs", holomorphic=True)
ASIN = _unary("asin", lambda xp, a: xp.arcsin(a), lambda ctx, g: g * (1 - _x(ctx) ** 2).rsqrt(), "asin({0})",
              holomorphic=True)
ACOS = _unary("acos", lambda xp, a: xp.arccos(a), lambda ctx, g: -g * (1 - _x(ctx) ** 2).rsqrt(), "acos({0})",
              holomorphic=True)
ATAN = _unary("atan", lambda xp, a: xp.arctan(a), lambda ctx, g: g / (1 + _x(ctx) ** 2), "atan({0})", holomorphic=True)
SINH = _unary("sinh", lambda xp, a: xp.sinh(a), lambda ctx, g: g * _x(ctx).cosh(), "sinh({0})", holomorphic=True)
COSH = _unary("cosh", lambda xp, a: xp.cosh(a), lambda ctx, g: g * _x(ctx).sinh(), "cosh({0})", holomorphic=True)
def _tanh_backward(ctx, g):
    return pointwise_grad.tanh_backward(g, ctx.out)


def _sigmoid_backward(ctx, g):
    return pointwise_grad.sigmoid_backward(g, ctx.out)


TANH = _unary("tanh", lambda xp, a: xp.tanh(a), _tanh_backward, "tanh({0})",
              saves="outputs", ufunc="tanh", holomorphic=True)
ASINH = _unary("asinh", lambda xp, a: xp.arcsinh(a), lambda ctx, g: g * (_x(ctx) ** 2 + 1).rsqrt(), "asinh({0})",
               holomorphic=True)
ACOSH = _unary("acosh", lambda xp, a: xp.arccosh(a), lambda ctx, g: g * (_x(ctx) ** 2 - 1).rsqrt(), "acosh({0})",
               holomorphic=True)
ATANH = _unary("atanh", lambda xp, a: xp.arctanh(a), lambda ctx, g: g / (1 - _x(ctx) ** 2), "atanh({0})",
               holomorphic=True)


_SIGMOID_DIRECT = (np.dtype(np.float32), np.dtype(np.float64))


def _sigmoid_kernel(xp, a):
    out = native_eager.pointwise(SIGMOID, a)  # one pass instead of the ones below
    if out is not None:
        return out
    if type(a) is np.ndarray and a.dtype in _SIGMOID_DIRECT:
        # ATen's own formula, 1 / (1 + exp(-a)), in three passes over one buffer: exp overflows to inf below about
        # -88 (float32), where the result is the exact limit 0, as torch's.
        with np.errstate(over="ignore"):
            e = np.exp(np.negative(a))
        e += 1
        return np.reciprocal(e, out=e) if a.ndim else np.reciprocal(e)  # (0-d: NumPy scalars, no buffer to reuse)
    if a.dtype in _HALVES:  # ATen computes in float and rounds once (the half-precision steps below are off by
        # an ulp for about a third of bfloat16 inputs)
        return _sigmoid_kernel(xp, a.astype(np.float32)).astype(a.dtype)
    if a.dtype.kind == "c":  # |a| and a >= 0 mean nothing for complex numbers: the formula itself, as torch's
        return (1 / (1 + xp.exp(-a))).astype(a.dtype, copy=False)
    # exp(-|a|) never overflows (halves would overflow long before their result underflows): the stable logistic.
    e = xp.exp(-xp.abs(a))
    return xp.where(a >= 0, 1 / (1 + e), e / (1 + e)).astype(a.dtype, copy=False)


SIGMOID = _unary("sigmoid", _sigmoid_kernel, _sigmoid_backward, "sigmoid({0})",
                 saves="outputs", holomorphic=True)
_SPECIAL_ERF = _special("erf")


def _erf_kernel(xp, a):
    out = native_eager.pointwise(ERF, a)  # float32 on the CPU: SciPy's loop is about 30x slower
    return _SPECIAL_ERF(xp, a) if out is None else out


ERF = _unary("erf", _erf_kernel, lambda ctx, g: g * (2 / math.sqrt(math.pi)) * (-_x(ctx) ** 2).exp(), "erf({0})")
ERFC = _unary("erfc", _special("erfc"), lambda ctx, g: g * (-2 / math.sqrt(math.pi)) * (-_x(ctx) ** 2).exp(),
              "erfc({0})")
ERFINV = _unary("erfinv", _special("erfinv"), lambda ctx, g: g * (math.sqrt(math.pi) / 2) * (ctx.out ** 2).exp(),
                "erfinv({0})", saves="outputs")
RECIPROCAL = _unary("reciprocal", lambda xp, a: xp.reciprocal(a), lambda ctx, g: -g * (ctx.out * ctx.out),
                    "1 / {0}", saves="outputs", holomorphic=True)
def _relu_kernel(xp, a):
    if a.dtype == np.bool_:
        raise RuntimeError("Boolean inputs not supported for relu")
    return xp.maximum(a, 0).astype(a.dtype, copy=False)


RELU = _unary("relu", _relu_kernel, lambda ctx, g: pointwise_grad.threshold_backward(g, ctx.out), "max({0}, 0)",
              saves="outputs", promotion="keep")


def _zero_grad(ctx, g):
    return g * 0


def _step_kernel(name):
    # Integers are already whole: a copy. bfloat16 has NumPy kind "V", so test for integer kinds, not float ones.
    def kernel(xp, a):
        if a.dtype.kind in "iu":
            return a.copy()
        _reject_bool(f"{name}_vml_cpu", a)
        return getattr(xp, name)(a)
    return kernel


def _sign_kernel(xp, a):
    if a.dtype == np.bool_:
        return a.copy()
    return xp.where(a != a, a.dtype.type(0), xp.sign(a))  # PyTorch's sign(nan) is 0, NumPy's is nan


def _frac_kernel(xp, a):
    if a.dtype.kind in "biu":
        raise _not_implemented("frac_cpu", a)
    return a - xp.trunc(a)


# Step functions: PyTorch defines their gradient as zero everywhere.
FLOOR, CEIL, TRUNC = (_unary(n, _step_kernel(n), _zero_grad, f"{n}({{0}})", saves=None, promotion="keep")
                      for n in ("floor", "ceil", "trunc"))
SIGN = _unary("sign", _sign_kernel, _zero_grad, "sign({0})", saves=None, promotion="keep")
FRAC = _unary("frac", _frac_kernel, lambda ctx, g: g, "frac({0})", saves=None, promotion="keep")


def _round_kernel(xp, a, decimals=0):
    if a.dtype.kind in "iu":
        if decimals:
            raise _not_implemented("round_cpu", a)
        return a.copy()
    _reject_bool("round_vml_cpu", a)
    return xp.round(a, decimals)


ROUND = defop("round", _round_kernel, _zero_grad, Pointwise("rint({0})"), promotion="keep")


def _nan_to_num_kernel(xp, a, nan=0.0, posinf=None, neginf=None):
    if a.dtype.name == "bfloat16":  # NumPy's nan_to_num passes an ml_dtypes array through untouched
        info = _ml_dtypes.finfo(a.dtype)
        out = xp.where(xp.isnan(a), nan, a)
        out = xp.where(out == np.inf, info.max if posinf is None else posinf, out)
        return xp.where(out == -np.inf, info.min if neginf is None else neginf, out).astype(a.dtype)
    # Into a copy in the input's layout: NumPy's own copy would make a broadcast dim innermost (torch's empty_like).
    return xp.nan_to_num(preserve_copy(xp, a), copy=False, nan=nan, posinf=posinf, neginf=neginf)


NAN_TO_NUM = defop("nan_to_num", _nan_to_num_kernel, lambda ctx, g: g * _x(ctx).isfinite(),
                   Pointwise("isfinite({0}) ? {0} : 0"), promotion="keep", saves="inputs")


# -- ternary -------------------------------------------------------------------------------------------------------
def _where_backward(ctx, g):
    cond = ctx.inputs[0]
    zero = g.new_zeros(())
    return None, (g.where(cond, zero) if ctx.needs_grad(1) else None), \
        (zero.where(cond, g) if ctx.needs_grad(2) else None)


def _where_kernel(xp, cond, a, b):
    return xp.where(cond, a, b)


WHERE = defop("where", _where_kernel, _where_backward, Pointwise("{0} ? {1} : {2}"), promotion="promote",
              saves="inputs", meta=True, masks=True)


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
    out = a
    if lo is not None:
        out = xp.maximum(out, lo)
    if hi is not None:
        out = xp.minimum(out, hi)
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


CLAMP = defop("clamp", _clamp_kernel, _clamp_backward, Pointwise("min(max({0}, {1}), {2})"), promotion="promote",
              saves="inputs", meta=True)
