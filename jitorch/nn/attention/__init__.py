"""``torch.nn.attention``: choosing the kernel behind ``scaled_dot_product_attention``.

``sdpa_kernel(backends)`` enables exactly the given backends for a block (the ``torch.backends.cuda`` switches, as
PyTorch sets them). jitorch computes attention one way on each device; the switches decide, as in PyTorch on the CPU,
whether a call may run at all: the CPU has the math and flash kernels, so a block that allows only the efficient
or cuDNN kernels raises PyTorch's "No viable backend" error.

>>> import jitorch
>>> from jitorch.nn.attention import SDPBackend, sdpa_kernel
>>> q = jitorch.ones(1, 2, 3, 4)
>>> with sdpa_kernel([SDPBackend.MATH]):
...     jitorch.nn.functional.scaled_dot_product_attention(q, q, q).shape
jitorch.Size([1, 2, 3, 4])
"""
from __future__ import annotations

import contextlib
import enum

from ...backends import cuda as _cuda

__all__ = ["SDPBackend", "sdpa_kernel", "WARN_FOR_UNFUSED_KERNELS", "can_use_flash_attention",
           "can_use_efficient_attention"]

WARN_FOR_UNFUSED_KERNELS = False


class SDPBackend(enum.IntEnum):
    """The scaled-dot-product-attention kernels, with PyTorch's values."""

    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


@contextlib.contextmanager
def sdpa_kernel(backends, set_priority=False):
    """Allow only ``backends`` (one `SDPBackend` or a list) inside the block; the previous switches come back after."""
    chosen = [backends] if isinstance(backends, SDPBackend) else backends
    if not isinstance(chosen, (list, tuple, set)) or not all(isinstance(b, SDPBackend) for b in chosen):
        raise AssertionError("Backend must be an instance of SDPBackend or a list of SDPBackend instances, got "
                             f"{type(backends).__name__}")
    with _cuda.sdp_kernel(enable_flash=SDPBackend.FLASH_ATTENTION in chosen, enable_math=SDPBackend.MATH in chosen,
                          enable_mem_efficient=SDPBackend.EFFICIENT_ATTENTION in chosen,
                          enable_cudnn=SDPBackend.CUDNN_ATTENTION in chosen):
        yield {}


def can_use_flash_attention(params, debug=False):
    """False: jitorch has no fused flash-attention kernel of its own (the CPU path computes the same values)."""
    return False


def can_use_efficient_attention(params, debug=False):
    """False: jitorch has no memory-efficient attention kernel."""
    return False


def check_backends_allow(device_type):
    """Raise PyTorch's error when the switches leave no kernel for ``device_type`` (the CPU has math and flash)."""
    usable = ("math", "flash") if device_type == "cpu" else ("math", "flash", "mem_efficient", "cudnn")
    if not any(_cuda._sdp[s] for s in usable):
        raise RuntimeError("No viable backend for scaled_dot_product_attention was found. This is likely due to "
                           "turning off both the math kernel and the fused kernels.")
