"""vmap's batched path remembers its traces: a call like the last one of the same function runs the graph it
recorded then, without tracing again (the trace costs several samples' eager runs: ``vmap(grad(loss))`` called
every training step spent about 40% of its time re-recording the same graph).

A trace is reused only when everything it baked in still holds, checked with `jitorch.compile`'s guards:
- the arguments: each tensor's shape, dtype, device and strides, the other arguments' values, the structure and
  the in_dims, the batch size, grad mode;
- what the function reads by name (`NamedValues`: numbers and settings in globals, closure cells and the objects
  there, a rebound helper or tensor);
- the modules it reaches by name (a ``model`` used through ``functional_call``): their training flags, parameter
  and buffer identities and plain attributes (a dropout's ``p``, an ``eps``).

A tensor the graph reads from outside its inputs (a buffer, a captured tensor) is held by the graph itself, so
in-place updates reach it; one rebound in a global, a closure cell, an object there or a module is caught by the
identity guards above (the guarantee `jitorch.compile` gives). A function that draws Python-level random numbers is
not kept. A call the batched path could not run (the trace raised, or the last sample's check disagreed) is
remembered too, so the next such call goes to the per-sample loop without tracing first. The check of the last
sample against its own eager run stays on every call, a net under the guards.

>>> import jitorch
>>> from jitorch.func import vmap
>>> f = vmap(lambda r: (r * r).sum())
>>> x = jitorch.arange(24.0).reshape(8, 3)
>>> first, again = f(x), f(x + 1)
>>> bool((again == vmap(lambda r: (r * r).sum())(x + 1)).all())
True
"""
from __future__ import annotations

import types
import weakref

__all__ = ["lookup", "remember", "clear"]

# One entry per function (the last specialization it was called with), dropped with the function: the graph holds
# the tensors the function captured, which must not outlive it.
_ENTRIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _Entry:
    __slots__ = ("spec", "guards", "watched", "values", "graph", "root")


def _guards(func, leaves, dims, kwargs, size):
    from ._compile.guards import guard_values
    from ._compile.reached import modules_named_by

    out = guard_values(tuple(leaves), kwargs)
    out.append(("in_dims", tuple(dims)))
    out.append(("size", size))
    for m in modules_named_by(func):
        out += guard_values((), {}, module=m)
    return out


def _cacheable(func):
    return isinstance(func, types.FunctionType)


def lookup(func, leaves, dims, spec, kwargs, size):
    """``(entry, guards)``: the remembered trace for this call (``entry.graph`` None: run the loop) or None, and
    the call's guards for `remember` (None when the function is not cached at all)."""
    if not _cacheable(func):
        return None, None
    guards = _guards(func, leaves, dims, kwargs, size)
    entry = _ENTRIES.get(func)
    if entry is None or entry.spec != spec or entry.guards != guards or entry.watched.values() != entry.values:
        return None, guards
    return entry, guards


def remember(func, spec, guards, graph=None, root=None):
    """Keep this call's outcome: its graph, or (``graph`` None) that it runs sample by sample."""
    from ._compile.named_values import NamedValues

    if guards is None:
        return
    watched = NamedValues(func)
    if watched.random_source:
        return
    entry = _Entry()
    entry.spec, entry.guards, entry.graph, entry.root = spec, guards, graph, root
    entry.watched, entry.values = watched, watched.values()
    _ENTRIES[func] = entry


def clear():
    """Drop every remembered trace (``jitorch.compiler.reset`` does too)."""
    _ENTRIES.clear()
