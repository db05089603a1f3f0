"""Module hook plumbing: removable handles, global hook registries and full backward hooks.

A full backward hook wraps a module's tensor inputs and outputs in an identity autograd function; the hook on the
outputs' node records ``grad_output`` and the hook on the inputs' node calls the user's hooks with ``grad_input``.

>>> import jitorch
>>> from jitorch.nn.modules._hooks import RemovableHandle
>>> from collections import OrderedDict
>>> hooks = OrderedDict()
>>> handle = RemovableHandle(hooks)
>>> hooks[handle.id] = print
>>> handle.remove(); len(hooks)
0
"""
from __future__ import annotations

import functools
import warnings
import weakref
from collections import OrderedDict

from ..._tensor import Tensor
from ...autograd.function import Function
from ...autograd.grad_mode import GradState

__all__ = ["RemovableHandle", "BackwardHook", "register_module_forward_pre_hook", "register_module_forward_hook",
           "register_module_full_backward_pre_hook", "register_module_full_backward_hook",
           "register_module_buffer_registration_hook", "register_module_module_registration_hook",
           "register_module_parameter_registration_hook"]


def _ref(d):
    # Handles must not keep a dead module's hook dicts alive; a plain dict (not weak-referenceable) is held strongly.
    try:
        return weakref.ref(d)
    except TypeError:
        return lambda: d


class RemovableHandle:
    """A handle that removes a hook from the dict(s) it was registered in (``torch.utils.hooks.RemovableHandle``)."""

    __module__ = "jitorch.utils.hooks"  # where torch's lives and where users import it from

    next_id = 0

    def __init__(self, hooks_dict, *, extra_dict=None):
        self.hooks_dict_ref = _ref(hooks_dict)
        self.id = RemovableHandle.next_id
        RemovableHandle.next_id += 1
        extras = [] if extra_dict is None else extra_dict if isinstance(extra_dict, list) else [extra_dict]
        self.extra_dict_ref = tuple(_ref(d) for d in extras)

    def remove(self):
        for ref in (self.hooks_dict_ref,) + self.extra_dict_ref:
            d = ref()
            if d is not None and self.id in d:
                del d[self.id]

    def __getstate__(self):
        return (self.hooks_dict_ref(), self.id, tuple(ref() for ref in self.extra_dict_ref))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()

    def __setstate__(self, state):
        self.hooks_dict_ref = _ref(OrderedDict() if state[0] is None else state[0])
        self.id = state[1]
        RemovableHandle.next_id = max(RemovableHandle.next_id, self.id + 1)
        self.extra_dict_ref = tuple(_ref(d) for d in state[2] if d is not None)


class _WrappedHook:
    """A hook that receives its module (held weakly) as first argument."""

    def __init__(self, hook, module=None):
        self.hook = hook
        functools.update_wrapper(self, hook)
        self.with_module = module is not None
        if module is not None:
            self.module = weakref.ref(module)

    def __call__(self, *args, **kwargs):
        if self.with_module:
            module = self.module()
            if module is None:
                raise RuntimeError("You are trying to call the hook of a dead Module!")
            return self.hook(module, *args, **kwargs)
        return self.hook(*args, **kwargs)

    def __getstate__(self):
        state = {"hook": self.hook, "with_module": self.with_module}
        if self.with_module:
            state["module"] = self.module()
        return state

    def __setstate__(self, state):
        self.hook = state["hook"]
        self.with_module = state["with_module"]
        if self.with_module:
            if state["module"] is None:
                raise RuntimeError("You are trying to revive the hook of a dead Module!")
            self.module = weakref.ref(state["module"])


# -- global hooks (every module's call runs them before its own) ------------------------------------------------------
_global_buffer_registration_hooks: dict = OrderedDict()
_global_module_registration_hooks: dict = OrderedDict()
_global_parameter_registration_hooks: dict = OrderedDict()
_global_backward_pre_hooks: dict = OrderedDict()
_global_backward_hooks: dict = OrderedDict()
_global_forward_pre_hooks: dict = OrderedDict()
_global_forward_hooks: dict = OrderedDict()
_global_forward_hooks_always_called: dict = OrderedDict()
_global_forward_hooks_with_kwargs: dict = OrderedDict()


def _register(registry, hook, **extras):
    handle = RemovableHandle(registry, extra_dict=list(extras.values()) or None)
    registry[handle.id] = hook
    return handle


def register_module_buffer_registration_hook(hook):
    """``hook(module, name, buffer) -> None or new buffer`` runs whenever any module registers a buffer."""
    return _register(_global_buffer_registration_hooks, hook)


def register_module_module_registration_hook(hook):
    """``hook(module, name, submodule) -> None or new submodule`` runs whenever any module registers a submodule."""
    return _register(_global_module_registration_hooks, hook)


def register_module_parameter_registration_hook(hook):
    """``hook(module, name, param) -> None or new param`` runs whenever any module registers a parameter."""
    return _register(_global_parameter_registration_hooks, hook)


def register_module_forward_pre_hook(hook):
    """``hook(module, args) -> None or new args`` runs before every module's ``forward``."""
    return _register(_global_forward_pre_hooks, hook)


def register_module_forward_hook(hook, *, with_kwargs=False, always_call=False):
    """``hook(module, args, output) -> None or new output`` runs after every module's ``forward``."""
    handle = _register(_global_forward_hooks, hook, kwargs=_global_forward_hooks_with_kwargs,
                       always=_global_forward_hooks_always_called)
    if with_kwargs:
        _global_forward_hooks_with_kwargs[handle.id] = True
    if always_call:
        _global_forward_hooks_always_called[handle.id] = True
    return handle


def register_module_full_backward_pre_hook(hook):
    """``hook(module, grad_output) -> None or new grad_output`` runs for every module with full backward hooks."""
    return _register(_global_backward_pre_hooks, hook)


# None until the first global backward hook: then whether they are full (True) or legacy (False), for good.
_global_is_full_backward_hook = None
_MIXED_GLOBAL = ("Cannot use both regular backward hooks and full backward hooks as a global Module hook. Please use "
                 "only one of them.")


def register_module_full_backward_hook(hook):
    """``hook(module, grad_input, grad_output) -> None or new grad_input`` for every module's backward."""
    global _global_is_full_backward_hook
    if _global_is_full_backward_hook is False:
        raise RuntimeError(_MIXED_GLOBAL)
    _global_is_full_backward_hook = True
    return _register(_global_backward_hooks, hook)


def register_module_backward_hook(hook):
    """Deprecated: ``hook(module, grad_input, grad_output)`` on the node of every module output's last op.

    >>> import jitorch
    >>> handle = register_module_backward_hook(lambda m, gi, go: None)
    >>> handle.remove()
    """
    global _global_is_full_backward_hook
    if _global_is_full_backward_hook is True:
        raise RuntimeError(_MIXED_GLOBAL)
    _global_is_full_backward_hook = False
    return _register(_global_backward_hooks, hook)


def has_global_hooks():
    return bool(_global_backward_pre_hooks or _global_backward_hooks or _global_forward_hooks
                or _global_forward_pre_hooks)


# -- full backward hooks ------------------------------------------------------------------------------------------
class BackwardHookFunction(Function):
    """Identity on tensors whose node is where a module's backward hooks attach."""

    @staticmethod
    def forward(ctx, *args):
        ctx.mark_non_differentiable(*[a for a in args if isinstance(a, Tensor) and not a.requires_grad])
        return args

    @staticmethod
    def backward(ctx, *grads):
        return grads


class BackwardHook:
    """Runs a module's full backward (pre-)hooks from the identity nodes put around its inputs and outputs."""

    def __init__(self, module, user_hooks, user_pre_hooks):
        self.module = module
        self.user_hooks = user_hooks
        self.user_pre_hooks = user_pre_hooks
        self.grad_outputs = None
        self.n_outputs = -1
        self.output_tensors_index = None
        self.n_inputs = -1
        self.input_tensors_index = None

    @staticmethod
    def _pack_with_none(indices, values, size):
        res = [None] * size
        for idx, val in zip(indices, values):
            res[idx] = val
        return tuple(res)

    @staticmethod
    def _unpack_none(indices, values):
        return tuple(values[idx] for idx in indices)

    def _input_node_hook(self, grad_input, _grad_output):
        if self.grad_outputs is None:
            # The outputs' node did not run (none of them got a gradient): there is nothing to report.
            return None
        res = self._pack_with_none(self.input_tensors_index, grad_input, self.n_inputs)
        for hook in self.user_hooks:
            out = hook(self.module, res, self.grad_outputs)
            if out is None:
                continue
            if len(out) != len(res):
                raise RuntimeError(f"Backward hook returned an invalid number of grad_input, got {len(out)}, but "
                                   f"expected {len(res)}")
            res = out
        self.grad_outputs = None
        return self._unpack_none(self.input_tensors_index, res)

    def _output_node_prehook(self, grad_output):
        self.grad_outputs = self._pack_with_none(self.output_tensors_index, grad_output, self.n_outputs)
        local = None
        if self.user_pre_hooks:
            for pre_hook in self.user_pre_hooks:
                new = pre_hook(self.module, self.grad_outputs)
                if new is None:
                    continue
                if len(new) != len(self.grad_outputs):
                    raise RuntimeError(f"Backward pre hook returned an invalid number of grad_output, got {len(new)}, "
                                       f"but expected {len(self.grad_outputs)}")
                self.grad_outputs = tuple(new)
            local = self.grad_outputs
        if self.input_tensors_index is None:
            # No input requires grad: the hooks fire here, with no gradient for any input.
            if self.user_hooks:
                warnings.warn("Full backward hook is firing when gradients are computed with respect to module "
                              "outputs since no inputs require gradients. See https://docs.pytorch.org/docs/main/"
                              "generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook for more "
                              "details.", stacklevel=5)
            grad_inputs = self._pack_with_none([], [], self.n_inputs)
            for hook in self.user_hooks:
                res = hook(self.module, grad_inputs, self.grad_outputs)
                if res is not None and not (isinstance(res, tuple) and all(r is None for r in res)):
                    raise RuntimeError("Backward hook for Modules where no input requires gradient should always "
                                       "return None or None for all gradients.")
            self.grad_outputs = None
        if local is not None:
            return tuple(local[i] for i in self.output_tensors_index)
        return None

    def _apply_on_tensors(self, attach, args):
        idx = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        tensors = [args[i] for i in idx]
        if not (GradState.enabled and any(t.requires_grad for t in tensors)):
            return args, None
        new = BackwardHookFunction.apply(*tensors)
        node = next((t.grad_fn for t in new if t.grad_fn is not None), None)
        if node is None:
            raise RuntimeError("Error while setting up backward hooks: no output of the hook function has a grad_fn.")
        attach(node)
        out = list(args)
        for i, t in zip(idx, new):
            out[i] = t
        return tuple(out), idx

    def setup_input_hook(self, args):
        def hook(grad_input, grad_output):  # named as torch's: the engine's errors quote the hook's name
            return self._input_node_hook(grad_input, grad_output)

        res, idx = self._apply_on_tensors(lambda node: node.register_hook(hook), args)
        self.n_inputs = len(args)
        self.input_tensors_index = idx
        return res

    def setup_output_hook(self, result):
        single = not isinstance(result, tuple)
        args = (result,) if single else result
        def hook(grad_output):  # named as torch's: the engine's errors quote the hook's name
            return self._output_node_prehook(grad_output)

        res, idx = self._apply_on_tensors(lambda node: node.register_prehook(hook), args)
        self.n_outputs = len(args)
        self.output_tensors_index = idx
        return res[0] if single else res
