"""Unary elementwise rows: negation, abs, exponentials and logarithms, roots, trigonometric and hyperbolic
functions, sigmoid, the error functions, reciprocal, relu, the step functions (floor, ceil, trunc, sign, frac,
round) and ``nan_to_num``; one row each (kernel, backward in jitorch ops, fusion expression).

Split from ``pointwise.py``, which re-exports the rows.

>>> import jitorch
>>> x = jitorch.tensor([0.25, 4.0], requires_grad=True)
>>> jitorch.sqrt(x).backward(jitorch.ones(2))
>>> x.grad
tensor([1.0000, 0.2500])
"""
from __future__ import annotations

import math
import os

import ml_dtypes as _ml_dtypes
import numpy as np

from .._memory_format import preserve_copy
from ..runtime import special_module
from . import native_complex, native_eager
from . import pointwise_grad, special_erfinv
from .pointwise_common import _COMPLEX64, _HALVES, _holomorphic, _not_implemented, _reject_bool, _times
from .table import Pointwise, defop
from .half_cast import converted

_F32, _F16 = np.dtype(np.float32), np.dtype(np.float16)


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
        return converted(_sigmoid_kernel(xp, converted(a, _F32)), a.dtype)
    if a.dtype.kind == "c":  # |a| and a >= 0 mean nothing for complex numbers: the formula itself, as torch's
        return (1 / (1 + xp.exp(-a))).astype(a.dtype, copy=False)
    # exp(-|a|) never overflows (halves would overflow long before their result underflows): the stable logistic.
    e = xp.exp(-xp.abs(a))
    return xp.where(a >= 0, 1 / (1 + e), e / (1 + e)).astype(a.dtype, copy=False)


SIGMOID = native_eager.native_from(_unary("sigmoid", _sigmoid_kernel, _sigmoid_backward, "sigmoid({0})",
                                          saves="outputs", holomorphic=True), 1)
_SPECIAL_ERF = _special("erf")


def _erf_kernel(xp, a):
    out = native_eager.pointwise(ERF, a)  # float32 on the CPU: SciPy's loop is about 30x slower
    return _SPECIAL_ERF(xp, a) if out is None else out


ERF = native_eager.native_from(_unary("erf", _erf_kernel, lambda ctx, g: g * (2 / math.sqrt(math.pi)) * (
    -_x(ctx) ** 2).exp(), "erf({0})"), 1)
ERFC = _unary("erfc", _special("erfc"), lambda ctx, g: g * (-2 / math.sqrt(math.pi)) * (-_x(ctx) ** 2).exp(),
              "erfc({0})")
ERFINV = _unary("erfinv", special_erfinv.erfinv, lambda ctx, g: g * (math.sqrt(math.pi) / 2) * (ctx.out ** 2).exp(),
                "erfinv({0})", saves="outputs")
def _reciprocal_kernel(xp, a):
    out = native_complex.divide(None, a) if a.dtype == _COMPLEX64 else None  # as ATen's (see _div_kernel)
    return xp.reciprocal(a) if out is None else out


RECIPROCAL = _unary("reciprocal", _reciprocal_kernel, lambda ctx, g: -g * (ctx.out * ctx.out),
                    "1 / {0}", saves="outputs", holomorphic=True)
def _relu_kernel(xp, a):
    if a.dtype.kind == "b":
        raise RuntimeError("Boolean inputs not supported for relu")
    # NumPy's maximum against a scalar runs a scalar loop (3x a copy's time on 2 MB float32; torch's relu is one):
    # the row's expression as a generated kernel where it applies.
    out = native_eager.pointwise(RELU, a)
    if out is None and a.dtype == _F16 and xp is np:  # (NumPy's float16 loop widens in software: exact in float32)
        wide = converted(a, _F32)
        out = native_eager.pointwise(RELU, wide)  # (None below its size: NumPy's maximum, the same answer)
        out = converted(np.maximum(0, wide) if out is None else out, a.dtype)
    # (NumPy's float32/64 maximum keeps its second operand on a tie of zeros: relu(-0.0) is -0.0, as ATen's clamp_min)
    return xp.maximum(0, a).astype(a.dtype, copy=False) if out is None else out


# ``x < 0 ? 0 : x``, not max(x, 0): ATen's relu is clamp_min, which keeps -0.0 (IEEE maximum gives +0.0) and nan.
RELU = native_eager.native_from(_unary("relu", _relu_kernel, lambda ctx, g: pointwise_grad.threshold_backward(
    g, ctx.out), "{0} < 0 ? 0 : {0}", saves="outputs", promotion="keep"), 1)  # (exact: the same bits as NumPy's)


def _zero_grad(ctx, g):
    # ATen's zeros_like(grad): not ``g * 0``, NaN where an upstream gradient is infinite or NaN (and -0.0 where
    # it is negative).
    return g.new_zeros(g.shape)


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
    out = native_eager.pointwise_constants(SIGN, [a], (), expr=_SIGN_FORM)  # float32: one pass, not three
    if out is not None:
        return out
    return xp.where(a != a, a.dtype.type(0), xp.sign(a))  # PyTorch's sign(nan) is 0, NumPy's is nan


_SIGN_FORM = "{0} > 0 ? 1 : ({0} < 0 ? -1 : 0)"  # 0 (not -0.0) at -0.0, 0 at NaN, as ATen's


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
    if a.dtype == np.float32:  # one native pass (NumPy's nan_to_num makes several); constants in float32's range
        big = float(np.finfo(np.float32).max)
        values = (nan, big if posinf is None else posinf, -big if neginf is None else neginf)
        if all(type(v) in (float, int) and abs(v) <= big for v in values):
            out = native_eager.pointwise_constants(NAN_TO_NUM, [a], values, expr=_NAN_TO_NUM_FORM)
            if out is not None:
                return out
    # Into a copy in the input's layout: NumPy's own copy would make a broadcast dim innermost (torch's empty_like).
    return xp.nan_to_num(preserve_copy(xp, a), copy=False, nan=nan, posinf=posinf, neginf=neginf)


_NAN_TO_NUM_FORM = ("{0} != {0} ? {1} : ({0} > 3.4028234663852886e+38 ? {2} : "
                    "({0} < -3.4028234663852886e+38 ? {3} : {0}))")
NAN_TO_NUM = defop("nan_to_num", _nan_to_num_kernel, lambda ctx, g: g * _x(ctx).isfinite(),
                   Pointwise("isfinite({0}) ? {0} : 0"), promotion="keep", saves="inputs")
