"""``jitorch.amp``: automatic mixed precision (``torch.amp``): ``autocast`` and ``GradScaler``.

>>> import jitorch, jitorch.amp
>>> with jitorch.amp.autocast(device_type="cpu", dtype=jitorch.bfloat16):
...     y = jitorch.ones(2, 2) @ jitorch.ones(2, 2)
>>> jitorch.amp.GradScaler("cpu").get_scale()
65536.0
"""
from . import autocast_mode, grad_scaler  # noqa: F401
from .autocast_mode import autocast, custom_bwd, custom_fwd, is_autocast_available
from .grad_scaler import GradScaler

__all__ = ["autocast", "custom_bwd", "custom_fwd", "is_autocast_available", "GradScaler"]
