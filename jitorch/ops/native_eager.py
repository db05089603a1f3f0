"""Eager CPU kernels that NumPy or SciPy run slowly, as generated LLVM kernels (`codegen.llvm_math`).

SciPy's float32 ``erf`` takes about 30 ns an element (exact GELU, ``nn.GELU()``'s default, is built on it); the
inline polynomial takes about 1. A row's kernel asks `unary` first and keeps its NumPy/SciPy code for everything
this does not take: other dtypes, device arrays, small or non-contiguous inputs. Kernels are size-generic and come
from the disk cache, so each size costs one lookup, then a dict hit.

>>> import numpy as np
>>> x = np.linspace(-3, 3, 5000, dtype=np.float32)
>>> bool(np.abs(unary("erf", x) - __import__("scipy").special.erf(x)).max() < 1e-6)
True
>>> unary("erf", x[:10]) is None  # small: SciPy's loop is faster than a kernel call
True
"""
from __future__ import annotations

import numpy as np

from ..codegen.ir import Buffer, Kernel, Store, load, op
from ..codegen.llvm_compile import compile_kernel
from ..codegen.llvm_objcache import default_cache

__all__ = ["unary"]

_MIN_SIZE = 4096  # below this a ctypes call costs more than SciPy's loop saves
_MAX_KERNELS = 256
_kernels: dict = {}


def unary(name, a):
    """``name(a)`` (an IR unary op) of a C-contiguous float32 NumPy array through a native kernel, or None when this
    path does not apply (the caller computes it its own way)."""
    if type(a) is not np.ndarray or a.dtype != np.float32 or a.size < _MIN_SIZE or not a.flags.c_contiguous:
        return None
    key = (name, a.size)
    kernel = _kernels.get(key)
    if kernel is None:
        if len(_kernels) >= _MAX_KERNELS:
            _kernels.clear()
        ir = Kernel((a.size,), (Buffer("f32", (1,)), Buffer("f32", (1,))), (Store(1, op(name, load(0, "f32"))),))
        kernel = _kernels[key] = compile_kernel(ir, cache=default_cache())
    out = np.empty(a.shape, np.float32)
    kernel.run([a.reshape(-1), out.reshape(-1)])
    return out
