"""ATen's special-function formulas written once, run two ways: as one generated kernel on CPU float32/float64 NumPy
arrays, and as array-module ops elsewhere (CuPy, and whatever the kernel does not take).

A formula is a Python function ``formula(m, *xs)`` over the values ``xs`` and a math namespace ``m``: arithmetic and
comparisons through Python's operators, branches as ``m.where`` (both sides are computed, as in a vector loop), and
the functions ``m.abs``/``exp``/``log``/``log1p``/``sqrt``/``erf``. `IRMath` builds codegen IR from it (every Python
number becomes a constant rounded to the operand's dtype, as ATen's ``T(...)`` literals are), `ArrayMath` evaluates
it with the array module (Python numbers are weak scalars: they take the array's dtype). So both paths round step by
step in the input's dtype as ATen's scalar code does. The IR's primitives are the closed set of `codegen.ir_expr`: a
formula needing a data-dependent loop or a table lookup does not fit here.

>>> import numpy as np
>>> cube_plus_one = lambda m, x: m.where(x < 0, 0.0, x * x * x + 1.0)
>>> evaluate("cube_plus_one", cube_plus_one, np, np.array([-1.0, 2.0], dtype=np.float32)).tolist()
[0.0, 9.0]
"""
from __future__ import annotations

import numpy as np

from ..codegen.ir import FLOAT_IR_DTYPES, Buffer, Kernel, Store, const, load, op
from ..runtime import is_cupy, special_module
from .native_eager import _GENERIC_SIZE, _GRAIN, in_memory_order, launch_arrays

__all__ = ["IRMath", "ArrayMath", "evaluate"]

_kernels: dict = {}


class _Value:
    """An IR expression with Python's arithmetic and comparison operators (numbers become constants of its dtype)."""

    __slots__ = ("expr",)

    def __init__(self, expr):
        self.expr = expr

    def _of(self, other):
        return other.expr if isinstance(other, _Value) else const(other, self.expr.dtype)

    def _bin(self, name, other, swap=False):
        a, b = self.expr, self._of(other)
        return _Value(op(name, b, a) if swap else op(name, a, b))

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("div", o)
    def __rtruediv__(self, o): return self._bin("div", o, True)
    def __neg__(self): return _Value(op("neg", self.expr))
    def __lt__(self, o): return self._bin("lt", o)
    def __le__(self, o): return self._bin("le", o)
    def __gt__(self, o): return self._bin("gt", o)
    def __ge__(self, o): return self._bin("ge", o)
    def __eq__(self, o): return self._bin("eq", o)  # noqa: D105 (an IR comparison, not Python equality)
    def __ne__(self, o): return self._bin("ne", o)
    def __and__(self, o): return self._bin("and", o)
    def __or__(self, o): return self._bin("or", o)
    def __invert__(self): return _Value(op("not", self.expr))
    __hash__ = None


class IRMath:
    """The math namespace of a formula building codegen IR in dtype ``ty`` ("f32" or "f64").

    >>> m = IRMath("f64")
    >>> print((m.exp(m.arg(0)) * 2.0).expr.op)
    mul
    """

    def __init__(self, ty):
        self.ty = ty

    def arg(self, i):
        return _Value(load(i, self.ty))

    def abs(self, x):
        return _Value(op("abs", x.expr))

    def exp(self, x):
        return _Value(op("exp", x.expr))

    def log(self, x):
        return _Value(op("log", x.expr))

    def log1p(self, x):
        # Goldberg's log1p from log: u = 1 + x rounded, log(u) * x / (u - 1) corrects that rounding (a few ulp).
        u = 1.0 + x
        return self.where(u == 1.0, x, self.where(u == np.inf, u, self.log(u) * (x / (u - 1.0))))

    def sqrt(self, x):
        return _Value(op("sqrt", x.expr))

    def sin(self, x):
        return _Value(op("sin", x.expr))

    def const(self, v):
        """``v`` as a constant of the working dtype (its products then round there, as a dtype scalar's do)."""
        return _Value(const(v, self.ty))

    def erf(self, x):
        return _Value(op("erf", x.expr))

    def where(self, cond, a, b):
        return _Value(op("where", cond.expr, self._of(a), self._of(b)))

    def _of(self, x):
        return x.expr if isinstance(x, _Value) else const(x, self.ty)


class ArrayMath:
    """The math namespace of a formula evaluated with array module ``xp`` in ``dtype``."""

    def __init__(self, xp, dtype):
        self.xp, self.dtype = xp, dtype
        self.abs, self.exp, self.log, self.log1p, self.sqrt = xp.abs, xp.exp, xp.log, xp.log1p, xp.sqrt
        self.sin, self.erf = xp.sin, special_module(xp).erf

    def const(self, v):
        return self.dtype.type(v)

    def where(self, cond, a, b):
        return self.xp.where(cond, a, b).astype(self.dtype, copy=False)


def _kernel(name, formula, ty, nargs, wide):
    key = (name, ty, nargs, wide)
    kernel = _kernels.get(key)
    if kernel is None:
        # The compiler and the disk cache load on first use.
        from ..codegen.llvm_compile import compile_kernel
        from ..codegen.llvm_objcache import default_cache

        inner = "f64" if wide else ty
        m = IRMath(inner)
        args = (_Value(load(i, ty) if inner == ty else op("cast", load(i, ty), dtype=inner)) for i in range(nargs))
        value = formula(m, *args).expr
        value = value if inner == ty else op("cast", value, dtype=ty)
        body = Kernel((_GENERIC_SIZE,), tuple(Buffer(ty, (1,)) for _ in range(nargs + 1)), (Store(nargs, value),))
        kernel = _kernels[key] = compile_kernel(body, cache=default_cache())
    return kernel


def _native(name, formula, arrays, wide):
    return in_memory_order(lambda arrays: _native_c(name, formula, arrays, wide), arrays)


def _native_c(name, formula, arrays, wide):
    # (np.ascontiguousarray would make a 0-d array 1-d)
    arrays = [a if a.flags.c_contiguous else a.copy(order="C") for a in arrays]
    first = arrays[0]
    out = np.empty(first.shape, first.dtype)
    size = first.size
    if size:
        kernel = _kernel(name, formula, FLOAT_IR_DTYPES[first.dtype], len(arrays), wide)
        arrays.append(out)
        launch_arrays(kernel, arrays, size, _GRAIN, size)
    return out


def evaluate(name, formula, xp, *arrays, native=True, wide=False):
    """``formula`` over same-dtype ``arrays`` (broadcast together): one generated kernel (compiled once per
    ``name`` and dtype) on CPU float32/float64 NumPy arrays, array-module ops otherwise or with ``native=False``.
    ``wide``: float32 values are computed in float64 and the result rounded once."""
    first = arrays[0]
    dtype, shape = first.dtype, first.shape
    plain = native and dtype in FLOAT_IR_DTYPES and not is_cupy(xp)
    for a in arrays:
        if a.shape != shape:
            arrays = xp.broadcast_arrays(*arrays)
            first = arrays[0]
            break
    for a in arrays:
        plain = plain and type(a) is np.ndarray and a.dtype == dtype
    if plain:
        return _native(name, formula, list(arrays), wide)
    dtype = np.dtype(np.float64) if wide and first.dtype == np.float32 else first.dtype
    with np.errstate(all="ignore"):
        result = formula(ArrayMath(xp, dtype), *(a.astype(dtype, copy=False) for a in arrays))
        return result.astype(first.dtype, copy=False)
