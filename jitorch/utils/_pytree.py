"""Nested tuples, lists (named tuples too) and dicts to a list of leaves and back (``torch.utils._pytree``).

>>> leaves, spec = tree_flatten((1, [2, 3], {"a": 4}))
>>> leaves
[1, 2, 3, 4]
>>> tree_unflatten([x * 10 for x in leaves], spec)
(10, [20, 30], {'a': 40})
"""
from __future__ import annotations

__all__ = ["tree_flatten", "tree_unflatten", "flatten_into", "unflatten_from"]


def flatten_into(tree, leaves):
    """Append ``tree``'s leaves to ``leaves``; return the spec that rebuilds the tree from a leaf list."""
    if isinstance(tree, (tuple, list)):
        return type(tree), [flatten_into(x, leaves) for x in tree]
    if isinstance(tree, dict):
        return dict, {k: flatten_into(v, leaves) for k, v in tree.items()}
    leaves.append(tree)
    return None, len(leaves) - 1


def unflatten_from(spec, leaves):
    """The tree of ``spec`` with its leaves taken (by position) from ``leaves``."""
    kind, inner = spec
    if kind is None:
        return leaves[inner]
    if kind is dict:
        return {k: unflatten_from(v, leaves) for k, v in inner.items()}
    items = [unflatten_from(x, leaves) for x in inner]
    return kind(*items) if hasattr(kind, "_fields") else kind(items)


def tree_flatten(tree):
    """``(leaves, spec)`` of a nested structure."""
    leaves = []
    spec = flatten_into(tree, leaves)
    return leaves, spec


def tree_unflatten(leaves, spec):
    """Rebuild the structure ``spec`` describes from ``leaves``."""
    return unflatten_from(spec, list(leaves))
