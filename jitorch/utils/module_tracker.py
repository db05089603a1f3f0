"""``torch.utils.module_tracker.ModuleTracker``: which modules are running now, forward or backward, by their
qualified names (what ``FlopCounterMode`` attributes each op to).

Global forward hooks add a module's name on entry and remove it on exit; in the backward, a multi-grad hook on a
module's outputs adds it back and one on its inputs removes it again, and the end of the backward resets the set.

>>> import jitorch
>>> seen = []
>>> model = jitorch.nn.Sequential(jitorch.nn.Linear(2, 2))
>>> with ModuleTracker() as tracker:
...     _ = model[0].register_forward_pre_hook(lambda *a: seen.append(sorted(tracker.parents)))
...     _ = model(jitorch.ones(1, 2))
>>> seen
[['Global', 'Sequential', 'Sequential.0']]
"""
from __future__ import annotations

import logging
import weakref

from .. import autograd
from .._tensor import Tensor
from ..autograd.graph_task import current_graph_task_id, register_multi_grad_hook
from ..nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from ._pytree import tree_flatten

logger = logging.getLogger(__name__)

__all__ = ["ModuleTracker"]


class ModuleTracker:
    """A context manager keeping ``parents``, the names of the modules running now (always with ``"Global"``):
    the root module is named by its class, a submodule by its path below it (``"Net.block.fc"``). ``is_bw`` says
    whether a backward is running."""

    def __init__(self) -> None:
        self.parents = {"Global"}
        self._known_modules: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._seen_modules: weakref.WeakSet = weakref.WeakSet()
        self._has_callback = False
        self._hooks: list = []

    def _maybe_set_engine_callback(self) -> None:
        if self._has_callback:
            return

        def callback() -> None:
            self.parents = {"Global"}
            self._has_callback = False

        autograd.Variable._execution_engine.queue_callback(callback)
        self._has_callback = True

    @property
    def is_bw(self):
        """Whether this is running during a backward."""
        return current_graph_task_id() != -1

    def _get_mod_name(self, mod):
        if mod not in self._known_modules:
            self._known_modules[mod] = type(mod).__name__
        mod_name = self._known_modules[mod]
        if mod not in self._seen_modules:
            for name, submod in mod.named_children():
                self._known_modules[submod] = f"{mod_name}.{name}"
                self._get_mod_name(submod)
            self._seen_modules.add(mod)
        return mod_name

    def _get_append_fn(self, name, is_bw):
        def fn(*args) -> None:
            if is_bw:
                self._maybe_set_engine_callback()
            if name in self.parents:
                logger.info("The module hierarchy tracking seems to be broken as this Module was already entered. "
                            "%s during %s", name, "backward" if is_bw else "forward")
            self.parents.add(name)

        return fn

    def _get_pop_fn(self, name, is_bw):
        def fn(*args) -> None:
            if name in self.parents:
                self.parents.remove(name)
            else:
                logger.info("The Module hierarchy tracking is confused as we're exiting a Module that was never "
                            "entered. %s during %s", name, "backward" if is_bw else "forward")

        return fn

    def _grad_tensors(self, value):
        return [a for a in tree_flatten(value)[0] if isinstance(a, Tensor) and a.requires_grad]

    def _fw_pre_hook(self, mod, input) -> None:
        name = self._get_mod_name(mod)
        self._get_append_fn(name, False)()
        tensors = self._grad_tensors(input)
        if tensors:  # the backward leaves the module when its inputs' gradients are done
            self._hooks.append(register_multi_grad_hook(tensors, self._get_pop_fn(name, True)))

    def _fw_post_hook(self, mod, input, output) -> None:
        name = self._get_mod_name(mod)
        self._get_pop_fn(name, False)()
        tensors = self._grad_tensors(output)
        if tensors:  # ... and enters it when its outputs' gradients are
            self._hooks.append(register_multi_grad_hook(tensors, self._get_append_fn(name, True)))

    def __enter__(self):
        self._fw_pre_handle = register_module_forward_pre_hook(self._fw_pre_hook)
        self._fw_post_handle = register_module_forward_hook(self._fw_post_hook)
        return self

    def __exit__(self, *args):
        self._fw_pre_handle.remove()
        self._fw_post_handle.remove()
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
