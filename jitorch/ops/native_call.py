"""Short native calls without ctypes' per-argument conversion, for the small eager kernels (a top-k head, a loss's
picked sum, a scan) whose ctypes call cost as much as their work.

A ctypes function declared with ``argtypes`` converts every argument through its type's ``from_param`` (about
0.1 us each), and a ``CFUNCTYPE`` releases and retakes the GIL; a 6-argument call took 1.4 us around a kernel of a
few hundred nanoseconds. `held_function` gives the same machine code as a ``PYFUNCTYPE`` without ``argtypes``
(the GIL kept: only for short calls), called with ready ctypes objects, which ctypes passes as they are: `pointer`,
a ``c_void_p`` laid over the array object's own data-pointer field (`host_pointer`'s ``id(a)`` reading, without
taking the value out), and `int64`, a ``c_int64``. That call took 0.6 us. A hot call site spells `pointer` out as
``over(id(a) + DATA_OFFSET)``: the function's own frame costs as much as the reading. Python ints are never passed bare:
without ``argtypes`` ctypes passes them as C ``int``, 32 bits, which truncates an address.

>>> import numpy as np
>>> from jitorch.codegen.llvm_cascade import level_power, picked_cascade_function
>>> f = held_function(picked_cascade_function("f32"))
>>> logp, targets, out = -np.arange(6, dtype=np.float32).reshape(2, 3), np.array([2, 0]), np.zeros(1, np.float32)
>>> f(pointer(logp), pointer(targets), int64(2), int64(3), int64(level_power(2)), pointer(out)); float(out[0])
5.0
"""
from __future__ import annotations

import ctypes

from ..runtime.host_pointer import ARRAY_DATA_OFFSET

__all__ = ["HELD", "HELD_MAX", "DATA_OFFSET", "held_function", "over", "pointer", "int64"]

# Whether `pointer` can read the data field (CPython and NumPy's array struct, checked by `host_pointer`); callers
# keep their declared ctypes functions where it cannot.
HELD = ARRAY_DATA_OFFSET is not None
# Elements below which a kernel is short enough to run holding the GIL (`native_eager.HELD_MAX`'s bound).
HELD_MAX = 1 << 14

over = ctypes.c_void_p.from_address  # over(id(a) + DATA_OFFSET): `pointer` inline
DATA_OFFSET = ARRAY_DATA_OFFSET or 0
_held: dict = {}  # id of a declared ctypes function -> (it, its PYFUNCTYPE)


def held_function(fn):
    """The ctypes function pointer ``fn``'s machine code as a ``PYFUNCTYPE`` of its return type with no declared
    arguments (each call passes ctypes objects: `pointer`, `int64`), made once per function."""
    found = _held.get(id(fn))  # (ctypes function pointers are not hashable)
    if found is not None and found[0] is fn:
        return found[1]
    held = ctypes.PYFUNCTYPE(fn.restype)(ctypes.cast(fn, ctypes.c_void_p).value)
    _held[id(fn)] = (fn, held)  # (``fn`` kept, so its id names no other function)
    return held


def pointer(a):
    """A ``c_void_p`` whose value is NumPy array ``a``'s data pointer, read when the call converts it (an alias of the
    array object's field: the caller keeps ``a`` alive through the call)."""
    return over(id(a) + DATA_OFFSET)


_INTS = [ctypes.c_int64(i) for i in range(1025)]


def int64(value):
    """``c_int64(value)``; the small values kept (a call's sizes repeat)."""
    return _INTS[value] if 0 <= value <= 1024 else ctypes.c_int64(value)
