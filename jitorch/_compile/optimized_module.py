"""`OptimizedModule`: what ``jitorch.compile(module)`` returns; it shares the module's parameters and state.

>>> import jitorch
>>> lin = jitorch.nn.Linear(3, 2)
>>> opt = jitorch.compile(lin)
>>> opt.weight is lin.weight, type(opt).__name__
(True, 'OptimizedModule')
"""
from __future__ import annotations

from ..nn.modules.module import Module

__all__ = ["OptimizedModule"]


class OptimizedModule(Module):
    """A module wrapper whose ``forward`` is compiled; it shares the original's parameters, buffers and submodules
    (the same dicts), so ``state_dict()`` keys are unchanged.
    """

    def __init__(self, mod, compiled):
        super().__init__()
        object.__setattr__(self, "_orig_mod", mod)
        object.__setattr__(self, "_compiled_call", compiled)
        for registry in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"):
            self.__dict__[registry] = mod.__dict__[registry]
        self.training = mod.training

    def forward(self, *args, **kwargs):
        return self._compiled_call(*args, **kwargs)

    def train(self, mode=True):
        self._orig_mod.train(mode)
        self.training = mode
        return self

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_orig_mod"], name)

    def __repr__(self):
        return f"OptimizedModule({self._orig_mod!r})"
