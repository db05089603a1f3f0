"""The inputs of a symbolic trace: one placeholder per parameter, and ``concrete_args``, which specialize some of them.

A parameter given a concrete value keeps its place in the generated signature, with that value as its default, and
the graph asserts that a call passes the same value (``jitorch._assert(flag == True, ...)``), as torch.fx does: a
different value would otherwise be silently ignored. ``PH`` marks what stays symbolic, also inside a dict, list or
tuple (``{"d": {"a": PH, "b": PH}}``): those leaves are read from the argument (``d["a"]``).

>>> import jitorch
>>> from jitorch.fx import symbolic_trace
>>> gm = symbolic_trace(lambda x, scale: x * scale, concrete_args={"scale": 2})
>>> gm(jitorch.ones(1)), gm(jitorch.ones(1), 2)
(tensor([2.]), tensor([2.]))
>>> gm(jitorch.ones(1), 5)
Traceback (most recent call last):
AssertionError: scale has been specialized to have value 2 but got another value
"""
from __future__ import annotations

import inspect
import math
import operator
import warnings

from ._patching import FLAT_ORDER, with_flat_signature
from .proxy import TraceError

__all__ = ["PH", "placeholders"]


class _PlaceholderMarker:
    def __repr__(self):
        return "PH"


PH = _PlaceholderMarker()  # in ``concrete_args``: keep this argument (or this leaf of it) symbolic


def _assert_is_none(value, msg):
    """The guard of a parameter specialized to None (``None == x`` would not be a boolean for a tensor)."""
    assert value is None, msg


def _has_ph(value) -> bool:
    if value is PH:
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_ph(v) for v in value)
    if isinstance(value, dict):
        return any(_has_ph(v) for v in value.values())
    return False


def _comparable(value) -> bool:
    """Whether ``==`` with ``value`` is a reliable Python bool (not a tensor, not NaN, not an arbitrary object)."""
    from .. import _dtype
    from .._device import device

    if isinstance(value, float):
        return not math.isnan(value)
    if value is None or isinstance(value, (bool, int, complex, str, _dtype.dtype, device)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_comparable(v) for v in value)
    if isinstance(value, dict):
        return all(_comparable(v) for v in value.values())
    return False


def _guard(tracer, proxy, value, name):
    """Record the check that the argument read by ``proxy`` equals the value the graph was specialized to."""
    import jitorch

    msg = f"{name} has been specialized to have value {value} but got another value"
    if value is None:
        tracer.create_proxy("call_function", _assert_is_none, (proxy, msg), {})
    elif _comparable(value):
        eq = tracer.create_proxy("call_function", operator.eq, (proxy, value), {})
        tracer.create_proxy("call_function", jitorch._assert, (eq, msg), {})
    else:
        warnings.warn(f"concrete_args: cannot check that later calls pass the same {name} ({type(value).__name__} "
                      "values have no reliable ==); it is up to the caller to pass the value the graph was "
                      "specialized to", stacklevel=4)


def _bind(tracer, proxy, value, name):
    """What the traced code receives for an argument specialized to ``value`` with ``PH`` leaves read from
    ``proxy`` (the argument), and the guards of its concrete leaves."""
    if value is PH:
        return proxy
    if isinstance(value, dict) and _has_ph(value):
        return {k: _bind(tracer, proxy[k], v, f"{name}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)) and _has_ph(value):
        items = [_bind(tracer, proxy[i], v, f"{name}[{i}]") for i, v in enumerate(value)]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    _guard(tracer, proxy, value, name)
    return value


def placeholders(tracer, fn, skip, concrete_args):
    """One placeholder per parameter of ``fn`` (after ``skip``); returns the function to call and its inputs.

    Keyword-only parameters are passed by keyword. ``*args`` and ``**kwargs`` each become one placeholder (target
    ``"*args"`` / ``"**kwargs"``) whose Proxy stands for the whole tuple or dict; to bind a Proxy to them, ``fn`` is
    called through a copy whose code treats them as ordinary positional parameters.
    """
    params = list(inspect.signature(fn).parameters.values())[skip:]
    if isinstance(concrete_args, tuple):  # torch's positional form: one value (or PH) per parameter, in order
        if len(concrete_args) != len(params):
            raise RuntimeError(f"Tracing expected {len(params)} arguments but got {len(concrete_args)} concrete "
                               "arguments")
        concrete_args = {p.name: v for p, v in zip(params, concrete_args)}
    unknown = set(concrete_args) - {p.name for p in params}
    if unknown:
        raise TraceError(f"concrete_args names {sorted(unknown)}, which are not parameters of {fn.__name__}")
    star = [p for p in params if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    args, kwargs = [], {}
    for p in params:
        value = concrete_args.get(p.name, PH)
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            if value is not PH:
                raise TraceError(f"concrete_args cannot specialize {p} of {fn.__name__}: bind it with "
                                 "functools.partial, or give the function named parameters")
            prefix = "*" if p.kind is p.VAR_POSITIONAL else "**"
            proxy = tracer.create_proxy("placeholder", prefix + p.name, (), {}, name=p.name)
        else:
            default = () if p.default is inspect.Parameter.empty else (p.default,)
            if not _has_ph(value) and _comparable(value):
                default = (value,)  # the specialized value is the default: callers may leave it out
            proxy = _bind(tracer, tracer.create_proxy("placeholder", p.name, default, {}), value, p.name)
        if p.kind is p.KEYWORD_ONLY and not star:
            kwargs[p.name] = proxy
        else:
            args.append((FLAT_ORDER[p.kind], len(args), proxy))
    args = [a for *_, a in sorted(args, key=lambda t: t[:2])]  # the flat code's order: see with_flat_signature
    if star:
        fn = with_flat_signature(fn)
    return fn, args, kwargs
