"""``jitorch.utils.dlpack``: tensors to and from DLPack, zero-copy (``torch.utils.dlpack``).

>>> import numpy as np, jitorch
>>> from jitorch.utils.dlpack import from_dlpack, to_dlpack
>>> from_dlpack(to_dlpack(jitorch.arange(3.0)))
tensor([0., 1., 2.])
>>> from_dlpack(np.arange(2))
tensor([0, 1])
"""
from __future__ import annotations

import ctypes
import enum

from .._misc import from_dlpack as _from_array_api

__all__ = ["DLDeviceType", "from_dlpack", "to_dlpack"]


class DLDeviceType(enum.IntEnum):
    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17


def to_dlpack(tensor):
    """A ``dltensor`` capsule sharing ``tensor``'s memory (it can be consumed once)."""
    return tensor.__dlpack__()


class _Capsule:
    """A legacy DLPack capsule seen through the array API's ``__dlpack__`` protocol, so NumPy and CuPy import it.

    NumPy imports a legacy (unversioned) capsule read-only, as it carries no read-only flag to trust: writes to such a
    CPU tensor raise and ask for a ``clone()``. A versioned capsule (``dltensor_versioned``) says whether it is
    read-only, and imports writable when it is not.
    """

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, stream=None, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        name = ctypes.pythonapi.PyCapsule_GetName
        name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
        kind = name(self.capsule)
        if kind not in (b"dltensor", b"dltensor_versioned"):  # renamed "used_..." by its first consumer
            raise RuntimeError("from_dlpack received an invalid capsule. Note that DLTensor capsules can be consumed "
                               "only once, so you might have already constructed a tensor from it once.")
        pointer = get(self.capsule, kind)
        # DLManagedTensor starts with its DLTensor; DLManagedTensorVersioned puts a version, a manager context, a
        # deleter and flags (32 bytes) first. A DLTensor is {void* data; DLDevice {int32 type, int32 id}; ...}.
        offset = 32 if kind == b"dltensor_versioned" else 0
        device = (ctypes.c_int32 * 2).from_address(pointer + offset + ctypes.sizeof(ctypes.c_void_p))
        return int(device[0]), int(device[1])


def from_dlpack(ext_tensor):
    """A tensor sharing the memory of ``ext_tensor``: any object with ``__dlpack__``, or a DLPack capsule."""
    if type(ext_tensor).__name__ == "PyCapsule":
        ext_tensor = _Capsule(ext_tensor)
    return _from_array_api(ext_tensor)
