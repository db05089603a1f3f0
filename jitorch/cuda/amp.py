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
from ..amp._deprecated import device_amp_classes

__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd"]


autocast, GradScaler = device_amp_classes("cuda", "float16", __name__)


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
