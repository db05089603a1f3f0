"""Standard normal float32 draws as ATen makes them: uniforms turned into normals by the Box-Muller transform, in one
generated LLVM kernel writing both output halves (NumPy's float32 ziggurat takes about 17 ns a sample here, its
``sin``/``cos`` ufuncs as many again; the kernel about 1.5 ns after the uniforms' 2).

The pairs are the two halves of one uniform draw: ``u`` from the first half, ``v`` from the second, giving
``sqrt(-2 log(1 - u)) * cos(2 pi v)`` and ``... * sin(2 pi v)``. ``1 - u`` lies in ``(0, 1]``, so every sample is
finite (at most about 5.8 in magnitude, as ATen's float32 transform).

>>> import numpy as np
>>> z = standard_normal(np.random.Generator(np.random.PCG64(0)), (100, 50), np.float32)
>>> z.shape, z.dtype, bool(abs(float(z.astype(np.float64).mean())) < 0.05)
((100, 50), dtype('float32'), True)
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["standard_normal"]

_MIN_SIZE = 1024  # below this NumPy's own sampler is as quick as two kernel calls
_F32 = np.dtype(np.float32)
_kernels: list = []  # the Box-Muller kernel, then native_eager's launch_arrays and its grain
# The pair's two samples share the radius; one kernel writes both halves (two kernels, one a half each, cost a
# second launch: 1.5 of a 32x32 randn's 11 us).
_RADIUS = "sqrt(-2.0 * log(1.0 - {0}))"
_ANGLE = f"{2 * math.pi!r} * {{1}}"


def _box_muller_kernel():
    """The size-generic kernel reading uniforms ``u`` (buffer 0) and ``v`` (1), writing ``radius * cos(angle)`` to
    buffer 2 and ``radius * sin(angle)`` to buffer 3, compiled through the disk cache."""
    from ..codegen.ir import Buffer, Kernel, Store, load
    from ..codegen.llvm_compile import compile_kernel
    from ..codegen.llvm_objcache import default_cache
    from .._compile.expr import parse_expr
    from .native_eager import _GENERIC_SIZE

    inputs = [load(0, "f32"), load(1, "f32")]
    stores = tuple(Store(2 + k, parse_expr(f"{_RADIUS} * {trig}({_ANGLE})", inputs, "f32"))
                   for k, trig in enumerate(("cos", "sin")))
    buffers = tuple(Buffer("f32", (1,)) for _ in range(4))
    return compile_kernel(Kernel((_GENERIC_SIZE,), buffers, stores), cache=default_cache())


def standard_normal(rng, shape, dtype=np.float64):
    """``rng.standard_normal(shape, dtype=dtype)``; float32 draws from a NumPy generator of 1024 samples or more by
    the Box-Muller kernel (other draws, and other streams such as a device's or a refusing vmap stream, are the
    stream's own)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    size = math.prod(shape)
    if type(rng) is not np.random.Generator or size < _MIN_SIZE or dtype is not np.float32 and np.dtype(dtype) != _F32:
        return rng.standard_normal(shape, dtype=dtype)
    if not _kernels:  # (imported on first use, with the code generator, and kept with the kernel)
        from .native_eager import _GRAIN, launch_arrays

        _kernels.extend([_box_muller_kernel(), launch_arrays, _GRAIN])
    kernel, launch_arrays, grain = _kernels
    half = (size + 1) // 2
    uniforms = rng.random(2 * half, dtype=np.float32)
    out = np.empty(2 * half, np.float32)
    launch_arrays(kernel, [uniforms[:half], uniforms[half:], out[:half], out[half:]], half, grain, half)
    return (out if size == 2 * half else out[:size]).reshape(shape)
