"""``Module.__call__`` and the registration of forward/backward hooks, bound onto ``Module`` in module.py.

Order of a call: global then module forward pre-hooks (which may replace the arguments), ``forward``, global then
module forward hooks (which may replace the output); full backward hooks are set up around inputs and outputs.

>>> import jitorch
>>> from jitorch import nn
>>> m = nn.Sequential()
>>> handle = m.register_forward_hook(lambda mod, args, out: out * 10)
>>> m(jitorch.tensor(1.0))
tensor(10.)
"""
from __future__ import annotations

import warnings

from ..._tensor import Tensor
from . import _hooks
from ._hooks import BackwardHook, RemovableHandle, _WrappedHook

__all__ = ["_call_impl", "_wrapped_call_impl", "compile_"]


def _get_backward_hooks(self):
    """(full backward hooks, legacy non-full backward hooks), global ones first."""
    full, non_full = [], []
    if _hooks._global_is_full_backward_hook is True:
        full += _hooks._global_backward_hooks.values()
    elif _hooks._global_is_full_backward_hook is False:
        non_full += _hooks._global_backward_hooks.values()
    if self._is_full_backward_hook is True:
        full += self._backward_hooks.values()
    elif self._is_full_backward_hook is False:
        non_full += self._backward_hooks.values()
    return full, non_full


def _get_backward_pre_hooks(self):
    return list(_hooks._global_backward_pre_hooks.values()) + list(self._backward_pre_hooks.values())


def _run_pre_hooks(self, args, kwargs):
    for hook_id, hook in (*_hooks._global_forward_pre_hooks.items(), *self._forward_pre_hooks.items()):
        if hook_id in self._forward_pre_hooks_with_kwargs:
            result = hook(self, args, kwargs)
            if result is not None:
                if isinstance(result, tuple) and len(result) == 2:
                    args, kwargs = result
                else:
                    raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, new_kwargs), but "
                                       f"got {result}.")
        else:
            result = hook(self, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    return args, kwargs


def _run_forward_hook(self, hook_id, hook, args, kwargs, result):
    if hook_id in self._forward_hooks_with_kwargs or hook_id in _hooks._global_forward_hooks_with_kwargs:
        return hook(self, args, kwargs, result)
    return hook(self, args, result)


def _first_tensor(value):
    while not isinstance(value, Tensor):
        value = next(v for v in value.values() if isinstance(v, Tensor)) if isinstance(value, dict) else value[0]
    return value


def _wrapped_call_impl(self, *args, **kwargs):
    """``module(...)``: the compiled call after ``module.compile()``, else ``_call_impl`` (inlined when no hook is
    set, so a plain call costs one Python frame)."""
    compiled = self._compiled_call_impl
    if compiled is not None:
        return compiled(*args, **kwargs)
    if not (self._backward_hooks or self._backward_pre_hooks or self._forward_hooks or self._forward_pre_hooks
            or _hooks.has_global_hooks()):
        return self.forward(*args, **kwargs)
    return _call_impl(self, *args, **kwargs)


def compile_(self, *args, **kwargs):
    """Compile this module's calls in place, as ``torch.compile`` would (``Module.compile``); returns None.

    ``_call_impl`` is what gets compiled, so hooks still run and ``self`` stays the module that callers hold.
    """
    from ..._compile.entry import compile as compile_fn  # the compiler imports nn: import it at call time

    self._compiled_call_impl = compile_fn(self._call_impl, *args, **kwargs)


def _call_impl(self, *args, **kwargs):
    """Run ``forward`` with the module's and the global hooks around it."""
    forward = self.forward
    if not (self._backward_hooks or self._backward_pre_hooks or self._forward_hooks or self._forward_pre_hooks
            or _hooks.has_global_hooks()):
        return forward(*args, **kwargs)
    result = None
    called = set()
    try:
        full_hooks, non_full_hooks = _get_backward_hooks(self)
        pre_backward = _get_backward_pre_hooks(self)
        args, kwargs = _run_pre_hooks(self, args, kwargs)
        bw_hook = None
        if full_hooks or pre_backward:
            bw_hook = BackwardHook(self, full_hooks, pre_backward)
            args = bw_hook.setup_input_hook(args)
        result = forward(*args, **kwargs)
        for hook_id, hook in (*_hooks._global_forward_hooks.items(), *self._forward_hooks.items()):
            if hook_id in self._forward_hooks_always_called or hook_id in _hooks._global_forward_hooks_always_called:
                called.add(hook_id)
            hook_result = _run_forward_hook(self, hook_id, hook, args, kwargs, result)
            if hook_result is not None:
                result = hook_result
        if bw_hook is not None:
            if not isinstance(result, (Tensor, tuple)):
                warnings.warn("For backward hooks to be called, module output should be a Tensor or a tuple of "
                              f"Tensors but received {type(result)}", stacklevel=2)
            result = bw_hook.setup_output_hook(result)
        if non_full_hooks:
            grad_fn = _first_tensor(result).grad_fn
            if grad_fn is not None:
                for hook in non_full_hooks:
                    grad_fn.register_hook(_WrappedHook(hook, self))
                _warn_non_full_backward_hook(args, result, grad_fn)
        return result
    except Exception:
        # ``always_call`` forward hooks still run when forward (or an earlier hook) raised.
        always = [(i, h) for i, h in _hooks._global_forward_hooks.items()
                  if i in _hooks._global_forward_hooks_always_called]
        always += [(i, h) for i, h in self._forward_hooks.items() if i in self._forward_hooks_always_called]
        for hook_id, hook in always:
            if hook_id in called:
                continue
            try:
                hook_result = _run_forward_hook(self, hook_id, hook, args, kwargs, result)
                if hook_result is not None:
                    result = hook_result
            except Exception as e:  # noqa: BLE001 - the original error is the one to surface
                warnings.warn("module forward hook with ``always_call=True`` raised an exception that was silenced as "
                              f"another error was raised in forward: {e}", stacklevel=2)
        raise


_NON_FULL = ("Using non-full backward hooks on a Module that does not {} is deprecated and will be removed in future "
             "versions. This hook will be missing some of the {}. Please use register_full_backward_hook to get the "
             "documented behavior.")


def _warn_non_full_backward_hook(inputs, result, grad_fn):
    """torch's FutureWarnings for a legacy ``register_backward_hook`` whose node cannot see the whole module (the
    hook then gets only part of grad_input or grad_output)."""
    def tensors(value):
        if isinstance(value, Tensor):
            return (value,)
        return value if isinstance(value, tuple) and all(isinstance(v, Tensor) for v in value) else None

    result, inputs = tensors(result), tensors(inputs)
    if result is None:
        message = _NON_FULL.format("return a single Tensor or a tuple of Tensors", "grad_output")
    elif inputs is None:
        message = _NON_FULL.format("take as input a single Tensor or a tuple of Tensors", "grad_input")
    else:
        out_fns = {r.grad_fn for r in result if r.grad_fn is not None}
        if not out_fns or (len(out_fns) == 1 and grad_fn not in out_fns):
            message = ("Using a non-full backward hook when outputs are nested in python data structure is deprecated "
                       "and will be removed in future versions. This hook will be missing some grad_output.")
        elif len(out_fns) > 1:
            message = ("Using a non-full backward hook when outputs are generated by different autograd Nodes is "
                       "deprecated and will be removed in future versions. This hook will be missing some "
                       "grad_output. Please use register_full_backward_hook to get the documented behavior.")
        elif {i.grad_fn for i in inputs if i.grad_fn is not None} != {n[0] for n in grad_fn.next_functions}:
            message = ("Using a non-full backward hook when the forward contains multiple autograd Nodes is "
                       "deprecated and will be removed in future versions. This hook will be missing some "
                       "grad_input. Please use register_full_backward_hook to get the documented behavior.")
        else:
            return
    warnings.warn(message, FutureWarning, stacklevel=4)


# -- registration ---------------------------------------------------------------------------------------------------
def _add(registry, hook, prepend, extra_dict=None):
    handle = RemovableHandle(registry, extra_dict=extra_dict)
    registry[handle.id] = hook
    if prepend:
        registry.move_to_end(handle.id, last=False)
    return handle


def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
    """``hook(module, args) -> None or new args`` (``with_kwargs``: ``hook(module, args, kwargs) -> None or
    (args, kwargs)``) runs before ``forward``; a single returned value is wrapped into a tuple."""
    handle = _add(self._forward_pre_hooks, hook, prepend, extra_dict=self._forward_pre_hooks_with_kwargs)
    if with_kwargs:
        self._forward_pre_hooks_with_kwargs[handle.id] = True
    return handle


def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
    """``hook(module, args, output) -> None or new output`` (``with_kwargs``: ``hook(module, args, kwargs,
    output)``) runs after ``forward``; ``always_call`` runs it even when forward raised."""
    handle = _add(self._forward_hooks, hook, prepend,
                  extra_dict=[self._forward_hooks_with_kwargs, self._forward_hooks_always_called])
    if with_kwargs:
        self._forward_hooks_with_kwargs[handle.id] = True
    if always_call:
        self._forward_hooks_always_called[handle.id] = True
    return handle


def register_full_backward_pre_hook(self, hook, prepend=False):
    """``hook(module, grad_output) -> None or new grad_output`` runs when the outputs' gradients are known."""
    return _add(self._backward_pre_hooks, hook, prepend)


def register_full_backward_hook(self, hook, prepend=False):
    """``hook(module, grad_input, grad_output) -> None or new grad_input`` runs when the gradients with respect
    to the module's positional tensor inputs are computed (or, if none requires grad, those of the outputs)."""
    if self._is_full_backward_hook is False:
        raise RuntimeError("Cannot use both regular backward hooks and full backward hooks on a single Module. Please "
                           "use only one of them.")
    self._is_full_backward_hook = True
    return _add(self._backward_hooks, hook, prepend)


def register_backward_hook(self, hook):
    """Deprecated: ``hook(module, grad_input, grad_output)`` on the node of the output's last op."""
    if self._is_full_backward_hook is True:
        raise RuntimeError("Cannot use both regular backward hooks and full backward hooks on a single Module. Please "
                           "use only one of them.")
    self._is_full_backward_hook = False
    return _add(self._backward_hooks, hook, False)
