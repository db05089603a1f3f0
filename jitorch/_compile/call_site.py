"""How a call's arguments reach a compiled graph: tensors inside tuples, lists and dicts become flat graph inputs
(`flatten_tensors`, `FlatCall`), the structure that rebuilds them is guarded, and entries of graph-broken functions
that differ from another only in sizes are told apart (`size_variant`).

>>> import jitorch
>>> leaves = []
>>> spec = flatten_tensors({"x": jitorch.ones(2), "log": []}, leaves)
>>> [type(a).__name__ for a in leaves]
['Tensor', 'list']
"""
from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

from .._tensor import Tensor
from ..utils._pytree import dict_kind, unflatten_from
from .dynamic_shapes import changed_dims
from .guards import structure_key

__all__ = ["MAX_SIZE_VARIANTS", "Site", "FlatCall", "site_for", "run_site", "holds_tensor", "flatten_tensors",
           "size_variant"]

CONTAINERS = (tuple, list, dict)
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


def flatten_tensors(tree, leaves):
    """`jitorch.utils._pytree.flatten_into`, except that a container holding no tensor is one leaf: the function
    gets that very object (a list it appends to stays the caller's), guarded by value or identity."""
    if isinstance(tree, CONTAINERS) and holds_tensor(tree):
        if isinstance(tree, dict):
            return dict_kind(tree), {k: flatten_tensors(v, leaves) for k, v in tree.items()}
        return type(tree), [flatten_tensors(v, leaves) for v in tree]
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


def site_for(fn, args, kwargs):
    """``(Site, args, kwargs)`` of one call of ``fn``: over the flat leaves when some argument is a tuple, list or
    dict holding tensors (a batch dict, an ``(x, y)`` pair: those tensors are graph inputs like the others, and the
    structure that rebuilds them is guarded), else as given, with the order of the keywords guarded (the graph takes
    them in the order of the first call)."""
    if any(isinstance(a, CONTAINERS) and holds_tensor(a) for a in (*args, *kwargs.values())):
        leaves = []
        spec = (tuple, [(tuple, [flatten_tensors(a, leaves) for a in args]),
                        (dict, {k: flatten_tensors(v, leaves) for k, v in kwargs.items()})])
        return Site(FlatCall(fn, spec), ("structure", structure_key(spec)), caller=(args, kwargs)), tuple(leaves), {}
    return Site(fn, ("keywords", tuple(kwargs)) if kwargs else None), args, kwargs


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
