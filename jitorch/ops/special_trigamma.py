"""Trigamma (``polygamma(1, x)``, digamma's derivative) as ATen computes it: reflection below 1/2, six recurrence
steps and a short asymptotic series, in the input's dtype.

SciPy has no trigamma of its own: ``scipy.special.polygamma(1, x)`` goes through the Hurwitz zeta, about 200 ns an
element (torch: about 10). ATen's formula has no data-dependent loop, so it is one fixed expression: on CPU
float32/float64 NumPy arrays it runs as one generated kernel (the expression compiled once per dtype through the
disk cache), elsewhere (CuPy, half types through float32) as the same steps in array-module ops. Both round step by
step as ATen's scalar code does, so values agree with torch's to the last bits for x >= 1/2 and within a few ulp
below, where the reflection's ``pi^2 / sin^2(pi x)`` cancels against the recurrence. Like ATen, negative integers
give large finite values (``sin(pi x)`` is not exactly 0 there), 0 gives inf and -inf gives nan.

>>> import numpy as np
>>> trigamma(np, np.array([0.5, 1.0, -0.5], dtype=np.float64)).round(6).tolist()
[4.934802, 1.644934, 8.934802]
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime import is_cupy

__all__ = ["trigamma", "trigamma_expression"]

_PI = repr(math.pi)
_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))
_kernels: dict = {}


def trigamma_expression():
    """ATen's ``trigamma`` over ``{0}`` as one fusion expression (C-like, for `_compile.expr.parse_expr`); numbers
    take the operand's dtype, so float32 rounds every step in float as ATen's float overload does.

    >>> from jitorch._compile.expr import parse_expr
    >>> from jitorch.codegen.ir import load
    >>> parse_expr(trigamma_expression(), [load(0, "f64")], "f64").op  # the reflection's select
    'where'
    """
    x = "{0}"
    y = f"({x} < 0.5 ? 1.0 - {x} : {x})"
    result = f"({x} < 0.5 ? -({_PI} * {_PI}) / (sin({_PI} * {x}) * sin({_PI} * {x})) : 0.0)"
    for _ in range(6):
        result = f"({result} + 1.0 / ({y} * {y}))"
        y = f"({y} + 1.0)"
    ixx = f"(1.0 / ({y} * {y}))"
    series = f"(1.0 + 1.0 / (2.0 * {y}) + {ixx} * ({1 / 6!r} - {ixx} * ({1 / 30!r} - {ixx} * {1 / 42!r}))) / {y}"
    return f"({x} < 0.5 ? -({result} + {series}) : ({result} + {series}))"


def _kernel(dtype):
    kernel = _kernels.get(dtype)
    if kernel is None:
        # The code generator and the compiler package load on first use (they import the op rows).
        from .._compile.expr import parse_expr
        from ..codegen.ir import Buffer, Kernel, Store, load
        from ..codegen.llvm_compile import compile_kernel
        from ..codegen.llvm_objcache import default_cache
        from .native_eager import _GENERIC_SIZE

        ty = "f32" if dtype == np.float32 else "f64"
        value = parse_expr(trigamma_expression(), [load(0, ty)], ty)
        body = Kernel((_GENERIC_SIZE,), (Buffer(ty, (1,)), Buffer(ty, (1,))), (Store(1, value),))
        kernel = _kernels[dtype] = compile_kernel(body, cache=default_cache())
    return kernel


def _native(a):
    from .native_eager import in_memory_order

    return in_memory_order(lambda arrays: _native_c(arrays[0]), [a])


def _native_c(a):
    from .native_eager import _GRAIN, launch_arrays

    if not a.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d array 1-d)
        a = a.copy(order="C")
    out = np.empty(a.shape, a.dtype)
    if a.size:
        launch_arrays(_kernel(a.dtype), [a, out], a.size, _GRAIN, a.size)
    return out


def _steps(xp, x):
    """The same steps in array-module ops (Python numbers are weak scalars: they take ``x``'s dtype)."""
    pi = x.dtype.type(math.pi)
    reflect = x < 0.5
    s = xp.sin(pi * x)
    result = xp.where(reflect, -(pi * pi) / (s * s), x.dtype.type(0))
    y = xp.where(reflect, 1 - x, x)
    for _ in range(6):
        result = result + 1 / (y * y)
        y = y + 1
    ixx = 1 / (y * y)
    result = result + (1 + 1 / (2 * y) + ixx * (1 / 6 - ixx * (1 / 30 - ixx * (1 / 42)))) / y
    return xp.where(reflect, -result, result)


def trigamma(xp, a, native=True):
    """``polygamma(1, a)`` as ATen's; half types computed in float32 and rounded once. ``native=False`` runs the
    array-module steps on NumPy too (what CuPy arrays run)."""
    wide = a.astype(np.float32) if a.dtype.itemsize < 4 else a
    if native and not is_cupy(xp) and type(wide) is np.ndarray and wide.dtype in _NATIVE:
        return _native(wide).astype(a.dtype, copy=False)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _steps(xp, wide).astype(a.dtype, copy=False)
