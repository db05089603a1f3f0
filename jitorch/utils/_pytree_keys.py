"""Key paths into pytrees and the JSON form of a `TreeSpec` (part of ``torch.utils._pytree``).

>>> from jitorch.utils._pytree import tree_flatten_with_path, keystr, tree_structure, treespec_dumps, treespec_loads
>>> [(keystr(path), leaf) for path, leaf in tree_flatten_with_path({"a": [1, (2,)]})[0]]
[("['a'][0]", 1), ("['a'][1][0]", 2)]
>>> spec = tree_structure({"a": [1, (2,)]})
>>> treespec_loads(treespec_dumps(spec)) == spec
True
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from typing import Any

from . import _pytree as _tree

_PROTOCOL = 1


@dataclass(frozen=True)
class SequenceKey:
    idx: int

    def __str__(self):
        return f"[{self.idx!r}]"

    def get(self, sequence):
        return sequence[self.idx]


@dataclass(frozen=True)
class MappingKey:
    key: Any

    def __str__(self):
        return f"[{self.key!r}]"

    def get(self, mapping):
        return mapping[self.key]


@dataclass(frozen=True)
class GetAttrKey:
    name: str

    def __str__(self):
        return f".{self.name}"

    def get(self, obj):
        return getattr(obj, self.name)


def keystr(kp) -> str:
    """A key path as source text: ``['a'][0].x``."""
    return "".join(str(k) for k in kp)


def key_get(obj, kp):
    """The subtree of ``obj`` at key path ``kp``."""
    for k in kp:
        obj = k.get(obj)
    return obj


def _with_path(tree, path, out, is_leaf):
    if _tree.tree_is_leaf(tree, is_leaf):
        out.append((path, tree))
        return _tree._LEAF
    kind = _tree._node_type(tree)
    children, context = _tree._flatten_node(tree, kind)
    if kind not in _tree.SUPPORTED_NODES:  # a structseq
        keys = [SequenceKey(i) for i in range(len(children))]
    else:
        keys_fn = _tree.SUPPORTED_NODES[kind].flatten_with_keys_fn
        if keys_fn is None:
            raise ValueError(f"Did not find a flatten_with_keys_fn for type: {kind}. Please pass a "
                             "flatten_with_keys_fn argument to register_pytree_node.")
        keys = [k for k, _ in keys_fn(tree)[0]]
    return _tree.TreeSpec(kind, context, [_with_path(c, path + (k,), out, is_leaf) for k, c in zip(keys, children)])


def tree_flatten_with_path(tree, is_leaf=None):
    """``([(key_path, leaf), ...], spec)``."""
    out = []
    spec = _with_path(tree, (), out, is_leaf)
    return out, spec


def tree_leaves_with_path(tree, is_leaf=None):
    return tree_flatten_with_path(tree, is_leaf)[0]


def tree_map_with_path(func, tree, *rests, is_leaf=None):
    """`tree_map` whose ``func`` also receives each leaf's key path first."""
    pairs, spec = tree_flatten_with_path(tree, is_leaf)
    columns = [[leaf for _, leaf in pairs]] + [spec.flatten_up_to(r) for r in rests]
    return spec.unflatten(func(path, *xs) for (path, _), *xs in zip(pairs, *columns))


def defaultdict_to_dumpable(context):
    factory = context[0]
    return {"default_factory_module": factory.__module__, "default_factory_name": factory.__qualname__,
            "dict_context": context[1]}


def defaultdict_from_dumpable(dumpable):
    module = importlib.import_module(dumpable["default_factory_module"])
    return [getattr(module, dumpable["default_factory_name"]), dumpable["dict_context"]]


def _dump(spec):
    if spec.is_leaf():
        return {"type": None, "context": None, "children_spec": []}
    node = _tree.SUPPORTED_NODES.get(spec.type)
    if spec.type is _tree.namedtuple or node is None:
        raise NotImplementedError(f"Can't serialize TreeSpec of {spec._type_name()} class {spec.context} because "
                                  "we didn't register a serializated_type_name.")
    context = node.to_dumpable_context(spec.context) if node.to_dumpable_context else json.dumps(spec.context)
    return {"type": node.serialized_type_name, "context": context,
            "children_spec": [_dump(c) for c in spec.children_specs]}


def treespec_dumps(treespec, protocol=None) -> str:
    """A JSON string of ``treespec`` (torch's format: ``[protocol, {"type", "context", "children_spec"}]``)."""
    if not isinstance(treespec, _tree.TreeSpec):
        raise TypeError(f"treespec_dumps(treespec): Expected `treespec` to be instance of TreeSpec but got "
                        f"item of type {type(treespec)}.")
    protocol = _PROTOCOL if protocol is None else protocol
    if protocol != _PROTOCOL:
        raise ValueError(f"Unknown protocol {protocol}. Available protocols: [{_PROTOCOL}]")
    return json.dumps([protocol, _dump(treespec)])


def _load(data):
    if data["type"] is None:
        return _tree._LEAF
    by_name = {n.serialized_type_name: n for n in _tree.SUPPORTED_NODES.values()}
    node = by_name.get(data["type"])
    if node is None:
        raise NotImplementedError(f"Can't deserialize TreeSpec of type {data['type']}: no pytree node was "
                                  "registered with that serialized_type_name.")
    context = node.from_dumpable_context(data["context"]) if node.from_dumpable_context else \
        json.loads(data["context"])
    return _tree.TreeSpec(node.type, context, [_load(c) for c in data["children_spec"]])


def treespec_loads(serialized: str):
    """The `TreeSpec` of a `treespec_dumps` string."""
    protocol, data = json.loads(serialized)
    if protocol != _PROTOCOL:
        raise ValueError(f"Unknown protocol {protocol}. Available protocols: [{_PROTOCOL}]")
    return _load(data)


class _Star:
    def __repr__(self):
        return "*"


def treespec_pprint(treespec) -> str:
    """The spec drawn as its container with ``*`` at each leaf: ``{'a': [*, (*,)]}``."""
    return repr(treespec.unflatten([_Star()] * treespec.num_leaves))
