"""Nested containers to a list of leaves and back (``torch.utils._pytree``).

Tuples, lists, dicts, named tuples, ``OrderedDict``, ``defaultdict``, ``deque`` and the ``jitorch.return_types``
results are nodes; everything else (``None`` included) is a leaf, and `register_pytree_node` adds node types.

>>> leaves, spec = tree_flatten((1, [2, 3], {"a": 4}))
>>> leaves
[1, 2, 3, 4]
>>> tree_unflatten([x * 10 for x in leaves], spec)
(10, [20, 30], {'a': 40})
>>> tree_map(lambda x: x * 2, {"w": [1, 2], "b": 3})
{'w': [2, 4], 'b': 6}
>>> tree_map_only(int, lambda x: -x, [1, 2.0, "s"])
[-1, 2.0, 's']
"""
from __future__ import annotations

import collections
from collections import OrderedDict, defaultdict, deque, namedtuple
from typing import Any, Callable, NamedTuple

from ._pytree_keys import GetAttrKey, MappingKey, SequenceKey, defaultdict_from_dumpable, defaultdict_to_dumpable
from ._pytree_light import DictKind, dict_kind, flatten_into, is_dict_kind, unflatten_from

__all__ = ["PyTree", "Context", "FlattenFn", "UnflattenFn", "PyTreeSpec", "TreeSpec", "LeafSpec", "keystr",
           "key_get", "register_pytree_node", "tree_is_leaf", "tree_flatten", "tree_flatten_with_path",
           "tree_unflatten", "tree_iter", "tree_leaves", "tree_leaves_with_path", "tree_structure", "tree_map",
           "tree_map_with_path", "tree_map_", "tree_map_only", "tree_map_only_", "tree_all", "tree_any",
           "tree_all_only", "tree_any_only", "treespec_dumps", "treespec_loads", "treespec_pprint", "is_namedtuple",
           "is_namedtuple_class", "is_namedtuple_instance", "is_structseq", "is_structseq_class",
           "is_structseq_instance", "flatten_into", "unflatten_from", "DictKind", "dict_kind", "is_dict_kind"]

PyTree = Any
Context = Any
FlattenFn = Callable[[PyTree], "tuple[list, Context]"]
UnflattenFn = Callable[[list, Context], PyTree]


class NodeDef(NamedTuple):
    type: type
    flatten_fn: Callable
    unflatten_fn: Callable
    flatten_with_keys_fn: Callable | None
    serialized_type_name: str | None
    to_dumpable_context: Callable | None = None
    from_dumpable_context: Callable | None = None


SUPPORTED_NODES: dict = {}


def register_pytree_node(cls, flatten_fn, unflatten_fn, *, serialized_type_name=None, to_dumpable_context=None,
                         from_dumpable_context=None, flatten_with_keys_fn=None):
    """Make ``cls`` a node: ``flatten_fn(obj) -> (children, context)``, ``unflatten_fn(children, context) -> obj``.

    >>> class Pair:
    ...     def __init__(self, a, b): self.a, self.b = a, b
    >>> register_pytree_node(Pair, lambda p: ([p.a, p.b], None), lambda v, c: Pair(*v))
    >>> tree_leaves([Pair(1, (2, 3))])
    [1, 2, 3]
    """
    if cls in SUPPORTED_NODES:
        raise ValueError(f"{cls} is already registered as pytree node.")
    name = serialized_type_name or f"{cls.__module__}.{cls.__qualname__}"
    SUPPORTED_NODES[cls] = NodeDef(cls, flatten_fn, unflatten_fn, flatten_with_keys_fn, name, to_dumpable_context,
                                   from_dumpable_context)


def _builtin(cls, flatten, unflatten, key_of, **dumpable):
    """Register a built-in node; ``key_of(i, child_key)`` names its children for key paths (torch's
    ``flatten_with_keys_fn`` signature: the object in, ``([(key, child)], context)`` out)."""
    def with_keys(tree):
        children, context = flatten(tree)
        keys = context[1] if cls is defaultdict else context if cls in (dict, OrderedDict) else \
            type(tree)._fields if cls is namedtuple else range(len(children))
        return [(key_of(k), child) for k, child in zip(keys, children)], context
    register_pytree_node(cls, flatten, unflatten, serialized_type_name=f"{cls.__module__}.{cls.__qualname__}",
                         flatten_with_keys_fn=with_keys, **dumpable)


_builtin(tuple, lambda t: (list(t), None), lambda v, c: tuple(v), SequenceKey)
_builtin(list, lambda t: (list(t), None), lambda v, c: list(v), SequenceKey)
_builtin(dict, lambda d: (list(d.values()), list(d)), lambda v, c: dict(zip(c, v)), MappingKey)
_builtin(OrderedDict, lambda d: (list(d.values()), list(d)), lambda v, c: OrderedDict(zip(c, v)), MappingKey)
_builtin(defaultdict, lambda d: (list(d.values()), [d.default_factory, list(d)]),
         lambda v, c: defaultdict(c[0], zip(c[1], v)), MappingKey,
         to_dumpable_context=defaultdict_to_dumpable, from_dumpable_context=defaultdict_from_dumpable)
_builtin(deque, lambda d: (list(d), d.maxlen), lambda v, c: deque(v, maxlen=c), SequenceKey)
# Named tuples and structseqs (result tuples of ops) are nodes by shape: named tuples under this marker.
_builtin(namedtuple, lambda t: (list(t), type(t)), lambda v, c: c(*v), GetAttrKey)


def is_namedtuple_class(cls) -> bool:
    return isinstance(cls, type) and issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple) \
        and not is_structseq_class(cls)


def is_namedtuple_instance(obj) -> bool:
    return is_namedtuple_class(type(obj))


def is_namedtuple(obj) -> bool:
    return is_namedtuple_class(obj if isinstance(obj, type) else type(obj))


def is_structseq_class(cls) -> bool:
    return isinstance(cls, type) and issubclass(cls, tuple) and cls.__module__ in ("jitorch.return_types",
                                                                                    "torch.return_types")


def is_structseq_instance(obj) -> bool:
    return is_structseq_class(type(obj))


def is_structseq(obj) -> bool:
    return is_structseq_class(obj if isinstance(obj, type) else type(obj))


def _node_type(tree):
    cls = type(tree)
    if cls in SUPPORTED_NODES:
        return cls
    if issubclass(cls, tuple):
        if is_structseq_class(cls):
            return cls  # an op's result tuple: its own node type, as torch's structseqs
        if is_namedtuple_class(cls):
            return namedtuple
    return None


def tree_is_leaf(tree, is_leaf=None) -> bool:
    """Whether ``tree`` is a leaf (not a registered node, or ``is_leaf(tree)`` says so)."""
    if is_leaf is not None and is_leaf(tree):
        return True
    return _node_type(tree) is None


_DICTS = (dict, OrderedDict, defaultdict)


class TreeSpec:
    """The structure of a pytree: a node's type, its context (dict keys, a named tuple's class, ...) and its
    children's specs; a leaf is ``TreeSpec(None, None, [])`` and prints as ``*``."""

    __slots__ = ("type", "context", "children_specs", "num_children", "num_nodes", "num_leaves")

    def __init__(self, type, context, children_specs):
        self.type, self.context, self.children_specs = type, context, list(children_specs)
        self.num_children = len(self.children_specs)
        self.num_nodes = 1 + sum(c.num_nodes for c in self.children_specs)
        self.num_leaves = 1 if type is None else sum(c.num_leaves for c in self.children_specs)

    @classmethod
    def _of(cls, type, context, children, num_leaves):
        """The node without `__init__`'s walks: flattening knows its leaf count already (every call of
        `tree_flatten` builds one per node, in the hot paths of ``vmap`` and ``torch.func``)."""
        spec = object.__new__(cls)
        spec.type, spec.context, spec.children_specs = type, context, children
        spec.num_children, spec.num_leaves = len(children), num_leaves
        spec.num_nodes = 1 + sum([c.num_nodes for c in children])
        return spec

    def is_leaf(self) -> bool:
        return self.type is None

    def children(self):
        return list(self.children_specs)

    def child(self, index):
        return self.children_specs[index]

    def _type_name(self):
        if self.type is namedtuple:
            return "namedtuple"
        return self.type.__name__

    def __repr__(self, indent=0):
        if self.is_leaf():
            return "*"
        text = ""
        if self.num_children:
            indent += 2
            text = self.children_specs[0].__repr__(indent) + ("," if self.num_children > 1 else "")
            text += ",".join("\n" + " " * indent + c.__repr__(indent) for c in self.children_specs[1:])
        return f"TreeSpec({self._type_name()}, {self.context}, [{text}])"

    def __eq__(self, other):
        if not isinstance(other, TreeSpec):
            return NotImplemented
        return (self.type, self.num_children) == (other.type, other.num_children) and \
            self.context == other.context and self.children_specs == other.children_specs

    def __hash__(self):
        context = self.context
        try:
            hash(context)
        except TypeError:
            context = repr(context)
        return hash((self.type, context, tuple(self.children_specs)))

    def unflatten(self, leaves):
        """The tree of this spec with ``leaves`` in order."""
        leaves = list(leaves)
        if len(leaves) != self.num_leaves:
            raise ValueError(f"treespec.unflatten(leaves): `leaves` has length {len(leaves)} but the spec refers "
                             f"to a pytree that holds {self.num_leaves} items ({self}).")
        return self._build(iter(leaves))

    def _build(self, it):
        kind = self.type
        if kind is None:
            return next(it)
        children = [c._build(it) for c in self.children_specs]
        if kind is tuple:
            return tuple(children)
        if kind is list:
            return children
        if kind is dict:
            return dict(zip(self.context, children))
        if kind not in SUPPORTED_NODES:  # a structseq
            return self.type(*children) if hasattr(self.type, "_fields") else self.type(children)
        return SUPPORTED_NODES[self.type].unflatten_fn(children, self.context)

    def flatten_up_to(self, tree):
        """``tree``'s subtrees at this spec's leaves (``tree`` must have this spec's structure above them)."""
        out = []
        self._up_to(tree, out)
        return out

    def _up_to(self, tree, out):
        if self.type is None:
            out.append(tree)
            return
        kind = _node_type(tree)
        if kind in _DICTS and self.type in _DICTS:  # one family: only the keys must agree, in any order
            mine = self.context[1] if self.type is defaultdict else self.context
            keys = list(tree)
            if len(keys) != self.num_children:
                raise ValueError(f"Node arity mismatch; expected {self.num_children}, but got {len(keys)}.")
            if set(keys) != set(mine):
                raise ValueError(f"Node keys mismatch; missing key(s): {set(mine) - set(keys)}; "
                                 f"extra key(s): {set(keys) - set(mine)}.")
            children = [tree[k] for k in mine]
        else:
            if kind is not self.type:
                raise ValueError(f"Node type mismatch; expected {self.type}, but got {kind or type(tree)}.")
            children, context = _flatten_node(tree, kind)
            if len(children) != self.num_children:
                raise ValueError(f"Node arity mismatch; expected {self.num_children}, but got {len(children)}.")
            if kind is not deque and context != self.context:  # a deque's maxlen does not matter, as torch's
                if kind is namedtuple:
                    raise ValueError(f"Node context mismatch for node type {kind}; expected {self.context}, but "
                                     f"got {context}.")
                raise ValueError(f"Node context mismatch for custom node type {self.type}.")
        for spec, child in zip(self.children_specs, children):
            spec._up_to(child, out)


class LeafSpec(TreeSpec):
    """The spec of one leaf (``*``)."""

    def __init__(self):
        super().__init__(None, None, [])


PyTreeSpec = TreeSpec
_LEAF = LeafSpec()


def _flatten_node(tree, kind):
    if kind not in SUPPORTED_NODES:  # a structseq
        return list(tree), None
    return SUPPORTED_NODES[kind].flatten_fn(tree)


def _flatten(tree, leaves, is_leaf):
    if is_leaf is not None and is_leaf(tree):
        leaves.append(tree)
        return _LEAF
    kind = type(tree)
    if kind is tuple or kind is list:
        children, context = tree, None
    elif kind is dict:
        children, context = tree.values(), list(tree)
    else:
        kind = _node_type(tree)
        if kind is None:
            leaves.append(tree)
            return _LEAF
        children, context = _flatten_node(tree, kind)
    start = len(leaves)
    return TreeSpec._of(kind, context, [_flatten(c, leaves, is_leaf) for c in children], len(leaves) - start)


def tree_flatten(tree, is_leaf=None):
    """``(leaves, spec)`` of a nested structure."""
    leaves = []
    spec = _flatten(tree, leaves, is_leaf)
    return leaves, spec


def tree_unflatten(leaves, treespec):
    """The tree of ``treespec`` holding ``leaves``."""
    if not isinstance(treespec, TreeSpec):
        raise TypeError(f"Expected `treespec` to be an instance of PyTreeSpec but got item of type "
                        f"{type(treespec)}.")
    return treespec.unflatten(leaves)


def tree_iter(tree, is_leaf=None):
    """The leaves of ``tree``, lazily, in flattening order."""
    if tree_is_leaf(tree, is_leaf):
        yield tree
        return
    for child in _flatten_node(tree, _node_type(tree))[0]:
        yield from tree_iter(child, is_leaf)


def tree_leaves(tree, is_leaf=None) -> list:
    return list(tree_iter(tree, is_leaf))


def tree_structure(tree, is_leaf=None) -> TreeSpec:
    return tree_flatten(tree, is_leaf)[1]


def tree_map(func, tree, *rests, is_leaf=None):
    """``tree``'s structure with ``func`` applied to each leaf (and the matching leaves of ``rests``)."""
    leaves, spec = tree_flatten(tree, is_leaf)
    columns = [leaves] + [spec.flatten_up_to(r) for r in rests]
    return spec.unflatten(map(func, *columns))


def tree_map_(func, tree, *rests, is_leaf=None):
    """Calls ``func`` on every leaf for its effect; returns ``tree`` itself."""
    leaves, spec = tree_flatten(tree, is_leaf)
    columns = [leaves] + [spec.flatten_up_to(r) for r in rests]
    collections.deque(map(func, *columns), maxlen=0)
    return tree


def _matcher(type_or_types_or_pred):
    if isinstance(type_or_types_or_pred, type) or (isinstance(type_or_types_or_pred, tuple) and all(
            isinstance(t, type) for t in type_or_types_or_pred)):
        return lambda x: isinstance(x, type_or_types_or_pred)
    if callable(type_or_types_or_pred):
        return type_or_types_or_pred
    raise TypeError("Argument must be a type, a tuple of types, or a callable.")


def _only(type_or_types_or_pred, func):
    match = _matcher(type_or_types_or_pred)
    return lambda x: func(x) if match(x) else x


def tree_map_only(type_or_types_or_pred, func, tree, is_leaf=None):
    """`tree_map` over the leaves of the given type(s) (or passing a predicate); other leaves pass through."""
    return tree_map(_only(type_or_types_or_pred, func), tree, is_leaf=is_leaf)


def tree_map_only_(type_or_types_or_pred, func, tree, is_leaf=None):
    return tree_map_(_only(type_or_types_or_pred, func), tree, is_leaf=is_leaf)


def tree_all(pred, tree, is_leaf=None) -> bool:
    return all(map(pred, tree_iter(tree, is_leaf)))


def tree_any(pred, tree, is_leaf=None) -> bool:
    return any(map(pred, tree_iter(tree, is_leaf)))


def tree_all_only(type_or_types, pred, tree, is_leaf=None) -> bool:
    match = _matcher(type_or_types)
    return all(pred(x) for x in tree_iter(tree, is_leaf) if match(x))


def tree_any_only(type_or_types, pred, tree, is_leaf=None) -> bool:
    match = _matcher(type_or_types)
    return any(pred(x) for x in tree_iter(tree, is_leaf) if match(x))


# Key paths and spec serialisation live in their own module; they are part of this API.
from ._pytree_keys import (key_get, keystr, tree_flatten_with_path, tree_leaves_with_path,  # noqa: E402
                           tree_map_with_path, treespec_dumps, treespec_loads, treespec_pprint)
