"""``jitorch.cuda``: CUDA devices, seeding, memory, streams and events (PyTorch's ``torch.cuda``).

On a machine without a GPU everything answers as CPU-only PyTorch does, so device-agnostic scripts run unchanged:

>>> import jitorch, jitorch.cuda
>>> device = "cuda" if jitorch.cuda.is_available() else "cpu"
>>> jitorch.cuda.device_count() == (1 if device == "cuda" else 0) or device == "cuda"
True
>>> jitorch.cuda.manual_seed_all(0)     # a no-op without CUDA, as in torch
"""
from __future__ import annotations

from . import amp, memory, nvtx, random, streams  # noqa: F401
from ._lazy import NOT_COMPILED, cupy, device_index, has_cuda, require_cuda  # noqa: F401 - NOT_COMPILED re-exported
from .memory import *  # noqa: F401,F403
from .memory import __all__ as _memory_all
from .random import *  # noqa: F401,F403
from .random import __all__ as _random_all
from .streams import *  # noqa: F401,F403
from .streams import __all__ as _streams_all
from .graphs import CUDAGraph, graph, graph_pool_handle, is_current_stream_capturing  # noqa: F401
from ._graphed_callables import make_graphed_callables  # noqa: F401
from ..runtime import OutOfMemoryError  # noqa: F401
from .._misc import CUDA_LEGACY_TYPES as _legacy_types

globals().update(_legacy_types)  # torch.cuda.FloatTensor, ...: legacy types of CUDA tensors

__all__ = ["is_available", "device_count", "is_initialized", "init", "current_device", "set_device", "device",
           "device_of", "get_device_name", "get_device_properties", "get_device_capability", "get_arch_list",
           "synchronize", "is_bf16_supported", "ipc_collect", "OutOfMemoryError", "amp", "nvtx", "CUDAGraph", "graph",
           "graph_pool_handle", "is_current_stream_capturing", "make_graphed_callables"] + \
    list(_memory_all) + list(_random_all) + list(_streams_all) + list(_legacy_types)


def is_available() -> bool:
    """True when jitorch can run on a CUDA GPU (CuPy installed and at least one device visible)."""
    return has_cuda()


def device_count() -> int:
    """Number of visible CUDA devices (0 without any)."""
    from ..runtime import device_count as _count

    return _count() if has_cuda() else 0


def is_initialized() -> bool:
    """Whether CUDA has been set up in this process; jitorch sets it up on first use, so: is a device usable."""
    return has_cuda()


def init() -> None:
    """Initialise CUDA eagerly; raises CPU-only torch's ``AssertionError`` without a device."""
    require_cuda()


def current_device() -> int:
    """Index of the currently selected CUDA device."""
    require_cuda()
    return int(cupy().cuda.runtime.getDevice())


def set_device(device) -> None:
    """Select a CUDA device; a negative index is ignored, as in torch."""
    index = device_index(device, optional=False) if not isinstance(device, int) else device
    if index < 0:
        return
    if not has_cuda():
        # CPU-only torch fails here with an AttributeError from its missing CUDA hook; keep the type.
        raise AttributeError("jitorch.cuda.set_device() needs a CUDA device, and none is available")
    cupy().cuda.runtime.setDevice(index)


class device:
    """``with jitorch.cuda.device(i): ...`` selects device ``i`` for the block (``-1``/``None``: leave it)."""

    def __init__(self, device):
        self.idx = -1 if device is None else device_index(device, optional=True)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx < 0:
            return None
        if not has_cuda():
            raise RuntimeError("PyTorch was compiled without CUDA support")
        self.prev_idx = int(cupy().cuda.runtime.getDevice())
        cupy().cuda.runtime.setDevice(self.idx)
        return None

    def __exit__(self, *exc):
        if self.idx >= 0 and self.prev_idx != self.idx:
            cupy().cuda.runtime.setDevice(self.prev_idx)
        return False


class device_of(device):
    """``with jitorch.cuda.device_of(tensor):`` selects the tensor's device; a CPU tensor leaves things as they are."""

    def __init__(self, obj):
        dev = getattr(obj, "device", None)
        super().__init__(dev.index if dev is not None and dev.type == "cuda" else -1)


def _properties(index):
    return cupy().cuda.runtime.getDeviceProperties(index)


def get_device_name(device=None) -> str:
    """The GPU's marketing name, e.g. ``"NVIDIA H100 80GB HBM3"``."""
    require_cuda()
    name = _properties(device_index(device))["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


class _CudaDeviceProperties:
    """The fields scripts read from ``get_device_properties``: name, total_memory, major/minor, SM count."""

    def __init__(self, props):
        name = props["name"]
        self.name = name.decode() if isinstance(name, bytes) else str(name)
        self.major, self.minor = int(props["major"]), int(props["minor"])
        self.total_memory = int(props["totalGlobalMem"])
        self.multi_processor_count = int(props["multiProcessorCount"])
        self.is_integrated = bool(props.get("integrated", 0))
        self.is_multi_gpu_board = bool(props.get("isMultiGpuBoard", 0))

    def __repr__(self):
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"multi_processor_count={self.multi_processor_count})")


def get_device_properties(device=None) -> _CudaDeviceProperties:
    require_cuda()
    return _CudaDeviceProperties(_properties(device_index(device)))


def get_device_capability(device=None) -> tuple[int, int]:
    """(major, minor) compute capability, e.g. ``(9, 0)`` for Hopper."""
    props = get_device_properties(device)
    return props.major, props.minor


def get_arch_list() -> list:
    """Architectures this build targets: ``[]`` without CUDA, like torch. jitorch compiles at run time (NVRTC)."""
    if not has_cuda():
        return []
    major, minor = get_device_capability()
    return [f"sm_{major}{minor}"]


def synchronize(device=None) -> None:
    """Wait for all queued work on the device to finish."""
    require_cuda()
    cupy().cuda.Device(device_index(device)).synchronize()


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether the GPU does bfloat16: False without CUDA; native from compute capability 8.0 (Ampere)."""
    if not has_cuda():
        return False
    return including_emulation or get_device_capability()[0] >= 8


def ipc_collect() -> None:
    """Free CUDA IPC memory no longer used by other processes; raises without CUDA like torch."""
    require_cuda()


