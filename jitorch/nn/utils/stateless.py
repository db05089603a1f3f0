"""``functional_call``: run a module with some of its parameters and buffers replaced for one call
(``torch.nn.utils.stateless`` / ``torch.func.functional_call``), the module left as it was afterwards.

>>> import jitorch
>>> from jitorch import nn
>>> from jitorch.func import functional_call
>>> lin = nn.Linear(2, 1, bias=False)
>>> functional_call(lin, {"weight": jitorch.tensor([[1.0, 2.0]])}, (jitorch.tensor([3.0, 4.0]),))
tensor([11.])
>>> lin.weight.shape  # untouched
jitorch.Size([1, 2])
"""
from __future__ import annotations

import contextlib
import warnings

__all__ = ["functional_call", "call_with"]

_MISSING = object()


def _owner(module, name):
    *path, leaf = name.split(".")
    for part in path:
        module = getattr(module, part)
    return module, leaf


def _swap(module, name, value):
    """Put ``value`` at ``name`` (a parameter, buffer or plain attribute); return what was there."""
    owner, leaf = _owner(module, name)
    for registry in (owner._parameters, owner._buffers):
        if leaf in registry:
            old, registry[leaf] = registry[leaf], value
            return old
    old = owner.__dict__.get(leaf, _MISSING)
    object.__setattr__(owner, leaf, value)  # NOTE: no registration, as torch: an attribute only for the call
    return old


def _restore(module, name, old):
    owner, leaf = _owner(module, name)
    for registry in (owner._parameters, owner._buffers):
        if leaf in registry:
            registry[leaf] = old
            return
    if old is _MISSING:
        owner.__dict__.pop(leaf, None)
    else:
        object.__setattr__(owner, leaf, old)


def _tied_names(module, values):
    """``values`` extended to every other name of a tensor it replaces (weights shared by several modules)."""
    by_tensor = {}
    for name, t in (*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)):
        by_tensor.setdefault(id(t), []).append(name)
    out = dict(values)
    for names in by_tensor.values():
        given = [n for n in names if n in values]
        if len(names) < 2 or not given:
            continue
        if any(values[n] is not values[given[0]] for n in given[1:]):
            raise ValueError(f"functional_call got multiple values for keys {given}, which are tied. Consider using "
                             "tie_weights=False")
        for n in names:
            out.setdefault(n, values[given[0]])
    return out


@contextlib.contextmanager
def _reparametrize_module(module, values, tie_weights=False, strict=False):
    if tie_weights:
        values = _tied_names(module, values)
    if strict:
        names = {n for n, _ in module.named_parameters(remove_duplicate=False)} | {
            n for n, _ in module.named_buffers(remove_duplicate=False)}
        missing, unexpected = sorted(names - set(values)), sorted(set(values) - names)
        errors = ([f"Unexpected key(s): {', '.join(map(repr, unexpected))}."] if unexpected else []) + (
            [f"Missing key(s): {', '.join(map(repr, missing))}."] if missing else [])
        if errors:
            raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}:\n\t" + "\n\t".join(errors))
    swapped = []
    try:
        for name, value in values.items():
            swapped.append((name, _swap(module, name, value)))
        yield
    finally:
        for name, old in reversed(swapped):
            _restore(module, name, old)


def _merged(parameters_and_buffers):
    if isinstance(parameters_and_buffers, dict):
        return parameters_and_buffers
    seen, out = {}, {}
    for d in parameters_and_buffers:
        for k, v in d.items():
            seen[k] = seen.get(k, 0) + 1
            out[k] = v
    repeated = [k for k, n in seen.items() if n > 1]
    if repeated:
        raise ValueError(f"{repeated} appeared in multiple dictionaries; behavior of functional call is ambiguous")
    return out


def functional_call(module, parameters_and_buffers, args=None, kwargs=None, *, tie_weights=True, strict=False):
    """``module(*args, **kwargs)`` with the named tensors of ``parameters_and_buffers`` in place of the module's own
    (deprecated by torch for ``torch.func.functional_call``, which is the same call)."""
    warnings.warn("`torch.nn.utils.stateless.functional_call` is deprecated as of PyTorch 2.0 and will be removed in "
                  "a future version of PyTorch. Please use `torch.func.functional_call` instead which is a drop-in "
                  "replacement.", FutureWarning, stacklevel=2)
    return call_with(module, parameters_and_buffers, args, kwargs, tie_weights=tie_weights, strict=strict)


def call_with(module, parameters_and_buffers, args=None, kwargs=None, *, tie_weights=True, strict=False):
    """``module(*args, **kwargs)`` with the named tensors of ``parameters_and_buffers`` (a dict, or a sequence of
    dicts) in place of the module's own; gradients flow to the given tensors. With ``tie_weights``, a value given
    for one name of a shared tensor serves all its names; ``strict`` requires exactly the module's names."""
    if kwargs is None:
        kwargs = {}
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    with _reparametrize_module(module, _merged(parameters_and_buffers), tie_weights=tie_weights, strict=strict):
        return module(*args, **kwargs)
