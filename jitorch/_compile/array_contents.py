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

__all__ = ["contents_version", "ArrayGuard", "pin_versions", "mark_read_in_place"]

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


_BLOCK = 1 << 16  # elements compared at a time for a strided array: a small temporary, never a copy of it all
_SAME_SIZE_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _same_bytes(snapshot, array):
    if snapshot.shape != array.shape or snapshot.dtype != array.dtype:
        return False  # ``a.shape = (50, 100)`` in place
    if array.flags.c_contiguous:
        return _memcmp(data_address(snapshot), data_address(array), snapshot.nbytes) == 0
    uint = _SAME_SIZE_UINT.get(array.itemsize) if not array.dtype.hasobject else None
    if uint is None or array.ndim == 0:  # object or odd-sized items: compared on a contiguous copy
        array = np.ascontiguousarray(array)
        return _memcmp(data_address(snapshot), data_address(array), snapshot.nbytes) == 0
    # the bits as unsigned integers (NaN equal to itself, -0.0 not to 0.0, as memcmp), a block of rows at a time
    have, want = array.view(uint), snapshot.view(uint)
    rows = max(1, _BLOCK // max(1, array.size // max(1, array.shape[0])))
    return all(np.array_equal(have[i:i + rows], want[i:i + rows]) for i in range(0, array.shape[0], rows))


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


class ArrayGuard:
    """The guard stand-in of a large NumPy array (`guards._constant`): equal to another of the same array object,
    shape and dtype whose contents are the same (`contents_version`, computed only when compared), or to any call's
    once ``live``: the entry's graph reads the array's memory itself on every call (``jitorch.from_numpy(a)``,
    `mark_read_in_place`), so a change of its values needs no retrace and no check."""

    __slots__ = ("array", "shape", "dtype", "version", "live")

    def __init__(self, array):
        self.array, self.shape, self.dtype = array, array.shape, array.dtype.str
        self.version, self.live = None, False

    def pinned(self):
        if self.version is None:
            self.version = contents_version(self.array)
        return self.version

    def __eq__(self, other):
        if type(other) is not ArrayGuard or other.array is not self.array or other.shape != self.shape or \
                other.dtype != self.dtype:
            return False
        return self.live or other.live or self.pinned() == other.pinned()

    __hash__ = None

    def __repr__(self):
        how = "read in place" if self.live else f"contents version {self.version}"
        return f"ndarray {self.shape} {self.dtype} at {id(self.array):#x} ({how})"


def _stand_ins(value, out):
    if type(value) is ArrayGuard:
        out.append(value)
    elif type(value) in (tuple, list):
        for v in value:
            _stand_ins(v, out)
    return out


def pin_versions(values):
    """Fix the contents versions of the array stand-ins among a call's guard ``values`` (as they are now): the
    entry built from them compares later calls with these contents. Returns the stand-ins."""
    found = _stand_ins(list(values), [])
    for g in found:
        g.pinned()
    return found


def mark_read_in_place(guards, held):
    """Mark the array stand-ins among ``guards`` whose array's memory one of ``held`` (the arrays a traced graph
    holds as constants: a ``jitorch.from_numpy(a)`` tensor's) shares: the graph reads those arrays at call time.
    (A trace that read such an array's values besides, ``float(a.sum())`` next to ``from_numpy(a)``, baked them in
    unseen: the array is then guarded by identity only.)"""
    found = _stand_ins([v for _, v in guards], [])
    held = [h for h in held if type(h) is np.ndarray]
    for g in found:
        if any(np.may_share_memory(h, g.array) for h in held):
            g.live = True
