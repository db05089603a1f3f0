"""How a call's arguments reach a compiled graph: tensors inside tuples, lists and dicts become flat graph inputs
(`flatten_tensors`, `FlatCall`), the structure that rebuilds them is guarded, as is what the containers the graph
gets whole hold (`contents_key`: a NumPy array changed in place, a deque's tensor replaced), and entries of
graph-broken functions that differ from another only in sizes are told apart (`size_variant`).

>>> import jitorch
>>> leaves = []
>>> spec = flatten_tensors({"x": jitorch.ones(2), "log": []}, leaves)
>>> [type(a).__name__ for a in leaves]
['Tensor', 'list']
"""
from __future__ import annotations

import types
from collections import deque
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np

from .._tensor import Tensor
from ..nn.modules.module import Module
from ..utils._pytree import dict_kind, unflatten_from
from .dynamic_shapes import changed_dims
from .guards import _SIMPLE_TYPES, _constant, structure_key
from .named_values import _SameEntries, _code_names
from .reached import _LIBRARY, functions_reached

__all__ = ["MAX_SIZE_VARIANTS", "Site", "FlatCall", "site_for", "run_site", "holds_tensor", "flatten_tensors",
           "size_variant", "contents_key"]

CONTAINERS = (tuple, list, dict)
# Containers a graph does not take apart (no tensor in them, or a deque) whose contents it may still have read as
# constants: their entries are guarded (`contents_key`), a few levels down.
_HELD = (tuple, list, dict, deque)
_CONTENTS_DEPTH = 2
_OPAQUE = (Tensor, Module, types.FunctionType, types.MethodType, types.ModuleType, type)
# The caller's own ``(args, kwargs)`` of the compiled call running now, when its containers were flattened: what a
# `FlatCall` writes the function's changes to its rebuilt lists and dicts back into.
_CALLER = ContextVar("jitorch_compile_caller", default=None)
MAX_SIZE_VARIANTS = 64


def size_variant(entries, guards):
    """Whether this call differs only in sizes from a graph-broken entry (one replayed in segments)."""
    segmented = [e for e in entries if e.replay is not None and e.dynamic is None]
    return bool(segmented) and bool(changed_dims(segmented, guards, 0))


def holds_tensor(value):
    if isinstance(value, CONTAINERS):
        return any(holds_tensor(v) for v in (value.values() if isinstance(value, dict) else value))
    return isinstance(value, Tensor)


def flatten_tensors(tree, leaves, holders=None):
    """`jitorch.utils._pytree.flatten_into`, except that a container holding no tensor is one leaf: the function
    gets that very object (a list it appends to stays the caller's), guarded by value or identity. ``holders``
    collects the list and dict subclasses taken apart that have attributes (``batch.scale``): the rebuilt copy
    shares them (`FlatCall`), and `site_for` guards those the code names."""
    if isinstance(tree, CONTAINERS) and holds_tensor(tree):
        if holders is not None and getattr(tree, "__dict__", None):
            holders.append(tree)
        if isinstance(tree, dict):
            return dict_kind(tree), {k: flatten_tensors(v, leaves, holders) for k, v in tree.items()}
        return type(tree), [flatten_tensors(v, leaves, holders) for v in tree]
    leaves.append(tree)
    return None, len(leaves) - 1


@dataclass(frozen=True)
class Site:
    """How one call reaches the graph: the function over the call's (flat) arguments, the structure guard, and
    whether tensors that require grad were already lifted into the graph's inputs once this call."""

    fn: object
    structure: tuple | None
    relifted: bool = False
    caller: tuple | None = field(default=None, compare=False)  # the unflattened (args, kwargs) of this call


class FlatCall:
    """``fn`` over the flat leaves of ``(args, kwargs)``: rebuilds the call's tuples, lists and dicts first."""

    def __init__(self, fn, spec):
        self.fn, self.spec = fn, spec
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, *leaves):
        args, kwargs = unflatten_from(self.spec, leaves)
        caller = _CALLER.get()
        if caller is None:
            return self.fn(*args, **kwargs)
        pairs = []
        for orig, rebuilt in zip((*caller[0], *caller[1].values()), (*args, *kwargs.values())):
            _pair(orig, rebuilt, pairs)
        try:
            return self.fn(*args, **kwargs)
        finally:  # ``cache["k"] = k``, ``batch["seen"].append(i)``: the caller's containers change, as in eager
            _write_back(pairs)


def _pair(orig, rebuilt, out):
    """``(caller's container, its rebuilt copy, the copy's entries)`` for each list and dict rebuilt from leaves."""
    if rebuilt is orig or not isinstance(rebuilt, CONTAINERS) or type(orig) is not type(rebuilt):
        return
    attrs = getattr(orig, "__dict__", None)
    if type(attrs) is dict:  # a list or dict subclass: ``hs.count = n`` sets the caller's attribute
        # (not ``rebuilt.__dict__ = attrs``: that runs the class's own ``__setattr__``, and an EasyDict's stores
        # every attribute as an item too, so the function would see a ``"__dict__"`` entry)
        object.__setattr__(rebuilt, "__dict__", attrs)
    if isinstance(rebuilt, dict):
        out.append((orig, rebuilt, dict(rebuilt)))
        for k, v in rebuilt.items():
            if k in orig:
                _pair(orig[k], v, out)
        return
    if not isinstance(rebuilt, tuple):
        out.append((orig, rebuilt, list(rebuilt)))
    for o, r in zip(orig, rebuilt):
        _pair(o, r, out)


def _write_back(pairs):
    """Apply what the function changed in the rebuilt containers to the caller's: an entry it left alone stays the
    caller's object; a rebuilt container stored elsewhere is the caller's container again."""
    back = {id(r): o for o, r, _ in pairs}
    for orig, rebuilt, before in pairs:
        if isinstance(rebuilt, dict):
            if rebuilt.keys() == before.keys() and all(rebuilt[k] is before[k] for k in before):
                continue
            for k in orig.keys() - rebuilt.keys():
                del orig[k]
            for k, v in rebuilt.items():
                if not (k in before and v is before[k] and k in orig):
                    orig[k] = back.get(id(v), v)
        elif len(rebuilt) != len(before) or not all(map(lambda a, b: a is b, rebuilt, before)):
            kept = {id(b): o for b, o in zip(before, orig)}
            orig[:] = [kept.get(id(v), back.get(id(v), v)) for v in rebuilt]


def contents_key(value, names=frozenset(), depth=_CONTENTS_DEPTH):
    """A guard of what a list, tuple, dict or deque holds, for one the graph gets whole (``_constant`` guards it by
    identity): its trace may have read an entry as a constant (``float(arrays[0].sum())``, ``q[0]``, ``d["scale"]``).
    Plain values and NumPy arrays by value (arrays over `guards._SMALL_ARRAY` elements by contents), containers and
    the user's objects (their attributes among ``names``, those the code uses) a level further down, tensors and
    other objects by identity, all of them in one `named_values._SameEntries` pass.

    >>> import numpy as np
    >>> a = [np.zeros(2)]
    >>> k = contents_key(a); a[0][1] = 1.0
    >>> contents_key(a) == k
    False
    """
    if isinstance(value, dict):
        keys, entries = tuple(value), tuple(value.values())
    else:
        keys, entries = len(value), tuple(value)
    by_value = tuple([_stand_in(v, names, depth) for v in entries if type(v) is not Tensor])
    if getattr(value, "__dict__", None):  # a list or dict subclass's attributes (``log.scale``)
        return (type(value).__name__, keys, _SameEntries(entries), by_value, _attributes_key(value, names, depth))
    return (type(value).__name__, keys, _SameEntries(entries), by_value)


def _stand_in(value, names, depth):
    """What of ``value`` (an entry or attribute; not a tensor) a trace may have baked in, beside its identity."""
    if type(value) in _SIMPLE_TYPES or isinstance(value, (np.ndarray, np.generic)):
        return _constant(value)
    if not depth:
        return None
    if isinstance(value, _HELD):
        return contents_key(value, names, depth - 1)
    return _attributes_key(value, names, depth - 1) if _user_object(value) else None


def _user_object(value):
    """A plain object of a user's class (a config, a state object, a dataclass): its attributes are settings."""
    return type(getattr(value, "__dict__", None)) is dict and not isinstance(value, _OPAQUE) and \
        not (type(value).__module__ or "").startswith(_LIBRARY)


def _attributes_key(obj, names, depth):
    """The attributes among ``names`` of a user's object (``cfg.scale``), as `contents_key` guards entries."""
    d = obj.__dict__
    keys = tuple([k for k in d if k in names])
    if not keys:
        return ()
    entries = tuple([d[k] for k in keys])
    by_value = tuple([_stand_in(v, names, depth) for v in entries if type(v) is not Tensor])
    return ("attributes", keys, _SameEntries(entries), by_value)


_NAMES: dict = {}  # a compiled callable's code -> the set of names it and the user's helpers it calls use


def _names_used(fn):
    """The names the code of ``fn`` (a module's ``forward``) and of the user's helpers it names use, once per code."""
    target = type(fn).forward if isinstance(fn, Module) else fn
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    names = _NAMES.get(code)
    if names is None:
        if len(_NAMES) > 1024:
            _NAMES.clear()
        names = _NAMES[code] = frozenset(n for f, _, _ in functions_reached(target) if f is not None
                                         for n in _code_names(f.__code__))
    return names


def _held_contents(fn, values):
    """`contents_key` (or `_attributes_key`) of each container or user's object among ``values`` whose `_constant`
    guard is its identity only."""
    held, names = [], None
    for i, v in enumerate(values):
        if type(v) is Tensor or type(v) in _SIMPLE_TYPES:
            continue
        if isinstance(v, _HELD) and type(_constant(v)) is not tuple:
            names = _names_used(fn) if names is None else names
            held.append((i, contents_key(v, names)))
        elif _user_object(v):
            names = _names_used(fn) if names is None else names
            key = _attributes_key(v, names, _CONTENTS_DEPTH - 1)
            if key:
                held.append((i, key))
    return tuple(held)


def site_for(fn, args, kwargs):
    """``(Site, args, kwargs)`` of one call of ``fn``: over the flat leaves when some argument is a tuple, list or
    dict holding tensors (a batch dict, an ``(x, y)`` pair: those tensors are graph inputs like the others, and the
    structure that rebuilds them is guarded), else as given, with the order of the keywords guarded (the graph takes
    them in the order of the first call). What the containers the graph gets whole hold is guarded too
    (`contents_key`)."""
    values = (*args, *kwargs.values())
    if all(type(a) is Tensor or type(a) in _SIMPLE_TYPES for a in values):
        return Site(fn, ("keywords", tuple(kwargs)) if kwargs else None), args, kwargs
    if any(isinstance(a, CONTAINERS) and holds_tensor(a) for a in values):
        leaves, holders = [], []
        spec = (tuple, [(tuple, [flatten_tensors(a, leaves, holders) for a in args]),
                        (dict, {k: flatten_tensors(v, leaves, holders) for k, v in kwargs.items()})])
        structure = structure_key(spec)
        held = _held_contents(fn, leaves)
        if holders:  # ``l[0] * l.scale``: the attribute was baked in as a constant
            names = _names_used(fn)
            structure = (structure, tuple([_attributes_key(h, names, _CONTENTS_DEPTH - 1) for h in holders]))
        return Site(FlatCall(fn, spec), ("structure", (structure, held) if held else structure),
                    caller=(args, kwargs)), tuple(leaves), {}
    held = _held_contents(fn, values)
    if not (held or kwargs):
        return Site(fn, None), args, kwargs
    return Site(fn, ("keywords", (tuple(kwargs), held) if held else tuple(kwargs))), args, kwargs


def run_site(call, fn, args, kwargs):
    """``call(site, args, kwargs)`` for this call of ``fn`` (`site_for`), its flattened containers' changes reaching
    the caller's."""
    site, flat_args, flat_kwargs = site_for(fn, args, kwargs)
    if site.caller is None:
        return call(site, flat_args, flat_kwargs)
    token = _CALLER.set(site.caller)
    try:
        return call(site, flat_args, flat_kwargs)
    finally:
        _CALLER.reset(token)
