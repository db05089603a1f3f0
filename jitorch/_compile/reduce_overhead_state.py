"""What a reduce-overhead capture bakes in besides its arguments: the state of the modules and optimizers the step
reaches.

A replay runs the captured steps on the captured tensors. torch.compile would see a changed module or optimizer on
the next call (it guards what the code reads), so a capture must too, for the modules and optimizers the function
reaches by name (a global ``model``, a closure's ``opt``) as for a compiled module: ``model.eval()``, a plain
attribute (``self.temperature``, BatchNorm's ``momentum``), a parameter's ``requires_grad`` (a layer unfrozen), a
parameter or buffer replaced by another tensor (``bn.running_mean = t``), and an optimizer's state tensors replaced
(``state[p]["momentum_buffer"] = ...``) capture again. (Which tensor each ``.grad`` is, the graph itself checks:
`jitorch.cpu.graphs`.)

>>> import jitorch
>>> model = jitorch.nn.Linear(2, 2)
>>> state = CaptureState(lambda x: model(x), None)
>>> before = state.values(); _ = model.eval()
>>> state.changed(before)
'training: expected (True,), got (False,)'
"""
from __future__ import annotations

import operator

from .._tensor import Tensor
from ..optim.optimizer import Optimizer
from .._tensor_autograd import REQUIRES_GRAD_VERSION
from ..nn.modules._registration import STATE_VERSION
from .guards import _plain_attributes, _Same, first_failure, module_tree
from .reached import NamedObjects, _entries, reached_by

__all__ = ["CaptureState"]


class CaptureState:
    """The modules and optimizers ``fn`` reaches (and ``module``, a compiled module), read again on every call."""

    def __init__(self, fn, module):
        self.module = module
        self.named = NamedObjects(fn) if module is None else None
        self._stamp, self._modules = None, []
        self._walked = None  # (the named objects and their containers' entries, what they reach)

    def _reached(self):
        if self.named is None:
            return [self.module], []
        objects = self.named.read()
        # The same objects, and the same entries in the small containers among them (which `reached_by` counts as
        # named), reach the same modules: compared by identity, not walked again.
        flat = []
        for o in objects:
            flat.append(o)
            entries = _entries(o)
            if entries is not None:
                flat += entries
        walked = self._walked
        if walked is not None and len(flat) == len(walked[0]) and all(map(operator.is_, flat, walked[0])):
            return walked[1]
        modules, _ = reached_by(None, objects)
        reached = modules, [o for o in objects if isinstance(o, Optimizer)]
        self._walked = (flat, reached)
        return reached

    def values(self):
        """``[(label, value)]``: equal lists mean a capture still applies."""
        modules, optimizers = self._reached()
        # The module walk (~4 us a module) is redone only when some module or requires_grad flag changed since.
        stamp = (STATE_VERSION[0], REQUIRES_GRAD_VERSION[0], tuple(map(id, modules)))
        if stamp != self._stamp:
            self._stamp, self._modules = stamp, self._module_values(modules)
        out = list(self._modules)
        for o in optimizers:
            name = type(o).__name__
            # (ids: the optimizer holds these tensors, so an id is not reused while the capture compares it)
            out.append((f"{name} parameters", tuple([id(p) for g in o.param_groups for p in g["params"]])))
            out.append((f"{name} state tensors", tuple([(id(p), *[id(v) for v in s.values() if isinstance(v, Tensor)])
                                                        for p, s in o.state.items()])))
        return out

    def _module_values(self, modules):
        out = []
        for m in modules:
            mods, params, buffers = module_tree(m)
            out.append(("training", tuple(x.training for x in mods)))
            out.append(("module attributes", tuple(_plain_attributes(x) for x in mods)))
            # (`_Same` holds what it compares: an id alone could be reused by a replacement once the old is freed)
            out.append(("parameters", tuple((_Same(p), p._requires_grad) for p in params)))
            out.append(("buffers", tuple(map(_Same, buffers))))
        return out

    def changed(self, before):
        """The first value (`values`) that differs from ``before``, as a sentence, or None."""
        now = self.values()
        return None if now == before else first_failure(before, now)
