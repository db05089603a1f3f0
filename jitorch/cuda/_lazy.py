"""Shared checks for ``jitorch.cuda``: is there a device, and the errors CPU-only PyTorch raises when there is not.

>>> from jitorch.cuda._lazy import has_cuda
>>> isinstance(has_cuda(), bool)
True
"""
from __future__ import annotations

from ..runtime import cuda_available

# CPU-only PyTorch raises exactly this (an AssertionError) from most of ``torch.cuda``; scripts that catch it, or tests
# that match the text, keep working unchanged.
NOT_COMPILED = "Torch not compiled with CUDA enabled"


def has_cuda() -> bool:
    """True when a CUDA device is usable (CuPy imports and sees at least one GPU)."""
    return cuda_available()


def require_cuda():
    """Raise CPU-only PyTorch's ``AssertionError`` unless a CUDA device is usable."""
    if not cuda_available():
        raise AssertionError(NOT_COMPILED)


def cupy():
    """The ``cupy`` module; only call after ``require_cuda()`` (importing CuPy is slow, so it is deferred)."""
    import cupy as cp

    return cp


def device_index(device=None, optional=True) -> int:
    """Turn ``None``/int/str/``jitorch.device`` into a CUDA index (``None`` means the current device).

    Mirrors ``torch.cuda._utils._get_device_index``: a non-CUDA device is a ``ValueError``.
    """
    from .._device import device as _device

    if device is None:
        return current_index() if optional else -1
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = _device(device)
    if isinstance(device, _device):
        if device.type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        return current_index() if device.index is None else device.index
    raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")


def current_index() -> int:
    """The current CUDA device index (0 without CUDA, where it is never used)."""
    if not cuda_available():
        return 0
    return int(cupy().cuda.runtime.getDevice())
