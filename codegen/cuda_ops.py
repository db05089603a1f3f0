"""The IR's closed set of primitives as CUDA C expressions, plus C literals and reduction combiners.

Used by `cuda_emit`; every function returns a C expression over already-named values (the emitter gives each DAG
node its own ``const`` variable, so an operand may safely appear twice, as in the NaN-propagating max).
No header is needed: NVRTC knows ``expf``, ``tanhf``, ``__int_as_float`` ... without includes, and infinities are
written by bit pattern because ``INFINITY`` lives in ``<math.h>``.
"""
from __future__ import annotations

import math
import struct

import numpy as np

from .ir import COMPARE, FLOATS, STORAGE

# The storage-only dtypes live as their bits (no cuda_fp16.h: NVRTC would need its include path); `STORAGE_HELPERS`
# converts them.
C_TYPES = {"f32": "float", "f64": "double", "i32": "int", "i64": "long long", "bool": "bool",
           "f16": "unsigned short", "bf16": "unsigned short"}
# f16 <-> f32 by PTX's cvt (round to nearest even, sm_53+); bf16 by integer rounding, as the LLVM backend does
# (`llvm_body.storage_cast`): a NaN keeps its sign and becomes quiet, subnormals are kept.
STORAGE_HELPERS = r"""static __device__ __forceinline__ float jt_f16_to_f32(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
static __device__ __forceinline__ unsigned short jt_f32_to_f16(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
static __device__ __forceinline__ float jt_bf16_to_f32(unsigned short h) {
    return __uint_as_float(((unsigned int)h) << 16);
}
static __device__ __forceinline__ unsigned short jt_f32_to_bf16(float f) {
    const unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)(((u >> 16) & 0x8000u) | 0x7fc0u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
"""


def storage_prelude(kernel):
    """`STORAGE_HELPERS` as lines for a kernel with a buffer of a storage-only dtype, else no lines."""
    return STORAGE_HELPERS.splitlines() + [""] if any(b.dtype in STORAGE for b in kernel.buffers) else []
# Integer +, -, *, neg go through the unsigned type: signed overflow is undefined in C, while NumPy and the LLVM
# backend wrap around.
_UNSIGNED = {"i32": "unsigned int", "i64": "unsigned long long"}
_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
# (float, double) device functions; rsqrtf is CUDA's reciprocal square root (2 ulp), the rest are the accurate libm
# versions (not the __expf intrinsics), so results agree with NumPy to a few ulp.
_MATH = {"exp": ("expf", "exp"), "log": ("logf", "log"), "tanh": ("tanhf", "tanh"), "erf": ("erff", "erf"),
         "sqrt": ("sqrtf", "sqrt"), "rsqrt": ("rsqrtf", "rsqrt"), "sin": ("sinf", "sin"), "cos": ("cosf", "cos"),
         "abs": ("fabsf", "fabs")}
# bool arithmetic, as the LLVM backend defines it (add saturates to or, mul is and).
_BOOL = {"and": "&&", "or": "||", "max": "||", "min": "&&", "add": "||", "mul": "&&"}


class UnsupportedPrimitive(NotImplementedError):
    """The CUDA emitter has no lowering for this primitive on this dtype."""


def c_const(value, dtype):
    """An exact C literal of ``dtype``.

    >>> c_const(0.1, "f32"), c_const(-2.5, "f64"), c_const(float("inf"), "f32"), c_const(-2**31, "i32")
    ('0.1f', '(-2.5)', '__int_as_float(0x7f800000)', '(-2147483647 - 1)')
    >>> c_const(7, "i64"), c_const(True, "bool"), c_const(float("nan"), "f64")
    ('7LL', 'true', '__longlong_as_double(0x7ff8000000000000ULL)')
    """
    if dtype == "bool":
        return "true" if value else "false"
    if dtype in FLOATS:
        if not math.isfinite(value):
            if dtype == "f32":
                return "__int_as_float(0x%08x)" % struct.unpack("<I", struct.pack("<f", value))[0]
            return "__longlong_as_double(0x%016xULL)" % struct.unpack("<Q", struct.pack("<d", value))[0]
        # NumPy prints the shortest decimal that reads back as exactly this value in this precision
        text = str(np.float32(value)) if dtype == "f32" else repr(float(value))
        text += "f" if dtype == "f32" else ""
        return f"({text})" if text.startswith("-") else text
    value, bits = int(value), 32 if dtype == "i32" else 64
    suffix = "" if dtype == "i32" else "LL"
    if value == -2**(bits - 1):  # the literal 2147483648 has no int type, so the minimum is spelled as a difference
        return f"(-{2**(bits - 1) - 1}{suffix} - 1)"
    return f"({value}{suffix})" if value < 0 else f"{value}{suffix}"


def c_op(name, args, arg_dtype, dtype):
    """The C expression for primitive ``name`` on operand names ``args`` (of ``arg_dtype``) giving ``dtype``.

    >>> c_op("max", ["a", "b"], "f32", "f32")
    '((a != a || a > b) ? a : b)'
    >>> c_op("add", ["a", "b"], "i32", "i32"), c_op("exp", ["a"], "f64", "f64")
    ('(int)((unsigned int)a + (unsigned int)b)', 'exp(a)')
    """
    if name == "where":
        return f"({args[0]} ? {args[1]} : {args[2]})"
    if name == "cast":
        return cast(args[0], arg_dtype, dtype)
    if name in COMPARE:
        return f"({args[0]} {_CMP[name]} {args[1]})"
    if arg_dtype in FLOATS:
        return _float_op(name, args, arg_dtype)
    if arg_dtype == "bool":
        if name == "not":
            return f"(!{args[0]})"
        if name in _BOOL:
            return f"({args[0]} {_BOOL[name]} {args[1]})"
        raise UnsupportedPrimitive(f"cuda backend: primitive {name!r} is not supported on bool")
    return _int_op(name, args, arg_dtype)


def _float_op(name, args, dt):
    f64 = dt == "f64"
    if name in ("add", "sub", "mul", "div"):
        return f"({args[0]} {dict(add='+', sub='-', mul='*', div='/')[name]} {args[1]})"
    if name == "neg":
        return f"(-{args[0]})"
    if name in _MATH:
        return f"{_MATH[name][f64]}({args[0]})"
    if name in ("pow", "fmod"):
        return f"{name if f64 else name + 'f'}({args[0]}, {args[1]})"
    if name == "fma":  # rounded once (CUDA's fmaf/fma are IEEE's fusedMultiplyAdd)
        return f"{'fma' if f64 else 'fmaf'}({args[0]}, {args[1]}, {args[2]})"
    if name == "sigmoid":
        one = "1.0" if f64 else "1.0f"
        return f"({one} / ({one} + {'exp' if f64 else 'expf'}(-{args[0]})))"
    if name in ("max", "min"):
        return combine(name, args[0], args[1], dt)
    raise UnsupportedPrimitive(f"cuda backend: primitive {name!r} is not supported on {dt}")


def _int_op(name, args, dt):
    ct, ut = C_TYPES[dt], _UNSIGNED[dt]
    if name in ("add", "sub", "mul"):
        sym = dict(add="+", sub="-", mul="*")[name]
        return f"({ct})(({ut}){args[0]} {sym} ({ut}){args[1]})"
    if name == "neg":
        return f"({ct})(0u - ({ut}){args[0]})"
    if name == "abs":
        return f"{'abs' if dt == 'i32' else 'llabs'}({args[0]})"
    if name in ("max", "min"):
        return combine(name, args[0], args[1], dt)
    raise UnsupportedPrimitive(f"cuda backend: primitive {name!r} is not supported on {dt}")


def cast(value, src, dst):
    """C conversions: float -> int truncates toward zero, anything -> bool is ``!= 0`` (NaN gives true).

    >>> cast("x", "f32", "bool"), cast("x", "bool", "f64"), cast("x", "i64", "i32")
    ('(x != 0.0f)', '(double)x', '(int)x')
    """
    if src == dst:
        return value
    if src in STORAGE:
        return f"jt_{src}_to_f32({value})"
    if dst in STORAGE:
        return f"jt_f32_to_{dst}({value})"
    if dst == "bool":
        zero = {"f32": "0.0f", "f64": "0.0"}.get(src, "0")
        return f"({value} != {zero})"
    return f"({C_TYPES[dst]}){value}"


def combine(reduce, a, b, dt):
    """``a (reduce) b``; float max/min return a NaN operand, as NumPy does (fmaxf would drop it).

    >>> combine("sum", "a", "b", "f32"), combine("min", "a", "b", "i64"), combine("prod", "a", "b", "bool")
    ('(a + b)', '(a < b ? a : b)', '(a && b)')
    """
    if dt == "bool":
        return f"({a} {'||' if reduce in ('sum', 'max', 'maxnum') else '&&'} {b})"
    if reduce == "maxnum" and dt in FLOATS:
        return f"{'fmaxf' if dt == 'f32' else 'fmax'}({a}, {b})"  # nan skipped, as this reduction means
    if reduce in ("sum", "prod"):
        if dt in FLOATS:
            return f"({a} {'+' if reduce == 'sum' else '*'} {b})"
        return _int_op("add" if reduce == "sum" else "mul", [a, b], dt)
    sym = ">" if reduce in ("max", "maxnum") else "<"
    if dt in FLOATS:
        return f"(({a} != {a} || {a} {sym} {b}) ? {a} : {b})"
    return f"({a} {sym} {b} ? {a} : {b})"
