"""Arguments in one canonical form, from a target's Python signature: ``Node.normalized_arguments``.

As torch.fx's ``operator_schemas``: the call is bound to the signature and defaults are filled in; the first
``len(args)`` parameters stay positional unless ``normalize_to_only_use_kwargs``, the rest become keywords.
A signature with ``*args``/``**kwargs`` or positional-only parameters, or none at all (some builtins), gives None.

>>> import jitorch
>>> normalize_function(jitorch.nn.functional.leaky_relu, (1.0,), {}, normalize_to_only_use_kwargs=True)
ArgsKwargsPair(args=(), kwargs={'input': 1.0, 'negative_slope': 0.01, 'inplace': False})
"""
from __future__ import annotations

import inspect
from typing import Any, NamedTuple

__all__ = ["ArgsKwargsPair", "normalize_function", "normalize_module"]


class ArgsKwargsPair(NamedTuple):
    args: tuple
    kwargs: dict[str, Any]


def _normalized(sig, args, kwargs, normalize_to_only_use_kwargs):
    kinds = {inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY}
    if any(p.kind not in kinds for p in sig.parameters.values()):
        return None
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    new_args, new_kwargs = [], {}
    for i, name in enumerate(sig.parameters):
        if not normalize_to_only_use_kwargs and i < len(args):
            new_args.append(bound.arguments[name])
        else:
            new_kwargs[name] = bound.arguments[name]
    return ArgsKwargsPair(tuple(new_args), new_kwargs)


def normalize_function(target, args, kwargs=None, arg_types=None, kwarg_types=None,
                       normalize_to_only_use_kwargs=False):
    """``target(*args, **kwargs)`` in canonical form, or None when its signature cannot say (see the module
    docstring). ``arg_types``/``kwarg_types`` are torch's overload hints; jitorch's functions have no overloads."""
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    return _normalized(sig, args, kwargs or {}, normalize_to_only_use_kwargs)


def normalize_module(root, target, args, kwargs=None, normalize_to_only_use_kwargs=False):
    """The call of the submodule ``target`` of ``root`` in canonical form, from its ``forward``'s signature."""
    try:
        forward = root.get_submodule(target).forward
    except AttributeError as e:
        raise RuntimeError(f"Tried to normalize node with target {target} but root did not have that target") from e
    return _normalized(inspect.signature(forward), args, kwargs or {}, normalize_to_only_use_kwargs)
