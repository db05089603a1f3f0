"""``lerp`` (a tensor or a Scalar weight), ``addcmul``, ``addcdiv`` and ``hypot`` as rows: ATen's CPU formulas, one
generated pass on float32, torch's gradient formulas written in jitorch ops.

As composites these ran 3 to 14 dispatches (``hypot``: 48 us for 1280 floats, torch 2.4), and their values were not
ATen's: its vectorized ``lerp`` is ``fmadd(w < 0.5 ? w : w - 1, end - start, w < 0.5 ? start : end)`` and its
``addcmul`` ``fmadd(value * t1, t2, self)``, fused multiply-adds rounded once, where a composite rounds the product
first (an ulp off on a third of the elements); ``addcdiv`` is ``self + value * t1 / t2``, the division last. On
CPU float32 the rows run their fusion expression as one kernel (`native_eager`), the multiply-add the IR's ``fma``
(rounded once, as ATen's: equal to torch on 1e6 random elements of each row and lerp branch; the double detour it
replaces, the float product exact in double and the sum rounded twice, ran lerp at 1e5 in 45 us, this in 26). The
array fallbacks (device arrays, non-finite Scalars) keep the detour, which differs only where the double lands on a
float's rounding midpoint. ``hypot`` squares in double (no float32 square overflows or underflows there) and rounds
the root once: torch's (SLEEF's 0.5-ulp) values, an infinity beating a NaN as ``std::hypot``. Small, broadcast and
strided float32 operands take the kernel too (made contiguous first), and so do float64 ones (but ``hypot``'s:
NumPy's); half types take NumPy's formulas (in float32, rounded once, as ATen's opmath).

>>> import jitorch
>>> lerp_scalar(jitorch.tensor([1e8, 0.0]), jitorch.tensor([1.0, 4.0]), 1.0).tolist()
[1.0, 4.0]
>>> hypot(jitorch.tensor([3e30, float("inf")]), jitorch.tensor([4e30, float("nan")])).tolist()
[4.9999999241216036e+30, inf]
"""
from __future__ import annotations

import numpy as np

from .. import _dispatch
from .._dispatch import _NO_ATTRS, MODES, apply, sync_view
from .._dispatch_fast import keep_result
from ..runtime import host_cache
from .native_eager import constants_checked, dense_operands, expression_kernel, launch_arrays, pointwise_constants
from .pointwise_common import _widened
from .table import Opaque, Pointwise, defop

__all__ = ["LERP", "LERP_SCALAR", "ADDCMUL", "ADDCDIV", "HYPOT", "lerp", "lerp_scalar", "addcmul", "addcdiv", "hypot"]

_F32 = np.dtype(np.float32)
_F64 = np.float64
_F64D = np.dtype(np.float64)
_GRAIN = 1 << 15
_F64_KERNELS: dict = {}  # (expression, arrays, numbers) -> the float64 kernel


def _fma(base, coef, diff):
    """``base + coef * diff`` rounded once (the IR's ``fma``), as ATen's ``vec::fmadd``."""
    return f"fma({coef}, {diff}, {base})"


def _lerp_expr(w):
    """ATen's vectorized lerp: the base and coefficient selected in float, then one multiply-add."""
    small = f"abs({w}) < 0.5"
    return _fma(f"{small} ? {{0}} : {{1}}", f"{small} ? {w} : {w} - 1.0", "{1} - {0}")


# A Scalar weight: the coefficient (``w`` or ``w - 1`` in float32) is a number; the eager kernel picks the branch
# and rounds the coefficient itself (`_lerp_scalar_kernel`).
_LERP_FROM = {base: _fma(base, "{2}", "{1} - {0}") for base in ("{0}", "{1}")}
# In the fusion rule the weight is the row's number: rounded to the row's dtype and ``w - 1`` taken there, as ATen's
# Scalar.
_LERP_SCALAR = (f"abs({{2}}) < 0.5 ? {_fma('{0}', '({dtype}){2}', '{1} - {0}')} : "
                f"{_fma('{1}', '({dtype}){2} - 1.0', '{1} - {0}')}")
_ADDCMUL = _fma("{0}", "{3} * {1}", "{2}")
_FLT_MAX = "3.4028234663852886e38"
_HYPOT = (f"abs({{0}}) > {_FLT_MAX} ? abs({{0}}) : (abs({{1}}) > {_FLT_MAX} ? abs({{1}}) : "
          "(float)sqrt((double){0} * (double){0} + (double){1} * (double){1}))")


def _native(row, arrays, constants=(), expr=None):
    """The row's kernel on float32 or float64 NumPy arrays (any sizes: the NumPy fallback takes several passes), or
    None."""
    dtype = arrays[0].dtype if type(arrays[0]) is np.ndarray else None
    if dtype is not _F32 and dtype is not _F64D:
        return None
    for a in arrays:
        if type(a) is not np.ndarray or a.dtype is not dtype:
            return None
    dense, back = dense_operands(arrays)
    if not dense[0].size:
        return None
    if dtype is _F32:
        out = pointwise_constants(row, dense, constants, min_size=1, expr=expr)
    else:
        out = _pointwise_f64(expr or row.fusion.expr, dense, constants)
    return out if out is None or back is None else out.transpose(back)


def _pointwise_f64(expr, arrays, constants):
    """Fusion expression ``expr`` over same-shape C-contiguous float64 arrays as one generated pass, ``{n}``... (the
    row's numbers) read from one-element arrays: ATen's double kernels fuse the same multiply-adds (NumPy's formulas
    rounded the products: an ulp off torch on 15-25% of lerp and addcmul elements)."""
    for c in constants:
        if type(c) is not float and type(c) is not int:
            return None
    n, k = len(arrays), len(constants)
    kernel = _F64_KERNELS.get((expr, n, k))
    if kernel is None:
        kernel = _F64_KERNELS[expr, n, k] = expression_kernel(expr, n, "f64", k)
    shape, size = arrays[0].shape, arrays[0].size
    out = np.empty(shape, _F64D) if arrays[0].nbytes < host_cache.THRESHOLD else host_cache.empty(shape, _F64D)
    launch_arrays(kernel, [*arrays, *(np.array([c], _F64D) for c in constants), out], size, _GRAIN, size)
    return out


def _lerp_array(start, end, weight):
    if start.dtype == _F32:  # the kernel's fma through double: the product exact, the sum rounded twice
        diff = (end - start).astype(_F64)
        small = np.abs(weight) < 0.5
        coef = np.where(small, weight, weight - np.float32(1)).astype(_F64)
        return (np.where(small, start, end) + coef * diff).astype(_F32)
    small = np.abs(weight) < 0.5
    return np.where(small, start, end) + np.where(small, weight, weight - 1) * (end - start)


def _lerp_kernel(xp, start, end, weight):
    out = _native(LERP, [start, end, weight])
    return out if out is not None else _widened(_lerp_array, start, end, weight)


def _lerp_scalar_form(w):
    """The constants and expression of lerp's kernel with weight ``w``, already in the tensors' type (ATen's Scalar
    cast: a float32 or a float): the branch and the coefficient picked here."""
    small = abs(w) < 0.5
    return (float(w if small else w - w.__class__(1)),), _LERP_FROM["{0}" if small else "{1}"]


def _lerp_scalar_kernel(xp, start, end, weight):
    out = _native(LERP_SCALAR, [start, end], *_lerp_scalar_form(
        float(weight) if getattr(start, "dtype", None) is _F64D else np.float32(weight)))
    if out is not None:
        return out
    return _widened(lambda s, e: _lerp_array(s, e, s.dtype.type(weight)), start, end)


def _lerp_backward(ctx, g):
    start, end, weight = ctx.inputs
    return (g * (1 - weight) if ctx.needs_grad(0) else None, g * weight if ctx.needs_grad(1) else None,
            g * (end - start) if ctx.needs_grad(2) else None)


def _lerp_scalar_backward(ctx, g):
    weight = ctx.inputs[2]
    return (g * (1 - weight) if ctx.needs_grad(0) else None, g * weight if ctx.needs_grad(1) else None, None)


def _addcmul_array(a, t1, t2, value):
    if a.dtype == _F32:
        return (a.astype(_F64) + (np.float32(value) * t1).astype(_F64) * t2).astype(_F32)
    return a + a.dtype.type(value) * t1 * t2


def _addcmul_kernel(xp, a, t1, t2, value):
    out = _native(ADDCMUL, [a, t1, t2], (value,))
    return out if out is not None else _widened(lambda *x: _addcmul_array(*x, value), a, t1, t2)


def _addcdiv_kernel(xp, a, t1, t2, value):
    out = _native(ADDCDIV, [a, t1, t2], (value,))
    return out if out is not None else _widened(lambda x, y, z: x + x.dtype.type(value) * y / z, a, t1, t2)


def _addcmul_backward(ctx, g):
    _, t1, t2, value = ctx.inputs
    return (g if ctx.needs_grad(0) else None, g * (t2 * value) if ctx.needs_grad(1) else None,
            g * (t1 * value) if ctx.needs_grad(2) else None, None)


def _addcdiv_backward(ctx, g):
    _, t1, t2, value = ctx.inputs
    return (g if ctx.needs_grad(0) else None, g * (value / t2) if ctx.needs_grad(1) else None,
            -g * value * t1 / (t2 * t2) if ctx.needs_grad(2) else None, None)


def _hypot_kernel(xp, a, b):
    out = _native(HYPOT, [a, b], expr=_HYPOT) if getattr(a, "dtype", None) is _F32 else None  # (a float32 formula)
    if out is not None:
        return out
    if a.dtype == _F32:
        return _hypot_f32(a, b)
    return _widened(np.hypot, a, b)


def _hypot_f32(a, b):
    a64, b64 = a.astype(_F64), b.astype(_F64)
    out = np.sqrt(a64 * a64 + b64 * b64).astype(_F32)
    inf = np.isinf(a) | np.isinf(b)
    if inf.any():
        out[inf] = np.inf
    return out


def _hypot_backward(ctx, g):
    (a, b), out = ctx.inputs, ctx.out
    return (g * a / out if ctx.needs_grad(0) else None, g * b / out if ctx.needs_grad(1) else None)


# Each saves only what its gradients read, as ATen's (an optimizer's buffer updated in place after a differentiable
# step must not be one of them).
LERP = defop("lerp", _lerp_kernel, _lerp_backward, Pointwise(_lerp_expr("{2}")), saves="inputs", meta=True,
             save_if=lambda needs: (needs[2], needs[2], needs[0] or needs[1]))
LERP_SCALAR = defop("lerp_scalar", _lerp_scalar_kernel, _lerp_scalar_backward, Pointwise(_LERP_SCALAR),
                    saves="inputs", meta=True, save_if=lambda needs: (False, False, True), grad_name="LerpBackward0")
ADDCMUL = defop("addcmul", _addcmul_kernel, _addcmul_backward, Pointwise(_ADDCMUL), saves="inputs", meta=True,
                save_if=lambda needs: (False, needs[2], needs[1], True))
ADDCDIV = defop("addcdiv", _addcdiv_kernel, _addcdiv_backward, Pointwise("{0} + {3} * {1} / {2}"), saves="inputs",
                meta=True, save_if=lambda needs: (False, needs[2], needs[1] or needs[2], True))
# Opaque: the float32 formula (squares in double) would overflow in a fused float64 graph.
HYPOT = defop("hypot", _hypot_kernel, _hypot_backward, Opaque("float32 formula (squares in double)"), saves="both",
              meta=True)


def _direct(row, args, form=None):
    """`apply` of ``row`` to ``args`` (tensors, then the row's number) when they are host float32/float64 tensors of
    one dtype and shape: nothing to promote, broadcast or check, so the row's kernel gets the arrays as they are
    (the dispatcher's checks took longer than the kernel on 32x32: lerp 5.4 us against torch's 1.8). Else the
    dispatcher (modes, promotion, devices, broadcasting and its errors). ``form(number)``: the row's float32
    kernel's constants and expression for its number (the last argument), as the row's kernel picks them."""
    tensor_types = _dispatch.TENSOR_TYPES  # (read at each call, as the fast paths': tests take them away)
    if not MODES:
        first = args[0]
        if type(first) in tensor_types:
            x = first._data
            if type(x) is np.ndarray and (x.dtype is _F32 or x.dtype is _F64D):
                datas = []
                grad = False
                dense = x.dtype is _F32 and x.size
                for a in args:
                    if type(a) is float:
                        datas.append(a)
                        continue
                    if type(a) not in tensor_types:
                        return apply(row, *args)
                    d = a._data
                    if type(d) is not np.ndarray or d.dtype is not x.dtype or d.shape != x.shape:
                        return apply(row, *args)
                    if a._base is not None and a._view_ver != a._ver_owner._ver:
                        sync_view(a)
                        d = a._data
                    grad = grad or a._requires_grad
                    dense = dense and d.flags.c_contiguous
                    datas.append(d)
                out = None
                if dense:  # what the row's kernel runs for these (`_native`), its checks done above
                    constants, expr = ((), None) if form is None else form(datas.pop())
                    out = constants_checked(row, datas, constants, expr)
                    if out is None:  # (a number that is not finite: the kernel's fallback)
                        datas.append(args[-1])
                return keep_result(row, args, _NO_ATTRS,
                                   out if out is not None else row.kernel(_dispatch.CPU_XP, *datas), grad)
    return apply(row, *args)


def _lerp_scalar_of_float32(weight):
    """`_lerp_scalar_form` of ``weight`` cast to float32, on Python floats (NumPy's scalar arithmetic took a tenth
    of a small lerp): ``w - 1`` taken in double and rounded to float32 is float32's difference (a double holds more
    than twice float32's digits)."""
    w = float(_F32_SCALAR(weight))
    if abs(w) < 0.5:
        return (w,), _LERP_FROM["{0}"]
    return (float(_F32_SCALAR(w - 1.0)),), _LERP_FROM["{1}"]


_F32_SCALAR = np.float32


def _value_form(value):  # addcmul/addcdiv: the value as the expression's constant (`_native`'s call)
    return (value,), None


def lerp(start, end, weight):
    """``start + weight * (end - start)`` of same-dtype real float tensors, from the nearer end as ATen's."""
    return _direct(LERP, (start, end, weight))


def lerp_scalar(start, end, weight):
    """`lerp` with a Python number ``weight`` (ATen rounds it to the tensors' type)."""
    return _direct(LERP_SCALAR, (start, end, float(weight)), _lerp_scalar_of_float32)


def addcmul(a, t1, t2, value):
    """``a + value * t1 * t2`` of same-dtype real float tensors, as ATen's multiply-add."""
    return _direct(ADDCMUL, (a, t1, t2, float(value)), _value_form)


def addcdiv(a, t1, t2, value):
    """``a + value * t1 / t2`` of same-dtype real float tensors, as ATen's."""
    return _direct(ADDCDIV, (a, t1, t2, float(value)), _value_form)


def hypot(a, b):
    """``sqrt(a**2 + b**2)`` of same-dtype real float tensors without overflow or underflow of the squares."""
    return apply(HYPOT, a, b)
