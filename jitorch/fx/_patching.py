"""The patches a symbolic trace installs: functions that record a node when handed a Proxy, and their undoing.

jitorch's own functions record themselves (``__jitorch_function__``, see :mod:`jitorch._overrides`); the functions
named by ``jitorch.fx.wrap`` and those of ``autowrap_modules`` (``math``) are not jitorch's, so
:class:`~jitorch.fx.Tracer` swaps them for recording wrappers (``recording``) and restores them when the trace ends
(``Patcher``), as torch.fx does.
"""
from __future__ import annotations

import functools
import inspect
import types

from .proxy import Proxy, TraceError

__all__ = ["FLAT_ORDER", "Patcher", "recording", "with_flat_signature"]


def _first_proxy(a):
    if isinstance(a, Proxy):
        return a
    values = a.values() if isinstance(a, dict) else a if isinstance(a, (tuple, list)) else ()
    for x in values:
        found = _first_proxy(x)
        if found is not None:
            return found
    return None


def recording(fn):
    """``fn``, except that a call with a Proxy argument is recorded by that Proxy's tracer."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        proxy = _first_proxy((args, kwargs))
        if proxy is not None:
            return proxy.tracer.create_proxy("call_function", fn, args, kwargs)
        return fn(*args, **kwargs)
    wrapper.__fx_original__ = fn
    return wrapper


class Patcher:
    """Attribute and dict-entry patches, undone in reverse order by :meth:`restore`."""

    def __init__(self):
        self._undo = []
        self._patched_globals = set()
        self.by_original = {}  # original function -> recording wrapper

    def setattr(self, obj, name, value):
        self._undo.append((obj, name, obj.__dict__.get(name, MISSING) if isinstance(obj, type) else
                           getattr(obj, name, MISSING)))
        setattr(obj, name, value)

    def setitem(self, d, name, value):
        self._undo.append((d, name, d.get(name, MISSING)))
        d[name] = value

    def patch_globals(self, g: dict):
        """Swap recorded functions bound in ``g`` (``from jitorch import relu``) for their recording wrappers."""
        if id(g) in self._patched_globals:
            return
        self._patched_globals.add(id(g))
        for name, value in list(g.items()):
            try:
                wrapper = self.by_original.get(value)
            except TypeError:  # unhashable
                continue
            if wrapper is not None:
                self.setitem(g, name, wrapper)

    def restore(self):
        for target, name, old in reversed(self._undo):
            if isinstance(target, dict):
                if old is MISSING:
                    target.pop(name, None)
                else:
                    target[name] = old
            elif old is MISSING:
                delattr(target, name)
            else:
                setattr(target, name, old)
        self._undo.clear()


MISSING = object()
# Where a parameter sits in a code object's variables: positional, keyword-only, then *args, then **kwargs.
_P = inspect.Parameter
FLAT_ORDER = {_P.POSITIONAL_ONLY: 0, _P.POSITIONAL_OR_KEYWORD: 0, _P.KEYWORD_ONLY: 1, _P.VAR_POSITIONAL: 2,
               _P.VAR_KEYWORD: 3}


def with_flat_signature(fn):
    """A copy of ``fn`` whose parameters are all positional, in the code's own order: positional, keyword-only,
    ``*args``, ``**kwargs``. Clearing the star flags makes the tuple and dict parameters plain names, so a Proxy can
    be bound to each (Python would otherwise pack the call's extra arguments into a real tuple)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        raise TraceError(f"cannot trace {fn!r} with *args/**kwargs: it is not a Python function; wrap it in one "
                         "with named parameters")
    flat = code.replace(co_flags=code.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS),
                        co_argcount=code.co_argcount + code.co_kwonlyargcount
                        + bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS),
                        co_kwonlyargcount=0)
    return types.FunctionType(flat, fn.__globals__, fn.__name__, None, fn.__closure__)
