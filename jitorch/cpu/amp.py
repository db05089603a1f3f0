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

from ..amp._deprecated import device_amp_classes

__all__ = ["autocast", "GradScaler"]


autocast, GradScaler = device_amp_classes("cpu", "bfloat16", __name__)
