"""The Fortran-ABI ``sgemm``/``dgemm`` that native programs call: NumPy's own OpenBLAS when it exports one.

Native programs call BLAS through a function pointer. NumPy's bundled OpenBLAS is the library eager ``@`` runs on,
so compiled and eager products take the same kernels, threads and thread settings; SciPy ships an older OpenBLAS of
its own (measured on a 2-core EPYC, 128x784 @ 784x512 float32 at one thread: 1.54 ms through SciPy's 0.3.30
against 1.38 ms through NumPy's 0.3.31). NumPy's wheels build OpenBLAS with 64-bit integers (ILP64, symbols
``scipy_sgemm_64_``), so the integer width comes with the address. SciPy's ``cython_blas`` (32-bit integers) is
the fallback.

>>> fn = gemm_function("f32")
>>> fn is None or (fn.address > 0 and fn.int_bits in (32, 64))
True
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

__all__ = ["GemmFunction", "gemm_function"]

# (symbol prefix, suffix, integer bits), most specific first: NumPy 2's scipy-openblas64, then other ILP64 and LP64
# builds a NumPy may link against.
_NUMPY_SYMBOLS = (("scipy_", "_64_", 64), ("", "_64_", 64), ("", "64_", 64), ("scipy_", "_", 32), ("", "_", 32))
_FOUND: dict[str, GemmFunction | None] = {}


@dataclass(frozen=True)
class GemmFunction:
    """A Fortran ``?gemm_``: its address and the width of the integers it takes by reference."""

    address: int
    int_bits: int
    library: str


def _numpy_gemm(letter):
    """NumPy's BLAS ``?gemm``, found through its extension module (dlsym searches the libraries it links)."""
    try:
        from numpy._core import _multiarray_umath as core
    except ImportError:
        return None
    try:
        handle = ctypes.CDLL(core.__file__)
    except OSError:
        return None
    for prefix, suffix, bits in _NUMPY_SYMBOLS:
        try:
            symbol = getattr(handle, f"{prefix}{letter}gemm{suffix}")
        except AttributeError:
            continue
        return GemmFunction(ctypes.cast(symbol, ctypes.c_void_p).value, bits, "numpy")
    return None


def _scipy_gemm(letter):
    try:
        from scipy.linalg import cython_blas
    except ImportError:
        return None
    capsule = cython_blas.__pyx_capi__[f"{letter}gemm"]
    get_name, get_pointer = ctypes.pythonapi.PyCapsule_GetName, ctypes.pythonapi.PyCapsule_GetPointer
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return GemmFunction(get_pointer(capsule, get_name(capsule)), 32, "scipy")


def gemm_function(dtype: str) -> GemmFunction | None:
    """``sgemm`` (``dtype="f32"``) or ``dgemm`` (``"f64"``), or None when neither NumPy nor SciPy exports one."""
    if dtype not in _FOUND:
        letter = {"f32": "s", "f64": "d"}[dtype]
        _FOUND[dtype] = _numpy_gemm(letter) or _scipy_gemm(letter)
    return _FOUND[dtype]
