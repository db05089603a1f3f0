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

    @property
    def training(self):
        """The original module's flag: ``model.eval()`` on either one is seen by both, as with torch.compile."""
        mod = self.__dict__.get("_orig_mod")
        return True if mod is None else mod.training

    @training.setter
    def training(self, mode):
        mod = self.__dict__.get("_orig_mod")  # None while Module.__init__ sets its default
        if mod is not None:
            mod.training = mode

    def forward(self, *args, **kwargs):
        return self._compiled_call(*args, **kwargs)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Also takes a checkpoint saved from a model compiled by torch.compile, whose keys start with
        ``_orig_mod.`` (jitorch's own keys are the original module's)."""
        prefix = "_orig_mod."
        if state_dict and all(k.startswith(prefix) for k in state_dict):
            state_dict = type(state_dict)((k[len(prefix):], v) for k, v in state_dict.items())
        return self._orig_mod.load_state_dict(state_dict, strict=strict, assign=assign)

    def train(self, mode=True):
        self._orig_mod.train(mode)
        return self

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_orig_mod"], name)

    def __repr__(self):
        return f"OptimizedModule({self._orig_mod!r})"
