"""Eager CPU float32 ``where`` (and so ``masked_fill``, and the selects of piecewise composites) as one generated
branch-free kernel; ``clamp`` with Scalar bounds as one select pass (`clamp_scalars`).

NumPy's ``where`` (and ATen's) branches on each mask element: on a mask without long runs (``x.abs() < 1``, a
dropout-like pattern) every other element is a mispredicted branch, 4 ns an element, 25x a contiguous copy. A
generated select is a vector blend: 131k elements 330 -> 23 us. A branch that is a number (``masked_fill(m, -inf)``,
``where(m, x, 0.0)``) or a 0-d tensor is read as a one-element buffer with stride 0, so one kernel serves every value
(inf and nan included); the number is rounded to float32 first, as ATen casts a Scalar to the result's type.

>>> m = np.array([True, False] * 200)
>>> x = np.arange(400, dtype=np.float32)
>>> out = where(m, x, float("-inf"))
>>> out[:4].tolist()
[0.0, -inf, 2.0, -inf]
>>> where(m[:10], x[:10], 0.0) is None  # small: NumPy's where is as fast as a kernel call
True
"""
from __future__ import annotations

import numpy as np

from ..codegen.ir import Buffer, Kernel, Store, load, op
from ..codegen.llvm_compile import compile_kernel
from ..codegen.llvm_objcache import default_cache
from ..runtime import host_cache
from .native_eager import _GENERIC_SIZE, _GRAIN, launch_arrays, pointwise_constants

__all__ = ["where", "clamp_scalars"]

_MIN_SIZE = 128
_F32 = np.dtype(np.float32)
_BOOL = np.dtype(np.bool_)
_kernels: dict = {}


def _kernel(scalar_a, scalar_b):
    """The select of buffer 1 or 2 by buffer 0 into buffer 3; a scalar branch's buffer has stride 0."""
    key = (scalar_a, scalar_b)
    kernel = _kernels.get(key)
    if kernel is None:
        buffers = (Buffer("bool", (1,)), Buffer("f32", (0 if scalar_a else 1,)),
                   Buffer("f32", (0 if scalar_b else 1,)), Buffer("f32", (1,)))
        value = op("where", load(0, "bool"), load(1, "f32"), load(2, "f32"))
        kernel = _kernels[key] = compile_kernel(Kernel((_GENERIC_SIZE,), buffers, (Store(3, value),)),
                                                cache=default_cache())
    return kernel


def _branch(v, shape):
    """(array, is_scalar) for a branch the kernel takes, else None: a C-contiguous float32 array of ``shape``, a 0-d
    float32 array or one of ``shape`` with zero strides (NumPy's where over it: 10 us at 1024 elements), or a Python
    float/int (rounded to float32)."""
    t = type(v)
    if t is np.ndarray:
        if v.dtype is not _F32:
            return None
        if v.shape == shape:
            if v.flags.c_contiguous:
                return v, False
            if not any(v.strides):  # one number broadcast (a sum's gradient): its element, read with stride 0
                return v[(0,) * v.ndim + (...,)], True
            return None
        return (v, True) if v.ndim == 0 else None
    if t is float or (t is int and -(1 << 62) < v < (1 << 62)):
        return np.array(v, _F32), True
    return None


def where(cond, a, b):
    """``where(cond, a, b)`` as one native kernel for a C-contiguous bool ``cond`` and float32 branches (see
    `_branch`) of its shape, at least one of them an array; None where this path does not apply."""
    if type(cond) is not np.ndarray or cond.dtype is not _BOOL or cond.size < _MIN_SIZE or not cond.flags.c_contiguous:
        return None
    shape = cond.shape
    left, right = _branch(a, shape), _branch(b, shape)
    if left is None or right is None or (type(a) is not np.ndarray and type(b) is not np.ndarray):
        return None  # (two numbers make the default dtype)
    size = cond.size
    out = np.empty(shape, _F32) if size * 4 < host_cache.THRESHOLD else host_cache.empty(shape, _F32)
    launch_arrays(_kernel(left[1], right[1]), [cond, left[0], right[0], out], size, _GRAIN, size)
    return out


# ATen's clamp as selects: x kept on a tie with a bound (-0.0 against 0 stays -0.0), a nan bound or x gives nan,
# lo > hi gives hi. The clamp row's fusion rule is the two-bound form.
CLAMP_LOWER = "((({0} < {1}) || ({1} != {1})) ? {1} : {0})"
CLAMP_BOTH = f"((({CLAMP_LOWER} > {{2}}) || ({{2}} != {{2}})) ? {{2}} : {CLAMP_LOWER})"
_CLAMP_UPPER = "((({0} > {1}) || ({1} != {1})) ? {1} : {0})"
_SCALAR_BOUND = (float, int)


def clamp_scalars(row, a, lo, hi):
    """``clamp(a, lo, hi)`` of a float32 array with Python-number bounds (either may be None) as one native pass,
    or None (NumPy's ``maximum`` against a scalar runs a scalar loop: 7x torch's time). ATen's compares: NaN stays
    NaN, -0.0 stays -0.0 against a 0 bound (NumPy's maximum gave 0.0), ``lo > hi`` gives ``hi``.

    >>> from jitorch.ops.table import OPS
    >>> x = np.array([-2.0, -0.0, 0.5, np.nan] * 100, np.float32)
    >>> clamp_scalars(OPS["clamp"], x, 0.0, 1.0)[:4].tolist()
    [0.0, -0.0, 0.5, nan]
    """
    if hi is None:
        if type(lo) in _SCALAR_BOUND:
            return pointwise_constants(row, [a], (lo,), expr=CLAMP_LOWER)
    elif lo is None:
        if type(hi) in _SCALAR_BOUND:
            return pointwise_constants(row, [a], (hi,), expr=_CLAMP_UPPER)
    elif type(lo) in _SCALAR_BOUND and type(hi) in _SCALAR_BOUND:
        return pointwise_constants(row, [a], (lo, hi), expr=CLAMP_BOTH)
    return None
