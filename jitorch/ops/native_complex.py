"""Eager CPU complex64 division and reciprocal as ATen computes them, in one generated LLVM kernel.

ATen divides ``c10::complex`` numbers by Smith's algorithm (scale by the larger part of the divisor), compiled with
fused multiply-adds; NumPy's complex loops use another variant, not vectorized: a reciprocal of 10^5 complex64
values took 1.3 ms (torch 0.14), gave a different last bit for about a quarter of them, and other special values
(``1 / 0`` is ``inf+nanj`` in torch, ``nan+nanj`` in NumPy; ``1 / inf`` is ``+0`` in torch, ``-0j`` in NumPy).
Here each fused multiply-add is a float64 product and sum of the float32 operands rounded to float32 (the product
is exact in float64, so the result is the fused one but for double rounding, about once in 2^29).

>>> import numpy as np
>>> z = np.array([0, 1 + 1j, np.inf, 2j] * 100, np.complex64)
>>> divide(None, z)[:4].tolist()
[(inf+nanj), (0.5-0.5j), 0j, -0.5j]
"""
from __future__ import annotations

import math

import numpy as np

from ..codegen.ir import Buffer, Kernel, Store, const, load, op
from ..codegen.llvm_compile import compile_kernel
from ..codegen.llvm_objcache import default_cache
from ..runtime import host_cache
from .native_eager import _GENERIC_SIZE, launch_arrays, memory_order

__all__ = ["divide", "smith_division"]

_C64 = np.dtype(np.complex64)
_GRAIN = 1 << 14
_INTERLEAVED_MAX = 2048  # elements up to which the kernel reads and writes the pairs in place
_kernels: dict = {}


def smith_division(a, b, c, d, fused):
    """``(a + bi) / (c + di)`` as ``c10::complex``'s ``operator/``: (real, imag) kernel-IR expressions (`codegen.ir`)
    of the four parts, ``fused(x, y, z)`` building ``x * y + z``; ``a`` None for the reciprocal (``a = 1, b = 0``,
    whose fused terms reduce exactly to the forms below: the ratio is NaN only where the scale is)."""
    abs_c, abs_d = op("abs", c), op("abs", d)
    c_larger = op("ge", abs_c, abs_d)
    big, small = op("where", c_larger, c, d), op("where", c_larger, d, c)
    ratio = op("div", small, big)
    scale = op("div", const(1, c.dtype), fused(small, ratio, big))
    zero = const(0, c.dtype)
    if a is None:
        a, b = const(1, c.dtype), zero
        real = op("where", c_larger, scale, op("mul", op("add", ratio, zero), scale))
        imag = op("where", c_larger, op("mul", op("sub", zero, ratio), scale), op("neg", scale))
    else:
        neg_a = op("neg", a)
        real = op("mul", op("where", c_larger, fused(b, ratio, a), fused(a, ratio, b)), scale)
        imag = op("mul", op("where", c_larger, fused(neg_a, ratio, b), fused(b, ratio, neg_a)), scale)
    # Both parts zero: ATen divides each part by its zero (a complex inf or nan), as C does.
    both_zero = op("and", op("eq", abs_c, zero), op("eq", abs_d, zero))
    return op("where", both_zero, op("div", a, abs_c), real), op("where", both_zero, op("div", b, abs_d), imag)


def _fused_f32(x, y, z):
    wide = [op("cast", v, dtype="f64") for v in (x, y, z)]
    return op("cast", op("add", op("mul", wide[0], wide[1]), wide[2]), dtype="f32")


def _kernel(operands, interleaved):
    """The size-generic kernel writing the quotient from the operands: ``operands`` says per operand (numerator, then
    denominator; one for the reciprocal) whether it is one number, read with a zero stride. ``interleaved``: reading
    and writing the (real, imag) pairs in place, else contiguous float32 planes of each part, for large arrays (the
    strided kernel ran 5x slower than the plane copies and the plane kernel together; on small ones it saves the
    copies' calls)."""
    key = (operands, interleaved)
    kernel = _kernels.get(key)
    if kernel is None:
        step = 2 if interleaved else 1
        buffers = [Buffer("f32", (0 if one else step,), part if interleaved else 0) for one in operands
                   for part in (0, 1)]
        buffers += [Buffer("f32", (step,), 0), Buffer("f32", (step,), 1 if interleaved else 0)]
        parts = [load(i, "f32") for i in range(len(buffers) - 2)]
        real, imag = smith_division(None, None, *parts, _fused_f32) if len(operands) == 1 else \
            smith_division(*parts, _fused_f32)
        n = len(parts)
        ir = Kernel((_GENERIC_SIZE,), tuple(buffers), (Store(n, real), Store(n + 1, imag)))
        kernel = _kernels[key] = compile_kernel(ir, cache=default_cache())
    return kernel


def divide(num, den):
    """``num / den`` (``num`` None: ``1 / den``) as ATen's CPU division when the operands are complex64 NumPy arrays
    or Python numbers, one an array (broadcast as the ufunc would), else None: the caller divides its own way."""
    if num is None:
        if type(den) is not np.ndarray or den.dtype != _C64:
            return None
        operands = [den]
        shape = den.shape
    else:
        if type(num) is not np.ndarray and type(den) is not np.ndarray:
            return None
        for x in (num, den):
            if type(x) is np.ndarray and x.dtype != _C64 or type(x) not in (np.ndarray, int, float, complex):
                return None
        shape = np.broadcast_shapes(np.shape(num), np.shape(den))
        operands = [np.asarray(x, _C64) for x in (num, den)]
    size = math.prod(shape)
    if not size:
        return np.empty(shape, _C64)
    # A one-element operand (a number) is read as such (a zero stride), others as arrays of the result's shape.
    single = tuple(x.size == 1 for x in operands) if len(operands) == 2 else (False,)
    order = _layout_order(operands, single, shape)
    if order is not None:
        # The result takes the first full operand's layout, as the ufunc (and ATen) would: computed in that
        # operand's memory order, a transposed input gives a transposed result (a later .view relies on it).
        inverse = np.argsort(order)
        operands = [x if one else np.broadcast_to(x, shape).transpose(order) for x, one in zip(operands, single)]
        return _divide(operands, single, tuple(shape[d] for d in order), size).transpose(inverse)
    return _divide(operands, single, shape, size)


def _layout_order(operands, single, shape):
    """The axis order (outermost first) of the first full-shape operand when it is not C-ordered, else None."""
    for x, one in zip(operands, single):
        if one or x.shape != tuple(shape) or x.ndim < 2 or x.flags.c_contiguous:
            continue
        return memory_order(x)
    return None


def _divide(operands, single, shape, size):
    """The quotient of ``operands`` (broadcastable to ``shape``) as a new C-ordered array of ``shape``."""
    out = np.empty(shape, _C64) if size * 8 < host_cache.THRESHOLD else host_cache.empty(shape, _C64)
    interleaved = size <= _INTERLEAVED_MAX
    arrays = []
    for x, one in zip(operands, single):
        x = x.reshape(1) if one else x if x.shape == shape else np.broadcast_to(x, shape)
        if interleaved:
            pairs = np.ascontiguousarray(x).reshape(-1).view(np.float32)
            arrays += [pairs, pairs]
        else:
            arrays += [np.ascontiguousarray(x.real), np.ascontiguousarray(x.imag)]
    pairs = out.reshape(-1).view(np.float32)
    if interleaved:
        launch_arrays(_kernel(single, True), [*arrays, pairs, pairs], size, _GRAIN, size)
        return out
    real, imag = np.empty(size, np.float32), np.empty(size, np.float32)
    launch_arrays(_kernel(single, False), [*arrays, real, imag], size, _GRAIN, size)
    pairs = pairs.reshape(size, 2)
    pairs[:, 0] = real
    pairs[:, 1] = imag
    return out
