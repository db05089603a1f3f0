"""bfloat16 <-> float32 conversion of dense CPU arrays as one generated kernel (the IR's storage-only ``bf16``:
`codegen.llvm_body.storage_cast`), for `half_cast.astype`: ml_dtypes narrows in software, an element at a time
(4x torch's ``.bfloat16()``), and round trips a float32 array through its Python-level casting loop.

Narrowing rounds to nearest even and keeps subnormals, as torch's; a NaN stays a NaN (its sign and the quiet bit, as
ml_dtypes; torch's vector loop writes 0xFFFF, its scalar tail 0x7FC0: NaN either way). Widening is exact.

>>> import ml_dtypes
>>> x = np.linspace(-3, 3, 4096, dtype=np.float32).reshape(64, 64)
>>> b = astype(x, ml_dtypes.bfloat16)
>>> bool((b.view(np.uint16) == x.astype(ml_dtypes.bfloat16).view(np.uint16)).all())
True
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..runtime.host_cache import empty as host_empty

__all__ = ["BF16", "PAIRS", "astype", "cast_kernel", "converter"]

BF16 = np.dtype(ml_dtypes.bfloat16)
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
# Below this many elements ml_dtypes' loop costs about what the kernel call does.
MIN_SIZE = 512
# (source, destination) type characters -> the kernel's IR dtypes ('E': ml_dtypes' bfloat16; float64 through float32,
# which holds every bfloat16 exactly).
PAIRS = {("E", "f"): ("bf16", "f32"), ("E", "d"): ("bf16", "f32"), ("f", "E"): ("f32", "bf16")}
_kernels: dict = {}


def dense_order(a):
    """"C" or "F" for an array dense in that memory order (the order a converted copy keeps), else None."""
    return "C" if a.flags.c_contiguous else "F" if a.flags.f_contiguous else None


def astype(a, dtype):
    """``a.astype(dtype, order="K")`` for a dense (C or Fortran order) bfloat16 NumPy array into float32 or float64,
    or a float32 one into bfloat16, as one native pass; None for anything else (the caller keeps NumPy's
    conversion)."""
    if type(a) is not np.ndarray or a.size < MIN_SIZE:
        return None
    dtype = np.dtype(dtype)
    pair = PAIRS.get((a.dtype.char, dtype.char))
    if pair is None or a.dtype != BF16 and dtype != BF16 or not (
            a.dtype.isnative and dtype.isnative and a.flags.aligned):
        return None
    order = dense_order(a)
    if order is None:
        return None
    kernel = _kernel(pair)
    wide = _F32 if dtype == _F64 else dtype
    # (C order from the host cache: a large buffer comes with its pages already mapped)
    out = host_empty(a.shape, wide) if order == "C" else np.empty(a.shape, wide, order=order)
    from .native_eager import _GRAIN, launch_arrays

    # Both arrays are dense in one memory order: the flat pass over memory converts element to element.
    launch_arrays(kernel, [a, out], a.size, _GRAIN, a.size)
    return out.astype(_F64, order="K") if dtype == _F64 else out


def _kernel(pair):
    kernel = _kernels.get(pair)
    if kernel is None:
        kernel = _kernels[pair] = cast_kernel(*pair)
    return kernel


def converter(src, dst):
    """A ``(source address, destination address, n)`` call converting ``n`` dense elements of IR dtype ``src`` into
    ``dst`` (`half_cast.astype_into`; the F16C converters' signature)."""
    kernel = _kernel((src, dst))
    from .native_eager import _GRAIN, launch

    return lambda source, destination, n: launch(kernel, [source, destination], n, _GRAIN, n)


def cast_kernel(src, dst):
    """The size-generic kernel converting IR dtype ``src`` into ``dst`` element by element (`launch_arrays`)."""
    from ..codegen.ir import Buffer, Kernel, Store, load, op
    from ..codegen.llvm_compile import compile_kernel
    from ..codegen.llvm_objcache import default_cache
    from .native_eager import _GENERIC_SIZE

    value = op("cast", load(0, src), dtype=dst)
    kernel = Kernel((_GENERIC_SIZE,), (Buffer(src, (1,)), Buffer(dst, (1,))), (Store(1, value),))
    return compile_kernel(kernel, cache=default_cache())
