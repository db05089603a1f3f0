"""jitorch.runtime: devices, array modules, and (later) the caching allocator, streams and capture.

Nothing here knows about Tensor, autograd or nn: the runtime deals in arrays, bytes and pointers.

>>> from jitorch.runtime import array_module_for
>>> array_module_for("cpu").__name__
'numpy'
"""
from . import _blas_threads  # noqa: F401 - first: before .devices imports NumPy, which loads OpenBLAS
from .devices import (accumulate, array_device, array_module_for, cuda_available, cuda_version, device_count,
                      fft_module, is_cpu_array, is_cupy, memory_owner, move_array, scatter_add, special_module,
                      strided_view, ufunc_at)
from .alloc_config import AllocConfigError, AllocatorConfig, parse_alloc_conf
from .allocator import CachingAllocator, OutOfMemoryError
from .driver import DeviceOutOfMemory, Driver, FakeDriver

__all__ = ["array_module_for", "array_device", "cuda_available", "cuda_version", "device_count", "is_cpu_array",
           "is_cupy", "scatter_add", "ufunc_at", "accumulate", "memory_owner", "move_array", "strided_view",
           "special_module", "fft_module",
           "CachingAllocator", "OutOfMemoryError", "AllocatorConfig", "AllocConfigError", "parse_alloc_conf", "Driver",
           "FakeDriver", "DeviceOutOfMemory"]
