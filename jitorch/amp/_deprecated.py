"""The deprecated per-device spellings ``torch.cpu.amp`` / ``torch.cuda.amp``: one factory for both devices.

>>> autocast, GradScaler = device_amp_classes("cpu", "bfloat16", __name__)
>>> autocast.__name__, GradScaler.__name__
('autocast', 'GradScaler')
"""
from __future__ import annotations

import warnings

from . import autocast_mode, grad_scaler

__all__ = ["device_amp_classes"]


def device_amp_classes(device: str, default_dtype: str, module: str):
    """``(autocast, GradScaler)`` for ``torch.<device>.amp``: warn as torch does, then act as ``jitorch.amp``'s."""

    class autocast(autocast_mode.autocast):  # noqa: N801 - torch's class name
        __doc__ = f'Deprecated: ``jitorch.amp.autocast("{device}", ...)``.'

        def __init__(self, enabled: bool = True, dtype=None, cache_enabled: bool = True):
            warnings.warn(f"`torch.{device}.amp.autocast(args...)` is deprecated. Please use "
                          f"`torch.amp.autocast('{device}', args...)` instead.", FutureWarning, stacklevel=2)
            from .. import _dtype

            super().__init__(device, enabled=enabled, dtype=getattr(_dtype, default_dtype) if dtype is None else dtype,
                             cache_enabled=cache_enabled)

    class GradScaler(grad_scaler.GradScaler):
        __doc__ = f'Deprecated: ``jitorch.amp.GradScaler("{device}", ...)``.'

        def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                     growth_interval: int = 2000, enabled: bool = True) -> None:
            warnings.warn(f"`torch.{device}.amp.GradScaler(args...)` is deprecated. Please use "
                          f"`torch.amp.GradScaler('{device}', args...)` instead.", FutureWarning, stacklevel=2)
            super().__init__(device, init_scale=init_scale, growth_factor=growth_factor,
                             backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)

    for cls in (autocast, GradScaler):
        cls.__module__, cls.__qualname__ = module, cls.__name__
    return autocast, GradScaler
