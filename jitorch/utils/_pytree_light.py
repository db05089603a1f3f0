"""The light spec of ``flatten_into``/``unflatten_from``: nested tuples, not `TreeSpec` objects.

The compile and capture paths flatten every call's arguments (lists, tuples, dicts and dict subclasses only): this
form costs a fraction of a `TreeSpec`. ``jitorch.utils._pytree`` re-exports these names.

>>> leaves = []
>>> spec = flatten_into({"a": [1, 2], "b": (3,)}, leaves)
>>> leaves, unflatten_from(spec, [x * 10 for x in leaves])
([1, 2, 3], {'a': [10, 20], 'b': (30,)})
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, NamedTuple

__all__ = ["DictKind", "dict_kind", "is_dict_kind", "flatten_into", "unflatten_from"]


class DictKind(NamedTuple):
    """A light spec's kind for a dict subclass (``OrderedDict``, ``defaultdict`` and the user's): rebuilt as its
    own class, with its ``default_factory``, so a compiled function gets the container it was called with."""

    cls: type
    factory: Any


def dict_kind(tree):
    """``dict`` for a plain dict, else its `DictKind`."""
    cls = type(tree)
    return dict if cls is dict else DictKind(cls, getattr(tree, "default_factory", None))


def is_dict_kind(kind):
    return kind is dict or type(kind) is DictKind


def flatten_into(tree, leaves):
    """Append ``tree``'s leaves to ``leaves``; return a light spec (nested tuples) that rebuilds it.

    The compile and capture paths flatten every call's arguments: this form costs a fraction of a `TreeSpec`.
    """
    if isinstance(tree, (tuple, list)):
        return type(tree), [flatten_into(x, leaves) for x in tree]
    if isinstance(tree, dict):
        return dict_kind(tree), {k: flatten_into(v, leaves) for k, v in tree.items()}
    leaves.append(tree)
    return None, len(leaves) - 1


def unflatten_from(spec, leaves):
    """The tree of a `flatten_into` spec with its leaves taken (by position) from ``leaves``."""
    kind, inner = spec
    if kind is None:
        return leaves[inner]
    if kind is dict:
        return {k: unflatten_from(v, leaves) for k, v in inner.items()}
    if type(kind) is DictKind:
        items = ((k, unflatten_from(v, leaves)) for k, v in inner.items())
        return kind.cls(kind.factory, items) if issubclass(kind.cls, defaultdict) else kind.cls(items)
    items = [unflatten_from(x, leaves) for x in inner]
    return kind(*items) if hasattr(kind, "_fields") else kind(items)
