"""Standard normal float32 draws as ATen makes them: uniforms turned into normals by the Box-Muller transform, in one
generated LLVM kernel per output half (NumPy's float32 ziggurat takes about 17 ns a sample here, its ``sin``/``cos``
ufuncs as many again; the kernel about 1.5 ns after the uniforms' 2).

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
_kernels: list = []


def standard_normal(rng, shape, dtype=np.float64):
    """``rng.standard_normal(shape, dtype=dtype)``; float32 draws from a NumPy generator of 1024 samples or more by
    the Box-Muller kernel (other draws, and other streams such as a device's or a refusing vmap stream, are the
    stream's own)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    size = math.prod(shape)
    if type(rng) is not np.random.Generator or np.dtype(dtype) != _F32 or size < _MIN_SIZE:
        return rng.standard_normal(shape, dtype=dtype)
    from .native_eager import _GRAIN, expression_kernel, launch_arrays

    if not _kernels:
        _kernels.extend([expression_kernel(f"sqrt(-2.0 * log(1.0 - {{0}})) * {trig}({2 * math.pi!r} * {{1}})", 2)
                         for trig in ("cos", "sin")])
    cos_kernel, sin_kernel = _kernels
    half = (size + 1) // 2
    uniforms = rng.random(2 * half, dtype=np.float32)
    out = np.empty(2 * half, np.float32)
    u, v = uniforms[:half], uniforms[half:]
    launch_arrays(cos_kernel, [u, v, out[:half]], half, _GRAIN, half)
    launch_arrays(sin_kernel, [u, v, out[half:]], half, _GRAIN, half)
    return out[:size].reshape(shape)
