"""Common-subexpression elimination: two pure nodes with the same target and the same inputs become one.

>>> import jitorch
>>> from jitorch.fx import symbolic_trace
>>> from jitorch.fx.passes.cse import CSEPass
>>> gm = symbolic_trace(lambda x: x.exp() + x.exp())
>>> result = CSEPass()(gm)
>>> result.modified, len(result.graph_module.graph.nodes)
(True, 4)
"""
from __future__ import annotations

from typing import NamedTuple

from ..graph import is_impure, maybe_written, mutates_input
from ..node import Node

__all__ = ["CSEPass", "PassResult", "eliminate_common_subexpressions"]


class PassResult(NamedTuple):
    graph_module: object
    modified: bool


def _key(a):
    """A hashable stand-in for an argument structure; nodes compare by identity, containers by type and items."""
    if isinstance(a, Node):
        return ("node", id(a))
    if isinstance(a, (tuple, list)):
        return (type(a).__name__, tuple(_key(x) for x in a))
    if isinstance(a, dict):
        return ("dict", tuple((k, _key(v)) for k, v in a.items()))
    if isinstance(a, slice):
        return ("slice", _key(a.start), _key(a.stop), _key(a.step))
    try:
        hash(a)
    except TypeError:
        return ("id", id(a))
    return (type(a).__name__, a)


def eliminate_common_subexpressions(graph) -> int:
    """Merge duplicate pure nodes in place; returns how many nodes were removed.

    In-place calls limit merging: a value that is (or may alias) one written in place later is never merged, and no
    value computed before an in-place call stands in for one computed after it (its inputs may have changed)."""
    written = maybe_written(graph)
    seen: dict = {}
    removed = 0
    for node in list(graph.nodes):
        if mutates_input(node):
            seen.clear()
            continue
        if node.op not in ("call_function", "call_method", "call_module", "get_attr") or is_impure(node) or \
                node in written:
            continue
        key = (node.op, _key(node.target) if not isinstance(node.target, str) else node.target,
               _key(node.args), _key(node.kwargs))
        first = seen.setdefault(key, node)
        if first is not node:
            node.replace_all_uses_with(first)
            graph.erase_node(node)
            removed += 1
    return removed


class CSEPass:
    """A pass object: ``CSEPass()(gm)`` rewrites ``gm`` in place, recompiles, and returns a :class:`PassResult`."""

    def __call__(self, graph_module) -> PassResult:
        removed = eliminate_common_subexpressions(graph_module.graph)
        if removed:
            graph_module.recompile()
        return PassResult(graph_module, bool(removed))
