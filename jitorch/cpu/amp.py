"""``jitorch.cpu.amp``: torch's deprecated CPU spellings of ``jitorch.amp.autocast("cpu")`` and ``GradScaler("cpu")``.

Both warn with torch's ``FutureWarning`` and then behave as the ``jitorch.amp`` classes.

>>> import warnings, jitorch
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")
...     with jitorch.cpu.amp.autocast():
...         y = jitorch.ones(2, 2) @ jitorch.ones(2, 2)
>>> y.dtype
jitorch.bfloat16
"""
from __future__ import annotations

import warnings

from .. import amp as _amp

__all__ = ["autocast", "GradScaler"]


class autocast(_amp.autocast):
    """Deprecated: ``jitorch.amp.autocast("cpu", ...)``."""

    def __init__(self, enabled: bool = True, dtype=None, cache_enabled: bool = True):
        warnings.warn("`torch.cpu.amp.autocast(args...)` is deprecated. Please use "
                      "`torch.amp.autocast('cpu', args...)` instead.", FutureWarning, stacklevel=2)
        from .. import _dtype

        super().__init__("cpu", enabled=enabled, dtype=_dtype.bfloat16 if dtype is None else dtype,
                         cache_enabled=cache_enabled)


class GradScaler(_amp.GradScaler):
    """Deprecated: ``jitorch.amp.GradScaler("cpu", ...)``."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        warnings.warn("`torch.cpu.amp.GradScaler(args...)` is deprecated. Please use "
                      "`torch.amp.GradScaler('cpu', args...)` instead.", FutureWarning, stacklevel=2)
        super().__init__("cpu", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)
