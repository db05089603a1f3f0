"""``jitorch.nn.modules``: ``Module``, the containers and (as they are built) the layers, one file per family.

>>> from jitorch.nn.modules import Module, Sequential
>>> Sequential(Module())
Sequential(
  (0): Module()
)
"""
from .module import Module
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential

__all__ = ["Module", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]
