"""``jitorch.accelerator``: the device-agnostic accelerator API (CUDA is jitorch's only accelerator).

>>> import jitorch.accelerator
>>> acc = jitorch.accelerator.current_accelerator()
>>> device = acc if acc is not None else "cpu"
>>> jitorch.accelerator.is_available() == (acc is not None)
True
"""
from __future__ import annotations

from .runtime import cuda_available

__all__ = ["is_available", "current_accelerator", "device_count", "current_device_index", "set_device_index",
           "synchronize"]

_NONE = "Cannot access accelerator device when none is available."


def is_available() -> bool:
    return cuda_available()


def current_accelerator(check_available: bool = False):
    """``jitorch.device("cuda")`` when a GPU is usable, else ``None``."""
    from ._device import device

    return device("cuda") if cuda_available() else None


def device_count() -> int:
    from .runtime import device_count as _count

    return _count() if cuda_available() else 0


def current_device_index() -> int:
    if not cuda_available():
        raise RuntimeError(_NONE)
    from . import cuda

    return cuda.current_device()


current_device_idx = current_device_index


def set_device_index(device) -> None:
    if not cuda_available():
        raise RuntimeError(_NONE)
    from . import cuda

    cuda.set_device(device)


set_device_idx = set_device_index


def synchronize(device=None) -> None:
    if not cuda_available():
        raise RuntimeError(_NONE)
    from . import cuda

    cuda.synchronize(device)
