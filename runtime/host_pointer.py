"""The address of a NumPy array's data, for handing arrays to native kernels through ctypes.

``a.ctypes.data`` builds a ctypes helper object (~1-3 us) and ``a.__array_interface__`` a dict (~1-3 us); an eager
kernel call with six arrays paid more for its addresses than a small row kernel takes to run. The address is the
``data`` field of NumPy's array struct, right after the object header, and that layout is NumPy's public C API
(``PyArrayObject_fields``), unchanged since NumPy 1.7: reading it through ``id(a)`` costs ~0.5 us. The field offset
is checked against ``ctypes.data`` when this module loads, and the slow way is used if they ever disagree.

>>> import numpy as np
>>> a = np.arange(10.0)[3:]
>>> data_address(a) == a.ctypes.data
True
"""
from __future__ import annotations

import ctypes
import sys

import numpy as np

__all__ = ["data_address", "byte_span", "ARRAY_DATA_OFFSET"]

_DATA_OFFSET = sys.getsizeof(object())  # the object header: reference count and type pointer (16 bytes on 64-bit)
_from_address = ctypes.c_void_p.from_address


def _fast(a):
    return _from_address(id(a) + _DATA_OFFSET).value or 0


def _slow(a):
    return a.ctypes.data


def _layout_matches():
    probe = np.arange(8, dtype=np.float32)
    views = (probe, probe[3:], probe[::2], np.empty(0), np.zeros((2, 3))[1])
    return sys.implementation.name == "cpython" and all(_fast(v) == v.ctypes.data for v in views)


data_address = _fast if _layout_matches() else _slow
# Where native code finds an array's data pointer from ``id(a)``; None where the layout is not NumPy's known one.
ARRAY_DATA_OFFSET = _DATA_OFFSET if data_address is _fast else None
data_address.__doc__ = "The address of NumPy array ``a``'s first element (``a.ctypes.data``, faster)."


def byte_span(a):
    """``[low, high)``: the addresses NumPy array ``a`` can touch (a strided view reaches past ``start + nbytes``; a
    negative stride reaches below its first element). Empty arrays touch nothing.

    >>> x = np.zeros((4, 8), np.float32)
    >>> low, high = byte_span(x[:, ::4]); (low == data_address(x), high - low)
    (True, 116)
    """
    low = high = data_address(a)
    if a.flags.c_contiguous or not a.size:
        return low, low + a.nbytes
    for n, stride in zip(a.shape, a.strides):
        if stride < 0:
            low += (n - 1) * stride
        else:
            high += (n - 1) * stride
    return low, high + a.itemsize
