"""``jitorch.nn``: modules, parameters, initialization and utilities (PyTorch's ``torch.nn``).

>>> import jitorch
>>> from jitorch import nn
>>> net = nn.Sequential(nn.Module())
>>> p = nn.Parameter(jitorch.zeros(2, 3))
>>> nn.init.ones_(p).sum().item()
6.0
"""
from __future__ import annotations

import importlib

from . import parameter, modules, init, utils  # noqa: F401
from . import parallel  # noqa: F401,E402
from . import common_types, grad  # noqa: F401,E402
from .parameter import Buffer, Parameter, UninitializedBuffer, UninitializedParameter  # noqa: F401
from .parallel import DataParallel  # noqa: F401 - torch.nn.DataParallel
from .modules import *  # noqa: F401,F403
from .modules import __all__ as _modules_all

__all__ = ["Parameter", "Buffer", "UninitializedParameter", "UninitializedBuffer", "DataParallel", "init", "utils",
           "modules", "parameter"] + list(_modules_all)


def __getattr__(name):
    # ``nn.functional`` is imported on first use, so ``jitorch.nn`` imports without it and without an import cycle
    # (functional's helpers may import ``jitorch.nn``).
    if name == "functional":
        try:
            return importlib.import_module(".functional", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.functional":
                raise
    raise AttributeError(f"module 'jitorch.nn' has no attribute '{name}'")
