"""``jitorch.cuda.amp``: torch's deprecated CUDA-only spellings of ``jitorch.amp.autocast`` and ``GradScaler``.

Both warn with torch's ``FutureWarning`` and then behave as ``jitorch.amp.autocast("cuda", ...)`` /
``jitorch.amp.GradScaler("cuda", ...)``, which (without CUDA) switch themselves off with a warning.

>>> import warnings, jitorch.cuda
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")
...     scaler = jitorch.cuda.amp.GradScaler()
>>> scaler.is_enabled()
False
"""
from __future__ import annotations

import functools
import warnings

from .. import amp as _amp

__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd"]


class autocast(_amp.autocast):
    """Deprecated: ``jitorch.amp.autocast("cuda", ...)``."""

    def __init__(self, enabled: bool = True, dtype=None, cache_enabled: bool = True):
        warnings.warn("`torch.cuda.amp.autocast(args...)` is deprecated. Please use "
                      "`torch.amp.autocast('cuda', args...)` instead.", FutureWarning, stacklevel=2)
        from .. import _dtype

        super().__init__("cuda", enabled=enabled, dtype=_dtype.float16 if dtype is None else dtype,
                         cache_enabled=cache_enabled)


class GradScaler(_amp.GradScaler):
    """Deprecated: ``jitorch.amp.GradScaler("cuda", ...)``."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        warnings.warn("`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
                      "`torch.amp.GradScaler('cuda', args...)` instead.", FutureWarning, stacklevel=2)
        super().__init__("cuda", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)


def custom_fwd(fwd=None, *, cast_inputs=None):
    """Deprecated: ``jitorch.amp.custom_fwd(device_type="cuda")``."""
    warnings.warn("`torch.cuda.amp.custom_fwd(args...)` is deprecated. Please use "
                  "`torch.amp.custom_fwd(args..., device_type='cuda')` instead.", FutureWarning, stacklevel=2)
    return functools.partial(_amp.custom_fwd, device_type="cuda", cast_inputs=cast_inputs)(fwd)


def custom_bwd(bwd):
    """Deprecated: ``jitorch.amp.custom_bwd(device_type="cuda")``."""
    warnings.warn("`torch.cuda.amp.custom_bwd(args...)` is deprecated. Please use "
                  "`torch.amp.custom_bwd(args..., device_type='cuda')` instead.", FutureWarning, stacklevel=2)
    return _amp.custom_bwd(bwd, device_type="cuda")
