"""Eager bfloat16 (and float16) unary rows (relu, GELU, sigmoid, exp, tanh...) as one generated pass: each element
widened to float32 as it loads, the row's own fusion expression (the string the fuser compiles) computed in float32,
the result rounded once, as ATen's half-type kernels do. The rows' NumPy code goes through ml_dtypes' software loops
(or NumPy's float16 ones) and float32 copies: 6x (relu) to 35x (exact GELU) torch's time on bfloat16 1000x1000.

Only rows whose one-pass bits were checked against torch's take this path (`ROWS`); the others keep their kernel.

>>> import ml_dtypes
>>> from jitorch.ops.table import OPS
>>> x = np.linspace(-3, 3, 4096, dtype=np.float32).astype(ml_dtypes.bfloat16)
>>> out = pointwise(OPS["relu"], x)
>>> out.dtype == x.dtype and float(out.astype(np.float32).min()) == 0.0
True
"""
from __future__ import annotations

import math

import numpy as np

from .bf16_cast import BF16

__all__ = ["BF16", "ROWS", "clamp_numbers", "pointwise"]

MIN_SIZE = 512  # elements below which the row's own kernel costs about a kernel call
# Rows whose ATen half-type kernels compute in float32 and round once (checked over every bfloat16 and float16 value
# in tests/test_bf16_unary.py): their fusion expressions give torch's bits but where the float32 formulas differ
# (torch's sigmoid overflowing to 0, GELU's cancelling tail: as far from torch as the rows' NumPy kernels, or closer).
# (Not rsqrt: ATen's vectorized loop leaves a row's tail to its scalar loop, which rounds the square root to the half
# type first; the row's own kernel replays that.)
ROWS = frozenset({"relu", "neg", "abs", "exp", "tanh", "sigmoid", "silu", "gelu", "gelu_tanh", "sqrt",
                  "reciprocal", "log", "sin", "cos", "hardsigmoid", "hardswish", "mish"})
# float16 over every value: sin, GELU and mish one-pass are an input or two further from torch than the rows' NumPy
# kernels (2, 218, 4 of 65536 against 0, 217, 3): they keep those.
_ROWS = {"bf16": ROWS, "f16": ROWS - {"sin", "gelu", "mish"}}
_F16 = np.dtype(np.float16)
# ATen's tanh form of the tanh GELU (the row's own expression, an exp form, is 150 of the 65536 bfloat16 inputs off
# torch's bits, this form 4: where torch's tanh is exactly -1; float16: 25, the NumPy kernel 259).
_BETA = math.sqrt(2) * (2 / math.sqrt(math.pi)) * 0.5
_EXPRESSIONS = {"gelu_tanh": f"0.5 * {{0}} * (1 + tanh({_BETA!r} * ({{0}} + 0.044715 * ({{0}} * {{0}} * {{0}}))))"}
_kernels: dict = {}


def pointwise(row, x):
    """Row ``row``'s expression over the C-contiguous bfloat16 (or float16) NumPy array ``x`` as one native pass, or
    None where this does not apply (other rows, dtypes or layouts, small arrays)."""
    if type(x) is not np.ndarray or x.size < MIN_SIZE or not x.flags.c_contiguous:
        return None
    storage = "bf16" if x.dtype == BF16 else "f16" if x.dtype == _F16 and x.dtype.isnative else None
    if storage is None or row.name not in _ROWS[storage]:
        return None
    key = (row.name, storage)
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = _kernels[key] = _kernel(_EXPRESSIONS.get(row.name) or row.fusion.expr, storage)
    if kernel is False:
        return None
    from ..runtime.host_cache import empty as host_empty
    from .native_eager import _GRAIN, launch_arrays

    out = host_empty(x.shape, x.dtype)
    launch_arrays(kernel, [x, out], x.size, _GRAIN, x.size)
    return out


def _kernel(expr, storage, numbers=0):
    """The size-generic kernel of ``expr`` over one input of IR dtype ``storage`` ("bf16", "f16") and ``numbers``
    float32 numbers (one-element arrays), in float32, rounded to ``storage``; False where the expression has no IR
    form or the host cannot load ``storage`` (F16C)."""
    from .._compile.expr import Unfusable, parse_expr  # the compiler package imports the op rows: load it late
    from ..codegen.ir import Buffer, Kernel, Store, load, op
    from ..codegen.llvm_compile import compile_kernel
    from ..codegen.llvm_host import storage_dtypes
    from ..codegen.llvm_objcache import default_cache
    from .native_eager import _GENERIC_SIZE

    if storage not in storage_dtypes():
        return False
    try:
        value = parse_expr(expr, [op("cast", load(0, storage), dtype="f32"),
                                  *(load(1 + i, "f32") for i in range(numbers))], "f32")
    except Unfusable:
        return False
    if value.dtype != "f32":
        return False
    buffers = (Buffer(storage, (1,)),) + (Buffer("f32", (0,)),) * numbers + (Buffer(storage, (1,)),)
    kernel = Kernel((_GENERIC_SIZE,), buffers, (Store(1 + numbers, op("cast", value, dtype=storage)),))
    return compile_kernel(kernel, cache=default_cache())


# ATen's clamp compares (`native_select`'s expressions): NaN stays NaN, -0.0 stays -0.0 at a 0 bound, lo > hi gives hi.
_CLAMP = {(True, False): "((({0} < {1}) || ({1} != {1})) ? {1} : {0})",
          (False, True): "((({0} > {1}) || ({1} != {1})) ? {1} : {0})"}
_CLAMP[True, True] = f"((({_CLAMP[True, False]} > {{2}}) || ({{2}} != {{2}})) ? {{2}} : {_CLAMP[True, False]})"


def clamp_numbers(x, lo, hi):
    """``clamp(x, lo, hi)`` of a C-contiguous bfloat16 or float16 NumPy array with bounds that are floats already
    rounded to its type (either may be None), as one native pass; None where that does not apply."""
    if type(x) is not np.ndarray or x.size < MIN_SIZE or not x.flags.c_contiguous or (lo is None and hi is None):
        return None
    storage = "bf16" if x.dtype == BF16 else "f16" if x.dtype == _F16 and x.dtype.isnative else None
    if storage is None:
        return None
    bounds = [np.array([b], np.float32) for b in (lo, hi) if b is not None]
    key = ("clamp", lo is not None, hi is not None, storage)
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = _kernels[key] = _kernel(_CLAMP[key[1:3]], storage, len(bounds))
    if kernel is False:
        return None
    from ..runtime.host_cache import empty as host_empty
    from .native_eager import _GRAIN, launch_arrays

    out = host_empty(x.shape, x.dtype)
    launch_arrays(kernel, [x, *bounds, out], x.size, _GRAIN, x.size)
    return out
