"""``jitorch.backends.cudnn``: cuDNN switches. jitorch does not use cuDNN, so ``is_available()`` is False and
``version()`` None (as in CPU-only torch); ``enabled``/``benchmark``/``deterministic``/``allow_tf32`` are plain
settable flags with torch's defaults, and ``flags(...)`` sets them for a block.

>>> import jitorch.backends
>>> jitorch.backends.cudnn.deterministic = True
>>> with jitorch.backends.cudnn.flags(enabled=False):
...     jitorch.backends.cudnn.enabled
False
>>> jitorch.backends.cudnn.enabled, jitorch.backends.cudnn.version()
(True, None)
>>> jitorch.backends.cudnn.deterministic = False
"""
from __future__ import annotations

import sys

from .._attr_patch import AttrPatch

enabled = True
benchmark = False
benchmark_limit = 10
deterministic = False
allow_tf32 = True
fp32_precision = "none"


def is_available() -> bool:
    return False


def version():
    return None


def is_acceptable(tensor) -> bool:
    return False


def flags(enabled=False, benchmark=False, benchmark_limit=10, deterministic=False, allow_tf32=True):
    """Set the flags for a block, restoring the previous values after (torch's defaults for omitted ones)."""
    new = {"enabled": enabled, "benchmark": benchmark, "benchmark_limit": benchmark_limit,
           "deterministic": deterministic, "allow_tf32": allow_tf32}
    return AttrPatch([(sys.modules[__name__], name, value) for name, value in new.items()])
