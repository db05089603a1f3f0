"""``jitorch.backends.cudnn``: cuDNN switches. jitorch does not use cuDNN, so ``is_available()`` is False and
``version()`` None (as in CPU-only torch); ``enabled``/``benchmark``/``deterministic``/``allow_tf32``/
``fp32_precision``/``depthwise_kernel`` are plain settable flags with torch's defaults, and ``flags(...)`` sets them
for a block.

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
depthwise_kernel = "auto"

_PRECISIONS = ("none", "ieee", "tf32")  # what torch 2.13 accepts for the "cuda" backend's fp32 precision
_DEPTHWISE_KERNELS = ("auto", "cudnn", "native")


def is_available() -> bool:
    return False


def version():
    return None


def is_acceptable(tensor) -> bool:
    return False


def flags(enabled=False, benchmark=False, benchmark_limit=10, deterministic=False, allow_tf32=True,
          fp32_precision="none", depthwise_kernel="auto"):
    """Set the flags for a block, restoring the previous values after (torch's defaults for omitted ones; None leaves
    a flag as it is, as torch's ``set_flags``). Unknown ``fp32_precision``/``depthwise_kernel`` values raise torch's
    RuntimeError before anything is set.

    >>> import jitorch.backends.cudnn as cudnn
    >>> with cudnn.flags(fp32_precision="tf32", depthwise_kernel="native"):
    ...     cudnn.fp32_precision, cudnn.depthwise_kernel
    ('tf32', 'native')
    """
    if fp32_precision is not None:
        if not isinstance(fp32_precision, str):
            raise TypeError(f"cudnn.flags: fp32_precision must be one of {_PRECISIONS}, got "
                            f"{type(fp32_precision).__name__}")
        if fp32_precision == "bf16":  # a precision torch knows, for other backends
            raise RuntimeError("backend 'cuda' does not support precision 'bf16'")
        if fp32_precision not in _PRECISIONS:
            raise RuntimeError(f"Unknown precision: {fp32_precision}")
    if depthwise_kernel is not None:
        if not isinstance(depthwise_kernel, str):
            raise RuntimeError("set_cudnn_depthwise_kernel expects a string, but got "
                               f"{type(depthwise_kernel).__name__}")
        if depthwise_kernel not in _DEPTHWISE_KERNELS:
            raise RuntimeError(f"Unknown cuDNN depthwise kernel mode: {depthwise_kernel}. Expected one of: "
                               f"{', '.join(_DEPTHWISE_KERNELS)}")
    new = {"enabled": enabled, "benchmark": benchmark, "benchmark_limit": benchmark_limit,
           "deterministic": deterministic, "allow_tf32": allow_tf32, "fp32_precision": fp32_precision,
           "depthwise_kernel": depthwise_kernel}
    return AttrPatch([(sys.modules[__name__], name, value) for name, value in new.items() if value is not None])
