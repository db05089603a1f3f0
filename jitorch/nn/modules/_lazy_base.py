"""``LazyModuleMixin``: the shared machinery of lazily shaped layers (``LazyLinear``, ``LazyConv2d``, ...).

Apart from lazy.py so that linear.py (which conv.py imports) can use it. A lazy layer holds empty placeholder
tensors whose names are in ``_lazy_pending``; the first forward gives them shapes (``initialize_parameters``) and
turns the module into ``cls_to_become``. ``load_state_dict`` gives a placeholder the checkpoint's shape first, as
torch's ``_lazy_load_hook`` does, so a checkpoint of the shaped layer loads into a fresh lazy one.

>>> import jitorch
>>> lazy = jitorch.nn.LazyLinear(3)
>>> lazy.load_state_dict(jitorch.nn.Linear(2, 3).state_dict())
<All keys matched successfully>
>>> lazy.has_uninitialized_params(), tuple(lazy.weight.shape)
(False, (3, 2))
"""
from __future__ import annotations

from ... import _creation
from ...autograd.grad_mode import no_grad

__all__ = ["LazyModuleMixin"]


class LazyModuleMixin:
    """A module whose shapes come from its first input: ``initialize_parameters(*args)`` runs once, as a forward
    pre-hook, then the module becomes ``cls_to_become``."""

    cls_to_become = None

    def _register_lazy_hook(self):
        # Placeholders are the empty tensors at construction: the shaped ones (num_batches_tracked) never change.
        self._lazy_pending = {name for name, t in (*self._parameters.items(), *self._buffers.items())
                              if t is not None and t.numel() == 0}
        self._initialize_hook = self.register_forward_pre_hook(LazyModuleMixin._infer_parameters)
        self._load_hook = self._register_load_state_dict_pre_hook(LazyModuleMixin._lazy_load_hook, with_module=True)

    def has_uninitialized_params(self):
        """Whether some parameter or buffer is still an unshaped placeholder."""
        return bool(self.__dict__.get("_lazy_pending"))

    def _lazy_load_hook(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                        error_msgs):
        pending = self.__dict__.get("_lazy_pending", ())
        for name in list(pending):
            value = state_dict.get(prefix + name)
            tensor = self._parameters.get(name, self._buffers.get(name))
            # An unshaped checkpoint entry (saved from a lazy layer before its first call) leaves it pending.
            if value is None or tensor is None or not hasattr(value, "shape") or value.numel() == 0:
                continue
            with no_grad():
                tensor.data = _creation.empty(value.shape, dtype=tensor.dtype, device=tensor.device)
            pending.discard(name)

    @staticmethod
    def _infer_parameters(module, args):
        module.initialize_parameters(*args)
        if module.has_uninitialized_params():
            raise RuntimeError(f"module {module._get_name()} has not been fully initialized")
        module._initialize_hook.remove()
        module._load_hook.remove()
        for name in ("_initialize_hook", "_load_hook", "_lazy_pending"):
            delattr(module, name)
        if module.cls_to_become is not None:
            module.__class__ = module.cls_to_become
