"""The kernel IR's expressions: dtypes, the closed set of primitives, and hash-consed nodes (`ir` re-exports all).

Expressions are hash-consed trees (equal trees compare and hash equal, so a DAG falls out of structural sharing).
The primitive ops form a closed set (``UNARY``, ``BINARY``, ``COMPARE``, ``where``, ``fma``, ``cast``); backends
implement exactly these. Build nodes with `load`, `const`, `reduced` and `op`, which check dtypes.

>>> op("mul", load(0, "f32"), const(2, "f32"))
mul[f32](load[f32](0), const[f32](2.0))
>>> IR_DTYPES[np.dtype(np.int64)], FLOAT_IR_DTYPES.get(np.dtype(np.int64))
('i64', None)
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

DTYPES = {"bool": np.bool_, "i32": np.int32, "i64": np.int64, "f32": np.float32, "f64": np.float64}
# Storage-only dtypes: loaded, stored and cast to or from f32, never computed in. A kernel computes their values in
# float32 and rounds each result once where it is stored or cast back (ATen's "opmath" for half and bfloat16).
STORAGE = ("f16", "bf16")
# Every IR dtype's NumPy type: the compute dtypes (`DTYPES`) and the storage-only ones.
NP_TYPES = dict(DTYPES, f16=np.float16, bf16=ml_dtypes.bfloat16)
FLOATS = ("f32", "f64")
INTS = ("i32", "i64")
# A NumPy dtype's IR name (every dtype kernels compute in), the float ones alone (for kernels that take only
# floats), and the storage-only ones.
IR_DTYPES = {np.dtype(t): name for name, t in DTYPES.items()}
FLOAT_IR_DTYPES = {np.dtype(DTYPES[name]): name for name in FLOATS}
STORAGE_IR_DTYPES = {np.dtype(NP_TYPES[name]): name for name in STORAGE}

UNARY = ("neg", "abs", "exp", "log", "tanh", "sigmoid", "erf", "sqrt", "rsqrt", "sin", "cos", "not")
BINARY = ("add", "sub", "mul", "div", "max", "min", "pow", "and", "or", "fmod")
COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
FLOAT_ONLY = ("exp", "log", "tanh", "sigmoid", "erf", "sqrt", "rsqrt", "sin", "cos", "pow", "div", "fmod", "fma")
# ``fma(a, b, c)`` is ``a * b + c`` rounded once (IEEE fusedMultiplyAdd, never the unfused pair): ATen's vectorized
# ``fmadd`` (add/sub with alpha, lerp, addcmul) rounds so, and a mul then add differs in the last bit on ~10%.
TERNARY = ("fma",)
REDUCTIONS = ("sum", "prod", "max", "min", "maxnum", "argmax", "argmin")
# ``maxnum`` is a max whose value over a row holding nan is unspecified (LLVM: a vectorized ``nnan`` max; C: fmax,
# which skips nan): cheaper than ``max``, for a row statistic whose nan poisons the result anyway (softmax's shift:
# a nan element makes the row's sum nan whatever the shift).
# Index reductions: the store's value is compared; the (i64) result is the row-major flat index over the reduced
# dimensions of the first maximum (minimum), a nan counting as larger (smaller) than any number, as NumPy and torch.
ARG_REDUCTIONS = ("argmax", "argmin")
PRIMITIVES = UNARY + BINARY + COMPARE + TERNARY + ("where", "cast", "load", "const", "acc")

# Function names used in the op table's Pointwise(expr) strings, mapped onto primitives (the fusion lowering parses
# the expression and looks calls up here; infix operators map through INFIX_OPS).
EXPR_FUNCTIONS = {"exp": "exp", "log": "log", "tanh": "tanh", "sigmoid": "sigmoid", "erf": "erf", "sqrt": "sqrt",
                  "rsqrt": "rsqrt", "sin": "sin", "cos": "cos", "pow": "pow", "max": "max", "min": "min",
                  "abs": "abs", "fabs": "abs", "fmod": "fmod", "fma": "fma"}
# ``fmod`` is C's (exact, the dividend's sign; `llvm_fmod`): integer fmod divides by zero, so it stays eager.
INFIX_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "<": "lt", "<=": "le", ">": "gt", ">=": "ge",
             "==": "eq", "!=": "ne", "&&": "and", "||": "or", "!": "not", "?:": "where"}


class Expr:
    """One node of the expression DAG: ``op`` is a primitive name, ``args`` child nodes, ``dtype`` the result type.

    ``value`` holds the buffer index of a ``load``, the number of a ``const`` or the store index of an ``acc``.
    Build nodes with `load`, `const`, `reduced` and `op`, which check dtypes.
    """

    __slots__ = ("op", "args", "dtype", "value", "_hash")

    def __init__(self, op_name, args, dtype, value=None):
        self.op, self.args, self.dtype, self.value = op_name, tuple(args), dtype, value
        self._hash = hash((op_name, self.args, dtype, repr(value)))

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return (self is other or isinstance(other, Expr) and self._hash == other._hash and self.op == other.op
                and self.dtype == other.dtype and repr(self.value) == repr(other.value) and self.args == other.args)

    def __repr__(self):
        inner = ", ".join(map(repr, self.args)) if self.args else repr(self.value)
        return f"{self.op}[{self.dtype}]({inner})"


def load(buffer, dtype):
    """Read buffer number ``buffer`` (of element type ``dtype``) at the current point.

    >>> load(0, "f32")
    load[f32](0)
    """
    _check_dtype(dtype)
    return Expr("load", (), dtype, int(buffer))


def const(value, dtype):
    """A constant, rounded to ``dtype`` now so that every backend sees the same number (not of a storage dtype).

    >>> const(0.1, "f32").value == float(np.float32(0.1))
    True
    """
    _check_dtype(dtype)
    if dtype in STORAGE:
        raise TypeError(f"const: {dtype} is a storage-only dtype; make an f32 constant")
    np_type = DTYPES[dtype]
    if isinstance(value, int) and np.issubdtype(np_type, np.integer):
        # Wrapped to the type's width, as a C cast and PyTorch do (int32 + 2**40 adds 0), not refused.
        info = np.iinfo(np_type)
        value = (value - int(info.min)) % (1 << info.bits) + int(info.min)
    value = np_type(value).item()
    return Expr("const", (), dtype, value)


def reduced(store, dtype):
    """The final value of reducing store number ``store`` (of an earlier phase), broadcast over reduced dimensions.

    >>> reduced(0, "f32")
    acc[f32](0)
    """
    _check_dtype(dtype)
    return Expr("acc", (), dtype, int(store))


def op(name, *args, dtype=None):
    """Apply primitive ``name``; ``dtype`` is needed only for ``cast``.

    >>> op("add", load(0, "f32"), const(1, "f32")).dtype
    'f32'
    >>> op("lt", load(0, "i64"), const(3, "i64")).dtype
    'bool'
    """
    arity = 1 if name in UNARY or name == "cast" else 3 if name == "where" or name in TERNARY else 2
    if name not in PRIMITIVES or name in ("load", "const", "acc"):
        raise ValueError(f"op: unknown primitive {name!r}; expected one of {PRIMITIVES}")
    if len(args) != arity:
        raise ValueError(f"op: {name} takes {arity} arguments, got {len(args)}")
    if name == "cast":
        _check_dtype(dtype)
        src = args[0].dtype
        if (src in STORAGE or dtype in STORAGE) and src != dtype and "f32" not in (src, dtype):
            raise TypeError(f"cast: {src} -> {dtype}; storage-only dtypes convert to and from f32 only")
        return Expr("cast", args, dtype)
    storage = [a.dtype for a in args if a.dtype in STORAGE]
    if storage:
        raise TypeError(f"{name}: {storage[0]} is a storage-only dtype; cast it to f32 first")
    if name == "where":
        if args[0].dtype != "bool" or args[1].dtype != args[2].dtype:
            raise TypeError(f"where: needs (bool, T, T), got {[a.dtype for a in args]}")
        return Expr("where", args, args[1].dtype)
    if len({a.dtype for a in args}) != 1:
        raise TypeError(f"{name}: operand dtypes differ {[a.dtype for a in args]}; insert a cast")
    dt = args[0].dtype
    if name == "pow" and dt in FLOATS and args[1].op == "const" and args[1].value in _POW_BY_CONSTANT:
        return _POW_BY_CONSTANT[args[1].value](args[0])
    if name in FLOAT_ONLY and dt not in FLOATS:
        raise TypeError(f"{name}: needs a float operand, got {dt}")
    if name in ("and", "or", "not") and dt != "bool":
        raise TypeError(f"{name}: needs bool operands, got {dt}")
    return Expr(name, args, "bool" if name in COMPARE else dt)


# PyTorch computes a float tensor to these scalar powers by these formulas, not by pow (their special values and
# roundings differ: (-0) ** -0.5 is rsqrt's -inf, C99 pow's +inf; x ** 3 rounds twice), and so do the kernels.
_POW_BY_CONSTANT = {
    0.5: lambda x: op("sqrt", x),
    2.0: lambda x: op("mul", x, x),
    3.0: lambda x: op("mul", op("mul", x, x), x),
    -0.5: lambda x: op("rsqrt", x),
    -1.0: lambda x: op("div", const(1, x.dtype), x),
    -2.0: lambda x: op("div", const(1, x.dtype), op("mul", x, x)),
}


def _check_dtype(dtype):
    if dtype not in NP_TYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {tuple(NP_TYPES)}")
