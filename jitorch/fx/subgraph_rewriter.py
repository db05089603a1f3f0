"""``replace_pattern``: find every non-overlapping occurrence of a pattern's dataflow and splice in a replacement.

Pattern placeholders match any value; literals must be equal; the pattern's intermediate values must not be used
outside the match (they are deleted). The pattern and the replacement take their inputs in the same order.

>>> import jitorch
>>> from jitorch.fx import symbolic_trace, replace_pattern
>>> gm = symbolic_trace(lambda x: (x * 2 + 1).relu())
>>> matches = replace_pattern(gm, lambda a: a * 2 + 1, lambda a: jitorch.addcmul(jitorch.ones_like(a), a, 2))
>>> len(matches), gm(jitorch.tensor([1.0])).item()
(1, 3.0)
"""
from __future__ import annotations

from typing import NamedTuple

from .node import Node

__all__ = ["Match", "replace_pattern", "replace_pattern_with_filters"]


class Match(NamedTuple):
    anchor: Node  # the graph node matched by the pattern's output value
    nodes_map: dict  # pattern node -> graph node


def _as_graph(pattern):
    from .graph import Graph
    from .tracer import symbolic_trace

    if isinstance(pattern, Graph):
        return pattern
    return pattern.graph if hasattr(pattern, "graph") else symbolic_trace(pattern).graph


def _match_value(p, g, mapping) -> bool:
    if isinstance(p, Node):
        return isinstance(g, Node) and _match_node(p, g, mapping)
    if isinstance(p, (tuple, list)):
        return (type(p) is type(g) and len(p) == len(g)
                and all(_match_value(a, b, mapping) for a, b in zip(p, g)))
    if isinstance(p, dict):
        return isinstance(g, dict) and p.keys() == g.keys() and all(_match_value(p[k], g[k], mapping) for k in p)
    return not isinstance(g, Node) and type(p) is type(g) and p == g


def _match_node(pn: Node, gn: Node, mapping) -> bool:
    if pn in mapping:
        return mapping[pn] is gn
    if pn.op == "placeholder":
        mapping[pn] = gn
        return True
    if pn.op != gn.op or pn.target != gn.target or len(pn.args) != len(gn.args):
        return False
    mapping[pn] = gn
    if _match_value(pn.args, gn.args, mapping) and _match_value(pn.kwargs, gn.kwargs, mapping):
        return True
    del mapping[pn]
    return False


def _find_matches(graph, pattern_graph):
    outputs = [n for n in pattern_graph.nodes if n.op == "output"]
    anchor = outputs[0].args[0]
    if not isinstance(anchor, Node):
        raise ValueError("replace_pattern: the pattern must return a single traced value")
    internal_pattern = [n for n in pattern_graph.nodes if n.op not in ("placeholder", "output")]
    claimed, matches = set(), []
    for gn in graph.nodes:
        mapping: dict = {}
        if not _match_node(anchor, gn, mapping):
            continue
        inner = {mapping[p] for p in internal_pattern}
        if inner & claimed:
            continue  # overlaps an earlier match
        # Deleting the match must not orphan a reader outside it: only the anchor may escape.
        if any(u not in inner for g in inner if g is not gn for u in g.users):
            continue
        claimed |= inner
        matches.append(Match(gn, mapping))
    return matches


def replace_pattern_with_filters(gm, pattern, replacement, match_filters=()):
    """:func:`replace_pattern`, keeping only matches for which every ``filter(match, graph, pattern_graph)`` holds."""
    graph, pattern_graph, replacement_graph = gm.graph, _as_graph(pattern), _as_graph(replacement)
    pattern_inputs = [n for n in pattern_graph.nodes if n.op == "placeholder"]
    replacement_inputs = [n for n in replacement_graph.nodes if n.op == "placeholder"]
    if len(pattern_inputs) != len(replacement_inputs):
        raise ValueError(f"replace_pattern: the pattern takes {len(pattern_inputs)} inputs but the replacement takes "
                         f"{len(replacement_inputs)}")
    matches = [m for m in _find_matches(graph, pattern_graph)
               if all(f(m, graph, pattern_graph) for f in match_filters)]
    for match in matches:
        val_map = {r: match.nodes_map[p] for p, r in zip(pattern_inputs, replacement_inputs)}
        with graph.inserting_before(match.anchor):
            new_out = graph.graph_copy(replacement_graph, val_map)
        match.anchor.replace_all_uses_with(new_out)
        inner = [match.nodes_map[p] for p in pattern_graph.nodes if p.op not in ("placeholder", "output")]
        for node in reversed(inner):
            if not node.users and not node._erased:
                graph.erase_node(node)
    if matches:
        gm.recompile()
    return matches


def replace_pattern(gm, pattern, replacement):
    """Replace each match of ``pattern`` in ``gm`` with ``replacement`` (functions or GraphModules); returns the
    list of :class:`Match` (anchor node and pattern-to-graph node map), in graph order."""
    return replace_pattern_with_filters(gm, pattern, replacement)
