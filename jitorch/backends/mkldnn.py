"""``jitorch.backends.mkldnn``: oneDNN switches. jitorch does not use oneDNN, so ``is_available()`` is False; the
flags are settable with torch's defaults and ``flags(...)`` sets them for a block.

>>> import jitorch.backends
>>> with jitorch.backends.mkldnn.flags(enabled=False):
...     jitorch.backends.mkldnn.enabled
False
>>> jitorch.backends.mkldnn.enabled, jitorch.backends.mkldnn.is_available()
(True, False)
"""
from __future__ import annotations

import sys

from .._attr_patch import AttrPatch

enabled = True
deterministic = False
allow_tf32 = None  # torch 2.13 reads None here until set (fp32_precision replaced it)
fp32_precision = "none"


def is_available() -> bool:
    return False


def flags(enabled=False, deterministic=False, allow_tf32=True, fp32_precision="none"):
    """The flags set for a block and restored after (torch's defaults for the ones not given)."""
    new = {"enabled": enabled, "deterministic": deterministic, "allow_tf32": allow_tf32,
           "fp32_precision": fp32_precision}
    return AttrPatch([(sys.modules[__name__], name, value) for name, value in new.items() if value is not None])
