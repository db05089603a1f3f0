"""``replace_pattern``: find every non-overlapping occurrence of a pattern's dataflow and splice in a replacement.

Pattern placeholders match any value (a literal too; two placeholders never match one node); literals must be
equal; the pattern's intermediate values must not be used outside the match (they are deleted). The pattern and the
replacement take their inputs in the same order, and return as many values (one, or a tuple: each returned value
of the match takes the uses of the pattern's).

>>> import jitorch
>>> from jitorch.fx import symbolic_trace, replace_pattern
>>> gm = symbolic_trace(lambda x: (x * 2 + 1).relu())
>>> matches = replace_pattern(gm, lambda a: a * 2 + 1, lambda a: jitorch.addcmul(jitorch.ones_like(a), a, 2))
>>> len(matches), gm(jitorch.tensor([1.0])).item()
(1, 3.0)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from .node import Node

__all__ = ["Match", "InternalMatch", "ReplacedPatterns", "replace_pattern", "replace_pattern_with_filters"]


class Match(NamedTuple):
    anchor: Node  # the graph node matched by the pattern's output value
    nodes_map: dict  # pattern node -> graph node


@dataclass
class InternalMatch:
    """What a match filter of :func:`replace_pattern_with_filters` is given, as torch's matcher makes it."""

    anchors: list
    nodes_map: dict = field(default_factory=dict)
    placeholder_nodes: list = field(default_factory=list)  # graph nodes matched by the pattern's inputs
    returning_nodes: list = field(default_factory=list)  # graph nodes matched by the pattern's outputs


@dataclass
class ReplacedPatterns:
    anchor: Node
    nodes_map: dict
    replacements: list  # the nodes inserted for the match


def _as_graph(pattern):
    from .graph import Graph
    from .tracer import symbolic_trace

    if isinstance(pattern, Graph):
        return pattern
    return pattern.graph if hasattr(pattern, "graph") else symbolic_trace(pattern).graph


def _match_value(p, g, mapping, ignore_literals=False) -> bool:
    if isinstance(p, Node):
        if isinstance(g, Node):
            return _match_node(p, g, mapping, ignore_literals)
        if p.op != "placeholder":
            return False
        # A pattern input matches a literal of the graph too (``add(a, b)`` matches ``add(y, 2.0)``), as torch's
        if p in mapping:
            return not isinstance(mapping[p], Node) and mapping[p] == g  # (``==``, as torch: 2 matches 2.0)
        mapping[p] = g
        return True
    if isinstance(p, (tuple, list)):
        return (type(p) is type(g) and len(p) == len(g)
                and all(_match_value(a, b, mapping, ignore_literals) for a, b in zip(p, g)))
    if isinstance(p, dict):
        return isinstance(g, dict) and p.keys() == g.keys() and all(_match_value(p[k], g[k], mapping, ignore_literals)
                                                                    for k in p)
    return not isinstance(g, Node) and (ignore_literals or (type(p) is type(g) and p == g))


def _match_node(pn: Node, gn: Node, mapping, ignore_literals=False) -> bool:
    """Extend ``mapping`` (pattern node -> graph node) so that ``pn``'s dataflow matches ``gn``'s; on failure
    ``mapping`` is left as it was."""
    if pn in mapping:
        return mapping[pn] is gn
    if pn.op == "placeholder":
        # Two pattern inputs stand for two values: ``add(a, b)`` does not match ``add(x, x)``, as in torch
        if any(v is gn for v in mapping.values()):
            return False
        mapping[pn] = gn
        return True
    if pn.op != gn.op or pn.target != gn.target or len(pn.args) != len(gn.args):
        return False
    trial = {**mapping, pn: gn}
    if _match_value(pn.args, gn.args, trial, ignore_literals) and _match_value(pn.kwargs, gn.kwargs, trial,
                                                                                ignore_literals):
        mapping.update(trial)
        return True
    return False


def _returns(graph, what):
    """The nodes a pattern or replacement returns: one node, or the nodes of a returned tuple or list."""
    out = next(n for n in graph.nodes if n.op == "output").args[0]
    values = list(out) if isinstance(out, (tuple, list)) else [out]
    if not values or not all(isinstance(v, Node) for v in values):
        raise ValueError(f"replace_pattern: the {what} must return traced values (one, or a tuple of them)")
    return values


def _match_returns(graph, returns, gn, ignore_literals):
    """A node map matching every returned pattern node, the first one at ``gn``, or None."""
    mapping: dict = {}
    if not _match_node(returns[0], gn, mapping, ignore_literals):
        return None
    for r in returns[1:]:
        # The other outputs hang off the part already matched: try the graph nodes of the same call.
        if not any(_match_node(r, candidate, mapping, ignore_literals) for candidate in graph.nodes
                   if candidate.op == r.op and candidate.target == r.target):
            return None
    return mapping


def _find_matches(graph, pattern_graph, ignore_literals=False):
    returns = _returns(pattern_graph, "pattern")
    internal_pattern = [n for n in pattern_graph.nodes if n.op not in ("placeholder", "output")]
    order = {n: i for i, n in enumerate(graph.nodes)}
    claimed, matches = set(), []
    for gn in graph.nodes:
        mapping = _match_returns(graph, returns, gn, ignore_literals)
        if mapping is None:
            continue
        inner = {mapping[p] for p in internal_pattern}
        outputs = {mapping[r] for r in returns}
        if inner & claimed or len(outputs) < len(returns):
            continue  # overlaps an earlier match, or two outputs matched one node
        # Deleting the match must not orphan a reader outside it: only the returned values may escape.
        if any(u not in inner for g in inner - outputs for u in g.users):
            continue
        # The replacement goes before the first output; the values it reads must be defined there.
        first = min(outputs, key=order.__getitem__)
        inputs = [mapping[p] for p in pattern_graph.nodes if p.op == "placeholder" and isinstance(mapping.get(p), Node)]
        if any(order[i] > order[first] for i in inputs):
            continue
        claimed |= inner
        matches.append(Match(mapping[returns[0]], mapping))
    return matches


def replace_pattern_with_filters(gm, pattern, replacement, match_filters=None, ignore_literals=False):
    """:func:`replace_pattern`, keeping only matches for which every ``filter(match, graph, pattern_graph)`` holds
    (``match`` an :class:`InternalMatch`); with ``ignore_literals``, the pattern's constants match any constant.
    Returns a :class:`ReplacedPatterns` per match."""
    graph, pattern_graph, replacement_graph = gm.graph, _as_graph(pattern), _as_graph(replacement)
    pattern_inputs = [n for n in pattern_graph.nodes if n.op == "placeholder"]
    replacement_inputs = [n for n in replacement_graph.nodes if n.op == "placeholder"]
    if len(pattern_inputs) != len(replacement_inputs):
        raise ValueError(f"replace_pattern: the pattern takes {len(pattern_inputs)} inputs but the replacement takes "
                         f"{len(replacement_inputs)}")
    returns, replaced = _returns(pattern_graph, "pattern"), _returns(replacement_graph, "replacement")
    if len(returns) != len(replaced):
        raise ValueError(f"replace_pattern: the pattern returns {len(returns)} values but the replacement returns "
                         f"{len(replaced)}")
    matches = [m for m in _find_matches(graph, pattern_graph, ignore_literals)
               if all(f(_internal(m, pattern_inputs, returns), graph, pattern_graph) for f in match_filters or ())]
    done = []
    changed: dict = {}  # a replaced match output -> its replacement; a later match may read it
    for match in matches:
        for p in pattern_inputs:
            if match.nodes_map.get(p) in changed:
                match.nodes_map[p] = changed[match.nodes_map[p]]
        val_map = {r: match.nodes_map[p] for p, r in zip(pattern_inputs, replacement_inputs)}
        order = {n: i for i, n in enumerate(graph.nodes)}
        first = min((match.nodes_map[r] for r in returns), key=order.__getitem__)
        with graph.inserting_before(first):
            new_out = graph.graph_copy(replacement_graph, val_map)
        new_out = list(new_out) if isinstance(new_out, (tuple, list)) else [new_out]
        for r, new in zip(returns, new_out):
            match.nodes_map[r].replace_all_uses_with(new)
            changed[match.nodes_map[r]] = new
        inner = [match.nodes_map[p] for p in pattern_graph.nodes if p.op not in ("placeholder", "output")]
        for node in reversed(inner):
            if not node.users and not node._erased:
                graph.erase_node(node)
        done.append(ReplacedPatterns(match.anchor, match.nodes_map,
                                     [val_map[n] for n in replacement_graph.nodes if n.op not in ("placeholder",
                                                                                                   "output")]))
    if matches:
        gm.recompile()
    return done


def _internal(match, pattern_inputs, returns):
    return InternalMatch([match.anchor], match.nodes_map, [match.nodes_map.get(p) for p in pattern_inputs],
                         [match.nodes_map[r] for r in returns])


def replace_pattern(gm, pattern, replacement):
    """Replace each match of ``pattern`` in ``gm`` with ``replacement`` (functions or GraphModules); returns the
    list of :class:`Match` (anchor node and pattern-to-graph node map), in graph order.

    A pattern may return several values (a tuple); the replacement then returns as many, which take their uses in
    order."""
    return [Match(r.anchor, r.nodes_map) for r in replace_pattern_with_filters(gm, pattern, replacement)]
