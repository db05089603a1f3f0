"""Large NumPy arrays guarded by their contents: a version number that changes whenever an array's bytes do.

A trace may bake an array a compiled function reads into its graph (``jitorch.tensor(a)`` copies it, ``float(a.sum())``
is a Python number), so an array changed in place between calls (``a *= 2``, ``a[0] = 5``) must retrace, as small
arrays do (guarded by value, `guards._constant`). Holding every large array's bytes in the guard and building them
per call would copy the array on every call; instead each array gets one snapshot, kept beside it while it lives,
compared with the array's memory on every call (one ``memcmp``: a read of both, no copy, for a C-contiguous array)
and taken again, with a new version, when they differ. Versions are never reused, so a version also names the
array object: another array with equal contents is another version (a graph may share the first one's memory).

>>> import numpy as np
>>> a = np.zeros(5000, np.float32)
>>> v = contents_version(a)
>>> contents_version(a) == v
True
>>> a[3] = 1.0
>>> contents_version(a) == v
False
"""
from __future__ import annotations

import ctypes
import itertools
import weakref

import numpy as np

from ..runtime.host_pointer import data_address

__all__ = ["contents_version"]

_memcmp = ctypes.CDLL(None).memcmp
_memcmp.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_memcmp.restype = ctypes.c_int

_VERSIONS = itertools.count(1)


class _Record:
    """One live array's snapshot and the version its contents had when it was taken."""

    __slots__ = ("ref", "snapshot", "version")


_RECORDS: dict[int, _Record] = {}  # id of a live array -> its record (dropped when the array is freed)


def _forget(ref, key):
    rec = _RECORDS.get(key)
    if rec is not None and rec.ref is ref:
        del _RECORDS[key]


def _same_bytes(snapshot, array):
    if snapshot.shape != array.shape or snapshot.dtype != array.dtype:
        return False  # ``a.shape = (50, 100)`` in place
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return _memcmp(data_address(snapshot), data_address(array), snapshot.nbytes) == 0


def contents_version(array):
    """A number equal for two calls exactly when ``array`` is the same object with the same shape, dtype and bytes
    (object arrays: the same element objects) as at the other call."""
    key = id(array)
    rec = _RECORDS.get(key)
    if rec is None or rec.ref() is not array:
        rec = _RECORDS[key] = _Record()
        rec.ref = weakref.ref(array, lambda ref, key=key: _forget(ref, key))
    elif _same_bytes(rec.snapshot, array):
        return rec.version
    rec.snapshot = np.array(array, order="C", copy=True)
    rec.version = next(_VERSIONS)
    return rec.version
