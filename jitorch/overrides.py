"""``torch.overrides``: the questions library code asks before handing a call to an argument's type.

jitorch's own functions hand calls over to types defining ``__jitorch_function__(cls, func, args, kwargs)``
(:mod:`jitorch._overrides`: ``jitorch.fx.Proxy``, uninitialized parameters), to the user's Tensor subclasses, whose
``__torch_function__`` hears them as torch's (:mod:`jitorch._subclass`), and to Tensor-like classes defining
``__torch_function__`` without being Tensors (:mod:`jitorch._tensor_like`). So the answers here are:

- ``has_torch_function*``: True for an argument whose type takes over (not plain tensors, nor ``Parameter``, whose
  protocol is disabled, as torch's answer);
- :func:`handle_torch_function`: calls each overriding argument's protocol, subclasses first, until one does not
  return ``NotImplemented`` (torch's order and TypeError);
- :class:`TorchFunctionMode`: entered, it receives the public functions' and Tensor methods' calls (torch's modes);
- :func:`get_overridable_functions` / :func:`get_ignored_functions`: which jitorch functions hand calls over and
  which never do.

>>> import jitorch
>>> has_torch_function((jitorch.ones(2), 3)), is_tensor_like(jitorch.ones(2)), is_tensor_like(3)
(False, True, False)
>>> class Logged:
...     @classmethod
...     def __torch_function__(cls, func, types, args=(), kwargs=None):
...         return f"{func.__name__} on {[t.__name__ for t in types]}"
>>> def scale(x, s=2):
...     if has_torch_function_unary(x):
...         return handle_torch_function(scale, (x,), x, s=s)
...     return x * s
>>> scale(Logged()), scale(3)
("scale on ['Logged']", 6)
"""
from __future__ import annotations

import contextlib
import functools
import types as _types

from . import _overrides, _subclass, _tensor_like
from ._tensor import Tensor

__all__ = ["has_torch_function", "has_torch_function_unary", "has_torch_function_variadic", "handle_torch_function",
           "is_tensor_like", "get_ignored_functions", "get_overridable_functions", "get_testing_overrides",
           "is_tensor_method_or_property", "wrap_torch_function", "TorchFunctionMode", "BaseTorchFunctionMode",
           "get_default_nowrap_functions", "enable_reentrant_dispatch", "resolve_name"]


def _overrides_calls(value) -> bool:
    cls = type(value)
    if _subclass.is_user_type(cls):  # heard unless its protocol is disabled (a Parameter) or switched off now
        return _overrides.is_subclass_kind(cls)
    if issubclass(cls, Tensor):  # Tensor's own __torch_function__ is the default: a plain tensor does not count
        return hasattr(cls, "__jitorch_function__")
    return hasattr(cls, "__jitorch_function__") or hasattr(cls, "__torch_function__")


def get_default_nowrap_functions() -> set:
    """The functions whose Tensor results the default ``Tensor.__torch_function__`` returns as they are (field
    reads keeping their identity: ``Tensor.grad.__get__``), as torch's."""
    return _subclass.default_nowrap_functions()


def has_torch_function(relevant_args) -> bool:
    """Whether any of ``relevant_args`` (not searched inside lists) has a type that takes over calls."""
    return any(_overrides_calls(a) for a in relevant_args)


def has_torch_function_unary(obj) -> bool:
    """:func:`has_torch_function` of one argument."""
    return _overrides_calls(obj)


def has_torch_function_variadic(*args) -> bool:
    """:func:`has_torch_function` of the arguments themselves."""
    return has_torch_function(args)


def _takes_part(arg) -> bool:
    """Whether ``arg`` is asked by :func:`handle_torch_function`. Tensors are, as in torch, where Tensor's default
    ``__torch_function__`` declines beside other types; a ``Parameter`` (of a type without its own protocol) is not:
    torch's Parameter disables ``__torch_function__``, so a call naming only parameters finds no implementation."""
    if _overrides_calls(arg):
        return True
    from .nn.parameter import Parameter

    return isinstance(arg, Tensor) and not isinstance(arg, Parameter)


def _get_overloaded_args(relevant_args):
    """One argument per type taking part, a subclass before its base classes (torch's order), else in order."""
    overloaded = []
    for arg in relevant_args:
        cls = type(arg)
        if not _takes_part(arg) or any(type(o) is cls for o in overloaded):
            continue
        index = next((i for i, o in enumerate(overloaded) if issubclass(cls, type(o))), len(overloaded))
        overloaded.insert(index, arg)
    return overloaded


def handle_torch_function(public_api, relevant_args, *args, **kwargs):
    """Call ``public_api(*args, **kwargs)`` through the overriding arguments among ``relevant_args``: the first
    result that is not ``NotImplemented`` is returned; TypeError when every one declines."""
    overloaded = _get_overloaded_args(relevant_args)
    types = tuple(type(a) for a in overloaded)
    for arg in overloaded:
        cls = type(arg)
        if hasattr(cls, "__jitorch_function__") and not _subclass.is_user_type(cls):
            result = cls.__jitorch_function__(public_api, args, kwargs)
        elif hasattr(cls, "__torch_function__"):
            result = _subclass.handler_of(arg)(public_api, types, args, kwargs)
        elif all(issubclass(t, Tensor) for t in types):  # Tensor's default: run the function itself
            result = public_api(*args, **kwargs)
        else:
            result = NotImplemented
        if result is not NotImplemented:
            return result
    name = f"{public_api.__module__}.{public_api.__name__}"
    raise TypeError(f"no implementation found for '{name}' on types that implement __torch_function__: "
                    f"{[type(a) for a in overloaded]}")


class TorchFunctionMode:
    """Entered (``with``), its ``__torch_function__(func, types, args, kwargs)`` receives every call of a public
    function (``jitorch.*``, ``nn.functional``, ``linalg``, ``special``) and Tensor method or operator made inside,
    the innermost mode first; it is off the stack while it handles one, so calling ``func`` there runs it.
    (Property reads such as ``.shape`` and ``jitorch.ops`` calls are not handed over.)

    >>> import jitorch
    >>> class Logged(TorchFunctionMode):
    ...     def __torch_function__(self, func, types, args=(), kwargs=None):
    ...         print(func.__name__)
    ...         return func(*args, **(kwargs or {}))
    >>> with Logged():
    ...     y = jitorch.relu(jitorch.ones(2)).sum()
    ones
    relu
    sum
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        raise NotImplementedError

    def __enter__(self):
        _overrides.FUNCTION_MODES.append(self)
        _overrides.acquire()
        return self

    def __exit__(self, *exc):
        modes = _overrides.FUNCTION_MODES
        for i in range(len(modes) - 1, -1, -1):
            if modes[i] is self:
                del modes[i]
                break
        _overrides.release()
        return False


class BaseTorchFunctionMode(TorchFunctionMode):
    """A mode that runs each call as it is (a base for modes that look at calls)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _get_current_function_mode():
    return _overrides.FUNCTION_MODES[-1] if _overrides.FUNCTION_MODES else None


def _get_current_function_mode_stack():
    return list(_overrides.FUNCTION_MODES)


def _len_torch_function_stack():
    return len(_overrides.FUNCTION_MODES)


def wrap_torch_function(dispatcher):
    """Decorator: the function hands calls over when ``dispatcher(*args, **kwargs)`` names an overriding value."""
    def inner(func):
        @functools.wraps(func)
        def wrapped(*args, **kwargs):
            relevant_args = dispatcher(*args, **kwargs)
            if has_torch_function(relevant_args):
                return handle_torch_function(wrapped, relevant_args, *args, **kwargs)
            return func(*args, **kwargs)
        return wrapped
    return inner


def is_tensor_like(inp) -> bool:
    """A jitorch tensor, or a value with ``__torch_function__``/``__jitorch_function__`` (as torch's question: a
    Tensor-like class itself answers True too)."""
    return isinstance(inp, Tensor) or hasattr(inp, "__torch_function__") or hasattr(inp, "__jitorch_function__")


def _namespaces():
    from . import linalg, special
    from .nn import functional
    import jitorch

    return {jitorch: vars(jitorch), functional: vars(functional), linalg: vars(linalg), special: vars(special)}


def _public_callables(namespace):
    return [v for k, v in namespace.items() if not k.startswith("_") and not isinstance(v, type) and
            isinstance(v, (_types.FunctionType, _types.BuiltinFunctionType))]


@functools.lru_cache(None)
def _overridable():
    out = {module: [f for f in _public_callables(ns) if hasattr(f, "__jitorch_original__")]
           for module, ns in _namespaces().items()}
    # the Tensor methods that hand over while an overriding value is alive (see jitorch._overrides)
    out[Tensor] = [getattr(Tensor, name) for name, v in vars(Tensor).items() if isinstance(v, _types.FunctionType)
                   and (not name.startswith("_") or name in _overrides._DUNDER_METHODS | _overrides._OPERATORS)]
    return out


def get_overridable_functions():
    """``{namespace: [functions]}``: the public functions (and Tensor methods) that hand calls over."""
    return {k: list(v) for k, v in _overridable().items()}


def get_ignored_functions():
    """The public functions of those namespaces that never hand calls over (``is_tensor``, ``get_default_dtype``,
    ...: they answer for the value itself)."""
    return {f for ns in _namespaces().values() for f in _public_callables(ns) if not hasattr(f, "__jitorch_original__")}


def get_testing_overrides():
    """``{function: lambda with its signature returning -1}`` for the overridable functions, as torch's."""
    import inspect

    out = {}
    for funcs in _overridable().values():
        for f in funcs:
            dummy = lambda *args, **kwargs: -1
            try:
                dummy.__signature__ = inspect.signature(f)
            except (TypeError, ValueError):
                pass
            out[f] = dummy
    return out


def is_tensor_method_or_property(func) -> bool:
    """Whether ``func`` is a Tensor method (or a property getter, ``Tensor.shape.__get__``) rather than a namespace
    function."""
    return getattr(func, "__name__", None) == "__get__" or _tensor_attribute_name(func) is not None


def _tensor_attribute_name(func) -> str | None:
    """The name under which Tensor holds ``func`` (a property's ``__get__``: the property's name), in either of its
    forms: the methods hand calls over through wrappers installed only while a value that takes over can exist."""
    name = _overrides.tensor_method_name(func)
    if name is not None:
        return name
    target = getattr(func, "__self__", None) if getattr(func, "__name__", None) == "__get__" else func
    for name, value in vars(Tensor).items():
        if value is target or getattr(value, "__wrapped__", None) is target:
            return name
    return None


_NAMESPACE_NAMES = {"jitorch": "torch", "jitorch.nn.functional": "torch.nn.functional", "jitorch.linalg":
                    "torch.linalg", "jitorch.special": "torch.special"}


@functools.lru_cache(None)
def _names() -> dict:
    names = {}
    for module, namespace in _namespaces().items():
        prefix = _NAMESPACE_NAMES[module.__name__]
        for name, value in namespace.items():
            if not name.startswith("_") and isinstance(value, _types.FunctionType):
                names.setdefault(value, f"{prefix}.{name}")
    return names


def resolve_name(f) -> str | None:
    """A readable name of a function handed to ``__torch_function__``, under torch's names (``"torch.add"``,
    ``"torch.Tensor.add"``, ``"torch.nn.functional.relu"``); None for a function that is not jitorch's."""
    name = _tensor_attribute_name(f)
    if name is not None:
        return f"torch.Tensor.{name}.__get__" if getattr(f, "__name__", None) == "__get__" else f"torch.Tensor.{name}"
    return _names().get(f)


@contextlib.contextmanager
def enable_reentrant_dispatch():
    """Torch's context for re-entering the dispatcher from ``__torch_dispatch__`` with the thread's dispatch state
    restored. jitorch keeps no such state aside while a handler runs, so it runs the block as it is."""
    yield


_tensor_like.watch_class_statements()  # (here: the hook needs Tensor and TorchFunctionMode importable)
