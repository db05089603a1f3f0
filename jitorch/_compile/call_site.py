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

from dataclasses import dataclass

from .._tensor import Tensor
from ..utils._pytree import dict_kind, unflatten_from
from .dynamic_shapes import changed_dims
from .guards import structure_key

__all__ = ["MAX_SIZE_VARIANTS", "Site", "FlatCall", "site_for", "holds_tensor", "flatten_tensors", "size_variant"]

CONTAINERS = (tuple, list, dict)
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


class FlatCall:
    """``fn`` over the flat leaves of ``(args, kwargs)``: rebuilds the call's tuples, lists and dicts first."""

    def __init__(self, fn, spec):
        self.fn, self.spec = fn, spec
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, *leaves):
        args, kwargs = unflatten_from(self.spec, leaves)
        return self.fn(*args, **kwargs)


def site_for(fn, args, kwargs):
    """``(Site, args, kwargs)`` of one call of ``fn``: over the flat leaves when some argument is a tuple, list or
    dict holding tensors (a batch dict, an ``(x, y)`` pair: those tensors are graph inputs like the others, and the
    structure that rebuilds them is guarded), else as given, with the order of the keywords guarded (the graph takes
    them in the order of the first call)."""
    if any(isinstance(a, CONTAINERS) and holds_tensor(a) for a in (*args, *kwargs.values())):
        leaves = []
        spec = (tuple, [(tuple, [flatten_tensors(a, leaves) for a in args]),
                        (dict, {k: flatten_tensors(v, leaves) for k, v in kwargs.items()})])
        return Site(FlatCall(fn, spec), ("structure", structure_key(spec))), tuple(leaves), {}
    return Site(fn, ("keywords", tuple(kwargs)) if kwargs else None), args, kwargs
