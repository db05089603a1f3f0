"""Partition a traced primitive graph into fused groups and eagerly-run nodes, in a valid execution order.

A group is a maximal set of ``Pointwise`` rows over one iteration space (the members' common output shape) joined
producer to consumer; inputs of other shapes broadcast into it. Two rules keep the result equal to eager:

- no path may leave a group and come back into it (the group runs as one kernel, all at once);
- groups never span an in-place node (an in-place op orders the reads and writes around it).

>>> import jitorch
>>> from jitorch._compile.trace import trace
>>> t = trace(lambda x, y: (x * y + 1).relu().sum() * 2, (jitorch.ones(4), jitorch.ones(4)), {})
>>> [u.names if isinstance(u, FusedGroup) else u.name for u in partition(t.gm.graph)]
[['mul', 'add', 'relu'], 'sum_1', 'mul_1']
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..codegen.ir import load
from ..fx.make_fx import Primitive
from ..fx.node import Node
from .expr import Unfusable
from .lower import IR_DTYPES, node_expr

__all__ = ["FusedGroup", "partition"]


@dataclass
class FusedGroup:
    """Members in graph order, their shape, external tensor inputs (first-use order) and values read outside."""

    gid: int
    shape: tuple
    segment: int
    nodes: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)

    @property
    def names(self):
        return [n.name for n in self.nodes]

    @property
    def ops(self):
        return [n.target.op.name for n in self.nodes]


def _tensor_inputs(node):
    return list(node.all_input_nodes)


def fusible(node):
    """Whether ``node`` is a pointwise row the IR can express for the dtypes it saw."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, Primitive) or target.inplace:
        return False
    if not target.op.pointwise or "val" not in node.meta:
        return False
    if node.kwargs and not (target.op.name == "to_copy" and set(node.kwargs) <= {"dtype"}):
        return False  # attributes (round's decimals, nan_to_num's values) change the expression
    shape, dtype = node.meta["val"]
    if shape == () or dtype not in IR_DTYPES:
        return False
    operands = []
    for a in node.args:
        if isinstance(a, Node):
            if "val" not in a.meta or a.meta["val"][1] not in IR_DTYPES:
                return False
            operands.append(load(len(operands), IR_DTYPES[a.meta["val"][1]]))
        else:
            operands.append(a)
    try:
        node_expr(node, operands)
    except Unfusable:
        return False
    return True


def _merge(groups, anc, ext_anc, ids):
    """Merge groups ``ids`` into the first; rename them in every ancestor set."""
    keep, others = ids[0], set(ids[1:])
    for gid in ids[1:]:
        groups[keep].nodes.extend(groups.pop(gid).nodes)
        ext_anc[keep] |= ext_anc.pop(gid)
    for sets in (anc, ext_anc):
        for key, s in sets.items():
            if s & others:
                sets[key] = (s - others) | {keep}
    return keep


def _group_nodes(nodes):
    groups, member, anc, ext_anc = {}, {}, {}, {}
    segment, next_id = 0, 0
    for n in nodes:
        ins = _tensor_inputs(n)
        if n.op == "call_function" and isinstance(n.target, Primitive) and n.target.inplace:
            segment += 1  # an in-place node is a barrier
        if not fusible(n):
            anc[n] = set().union(*(anc.get(p, set()) for p in ins))
            continue
        shape = n.meta["val"][0]
        candidates = {member[p] for p in ins if p in member}
        candidates = {g for g in candidates if groups[g].shape == shape and groups[g].segment == segment}
        # A candidate that also reaches n through a node outside it would close a cycle.
        for p in ins:
            if member.get(p) not in candidates:
                candidates -= anc.get(p, set())
        chosen = sorted(candidates)
        if len(chosen) > 1 and any(g in ext_anc[h] for g in chosen for h in chosen if g != h):
            chosen = [max(chosen, key=lambda g: len(groups[g].nodes))]
        if chosen:
            gid = _merge(groups, anc, ext_anc, chosen) if len(chosen) > 1 else chosen[0]
            for m in groups[gid].nodes:
                member[m] = gid
        else:
            gid, next_id = next_id, next_id + 1
            groups[gid] = FusedGroup(gid, shape, segment)
            ext_anc[gid] = set()
        groups[gid].nodes.append(n)
        member[n] = gid
        for p in ins:
            if member.get(p) != gid:
                ext_anc[gid] |= anc.get(p, set())
        anc[n] = set().union(*(anc.get(p, set()) for p in ins)) | {gid}
    return groups, member


def partition(graph):
    """Units to run in order: `FusedGroup` objects and single ``call_function`` nodes (run eagerly)."""
    nodes = list(graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    groups, member = _group_nodes(nodes)
    for g in groups.values():
        g.nodes.sort(key=order.__getitem__)
        inside = set(g.nodes)
        for m in g.nodes:
            for p in _tensor_inputs(m):
                if p not in inside and p not in g.inputs:
                    g.inputs.append(p)
            if any(u not in inside for u in m.users):
                g.outputs.append(m)
    last = {g.nodes[-1]: g for g in groups.values()}
    units, done, pending = [], set(), []

    def ready(unit):
        needs = unit.inputs if isinstance(unit, FusedGroup) else _tensor_inputs(unit)
        return all(p in done or p.op in ("placeholder", "get_attr") for p in needs)

    def emit(unit):
        units.append(unit)
        done.update(unit.nodes if isinstance(unit, FusedGroup) else [unit])

    for n in nodes:
        if n.op != "call_function" or (n in member and n not in last):
            continue
        unit = last.get(n, n)
        if ready(unit):
            emit(unit)
            progress = True
            while progress:  # units that waited for this one
                progress = False
                for u in list(pending):
                    if ready(u):
                        pending.remove(u)
                        emit(u)
                        progress = True
        else:
            pending.append(unit)
    if pending:
        raise AssertionError(f"fusion left {len(pending)} units unscheduled")
    return units
