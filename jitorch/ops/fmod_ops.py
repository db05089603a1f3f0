"""``fmod`` and ``remainder`` rows (re-exported by ``pointwise.py``): ATen's values, one generated pass on float32.

``fmod`` is C's (exact; the result has the dividend's sign). ``remainder`` is ATen's float formula on top of it:
``fmod(a, b)``, plus ``b`` where that is nonzero and its sign differs from ``b``'s, so a zero keeps the dividend's
sign (``remainder(-4., 2.)`` is ``-0.0``; NumPy's ``remainder`` gives ``+0.0``) and ``remainder(-1., inf)`` is
``inf``. Integers keep NumPy's (Python's) remainder, which is ATen's, and raise on a zero divisor.

NumPy's float32 fmod is a libm call an element (17 ns; torch's vectorized kernel takes 1.2): CPU float32 operands
run the row's own fusion expression as one native kernel (`native_eager`; the IR's ``fmod`` primitive is exact,
`codegen.llvm_fmod`), a Python number or 0-d operand as one of its constants, a broadcast operand materialized first
(a copy costs a fraction of a NumPy fmod pass). Other dtypes and devices take the array module's ``fmod``.

>>> import jitorch
>>> jitorch.remainder(jitorch.tensor([-4.0, -1.0, 5.5]), 2.0)
tensor([-0.0000, 1.0000, 1.5000])
>>> jitorch.fmod(jitorch.tensor([-4.0, -1.0, 5.5]), 2.0)
tensor([-0.0000, -1.0000,  1.5000])
"""
from __future__ import annotations

import numpy as np

from .._pointwise_checks import check_integer_divisor, is_integer
from .native_eager import MIN_SIZE, in_memory_order, pointwise, pointwise_constants
from .pointwise_common import _reject_bool_complex, half_with_number
from .table import Pointwise, defop

__all__ = ["FMOD", "REMAINDER"]

_F32 = np.dtype(np.float32)
# ATen's remainder from fmod (r = fmod(a, b)): r + b where r is nonzero and its sign differs from b's.
_REMAINDER = "({2} != 0 && (({1} < 0) != ({2} < 0))) ? {2} + {1} : {2}"


def _remainder_expr(a, b):
    return _REMAINDER.format(a, b, f"fmod({a}, {b})")


def _number(x):
    """A Python number or 0-d float32 array as the float32 constant a kernel takes, else None."""
    if type(x) in (int, float):
        return x
    if type(x) is np.ndarray and x.ndim == 0 and x.dtype == _F32:
        return float(x)
    return None


def _native(row, a, b):
    """``row(a, b)`` as the row's native kernel for CPU float32 operands, or None (the caller's array code runs)."""
    if type(a) is np.ndarray and a.dtype == _F32 and a.ndim:
        if type(b) is np.ndarray and b.dtype == _F32 and b.ndim:
            return _both_arrays(row, a, b)
        c = _number(b)
        if c is None or a.size < MIN_SIZE:
            return None
        return in_memory_order(lambda arrays: pointwise_constants(row, arrays, (c,)), [a])
    c = _number(a)
    if c is None or type(b) is not np.ndarray or b.dtype != _F32 or not b.ndim or b.size < MIN_SIZE:
        return None
    swapped = "fmod({1}, {0})" if row is FMOD else _remainder_expr("{1}", "{0}")
    return in_memory_order(lambda arrays: pointwise_constants(row, arrays, (c,), expr=swapped), [b])


def _both_arrays(row, a, b):
    if a.shape == b.shape:
        return in_memory_order(lambda arrays: pointwise(row, *arrays), [a, b]) if a.size >= MIN_SIZE else None
    shape = np.broadcast_shapes(a.shape, b.shape)
    if int(np.prod(shape)) < MIN_SIZE:
        return None
    if b.shape == shape and a.shape != shape:  # b's layout decides the result's
        return in_memory_order(lambda arrays: pointwise(row, arrays[1], arrays[0]), [b, np.broadcast_to(a, shape)])
    if a.shape != shape:
        a = np.ascontiguousarray(np.broadcast_to(a, shape))
    return in_memory_order(lambda arrays: pointwise(row, *arrays), [a, np.broadcast_to(b, shape)])


def _fmod_kernel(xp, a, b):
    _reject_bool_complex("fmod_cpu", a, b)
    check_integer_divisor(a, b, "fmod")
    out = half_with_number(xp.fmod, a, b) if xp is np else None
    if out is not None:
        return out
    out = _native(FMOD, a, b)
    return xp.fmod(a, b) if out is None else out


def _remainder_kernel(xp, a, b):
    _reject_bool_complex("remainder_cpu", a, b)
    check_integer_divisor(a, b, "remainder")
    if is_integer(a) and is_integer(b):
        return xp.remainder(a, b)
    out = half_with_number(lambda x, y: _float_remainder(np, x, y), a, b) if xp is np else None
    if out is not None:
        return out
    out = _native(REMAINDER, a, b)
    if out is not None:
        return out
    return _float_remainder(xp, a, b)


def _float_remainder(xp, a, b):
    mod = xp.fmod(a, b)
    return xp.where((mod != 0) & ((xp.asarray(b) < 0) != (mod < 0)), mod + b, mod)


def _remainder_backward(ctx, g):
    a, b = ctx.inputs
    return g, (-g * a.div(b, rounding_mode="floor") if ctx.needs_grad(1) else None)


def _fmod_backward(ctx, g):
    a, b = ctx.inputs
    return g, (-g * (a / b).trunc() if ctx.needs_grad(1) else None)


REMAINDER = defop("remainder", _remainder_kernel, _remainder_backward, Pointwise(_remainder_expr("{0}", "{1}")),
                  promotion="promote", saves="inputs", meta=True)
FMOD = defop("fmod", _fmod_kernel, _fmod_backward, Pointwise("fmod({0}, {1})"), promotion="promote",
             saves="inputs", meta=True)
