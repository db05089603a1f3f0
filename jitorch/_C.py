"""``torch._C``: the few names of PyTorch's C extension that Python code (subclasses of Tensor, libraries) reaches for.

>>> import jitorch
>>> with jitorch._C.DisableTorchFunctionSubclass():
...     jitorch._C._is_torch_function_enabled()
False
"""
from __future__ import annotations

from ._subclass import (DisableTorchFunction, DisableTorchFunctionSubclass, disabled_torch_function_impl,
                        is_torch_function_enabled, is_torch_function_mode_enabled)

__all__ = ["DisableTorchFunction", "DisableTorchFunctionSubclass"]

_disabled_torch_function_impl = disabled_torch_function_impl
_is_torch_function_enabled = is_torch_function_enabled
_is_torch_function_mode_enabled = is_torch_function_mode_enabled


def _get_tracing_state():
    """None: no TorchScript tracer runs (code checks it before tracing-only work)."""
    return None


def _log_api_usage_once(event: str) -> None:
    """PyTorch's usage logging: nothing to log here."""
