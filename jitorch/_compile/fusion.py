"""Partition a traced primitive graph into fused groups and eagerly-run nodes, in a valid execution order.

A group is a set of rows over one iteration space ``shape`` whose last ``reduce_axes`` dimensions may be reduced,
joined producer to consumer; inputs of other shapes broadcast into it. Members live in one of three spaces:

- ``point``: pointwise rows over the whole space (an elementwise chain, a reduction's prologue, or an epilogue
  that combines row statistics with the input, as softmax's ``exp(x - max)`` does);
- ``row`` / ``rowsq``: reductions over the trailing ``reduce_axes`` (keepdim or not; sum, prod, amax, amin, and
  argmax / argmin, whose int64 index may feed pointwise rows too) and pointwise rows over their shape
  (``sum / n``, ``rsqrt(var + eps)``);
- softmax, log_softmax and native_layer_norm rows over the last dimensions, and the backward rows of softmax and
  log_softmax, decomposed by the lowering into reductions and pointwise expressions.

The lowering runs each group as ONE kernel that makes as many passes over a row as its chain of reductions needs
(softmax: max; exp and sum; scale), with the rows split across threads. Rules that keep the result equal to eager:

- no path may leave a group and come back into it (the group runs as one kernel, all at once);
- groups never span an in-place node (an in-place op orders the reads and writes around it);
- a point member never reads a squeezed (``keepdim=False``) row value: its broadcast is not the row's;
- at most `MAX_PHASES` passes per kernel, `MAX_NODES` members and `MAX_INPUTS` tensor inputs.

>>> import jitorch
>>> from jitorch._compile.trace import trace
>>> t = trace(lambda x, y: (x * y + 1).relu().sum() * 2, (jitorch.ones(4), jitorch.ones(4)), {})
>>> [u.names if isinstance(u, FusedGroup) else u.name for u in partition(t.gm.graph)]
[['mul', 'add', 'relu', 'sum_1'], 'mul_1']
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field

import numpy as np

from ..codegen.ir import load
from ..fx.make_fx import Primitive
from ..fx.node import Node
from .expr import Unfusable
from .lower import FUSED_DTYPES, node_expr

__all__ = ["FusedGroup", "partition", "MAX_PHASES", "MAX_NODES", "MAX_INPUTS"]

MAX_PHASES = 4
# Kernel size limits: LLVM's compile time grows faster than linearly with a function's size, and every input is a
# pointer argument (and a register or a stack slot in the loop); a group that would pass either starts a new one.
MAX_NODES = 128
MAX_INPUTS = 24
REDUCE_ROWS = {"sum": "sum", "prod": "prod", "amax": "max", "amin": "min", "argmax": "argmax", "argmin": "argmin"}
ROW_OPS = ("softmax", "log_softmax", "native_layer_norm", "softmax_backward_data", "log_softmax_backward_data")
_BACKWARD_ROWS = ("softmax_backward_data", "log_softmax_backward_data")
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@dataclass
class FusedGroup:
    """Members in graph order, their space, external tensor inputs (first-use order) and values read outside."""

    gid: int
    shape: tuple
    segment: int
    reduce_axes: int = 0
    nodes: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    space: dict = field(default_factory=dict)  # member -> "point", "row", "rowsq" or "op" (a row op or its items)
    phase: dict = field(default_factory=dict)  # member -> the pass its value is available from

    @property
    def names(self):
        return [n.name for n in self.nodes]

    @property
    def ops(self):
        return [n.target.op.name for n in self.nodes if isinstance(n.target, Primitive)]

    @property
    def row_shapes(self):
        """(keepdim shape, squeezed shape) of the reduced values."""
        outer = tuple(self.shape[:len(self.shape) - self.reduce_axes])
        return outer + (1,) * self.reduce_axes, outer


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
    if shape == () or dtype not in FUSED_DTYPES:
        return False
    operands = []
    for a in node.args:
        if isinstance(a, Node):
            if "val" not in a.meta or a.meta["val"][1] not in FUSED_DTYPES:
                return False
            operands.append(load(len(operands), FUSED_DTYPES[a.meta["val"][1]]))
        else:
            operands.append(a)
    try:
        node_expr(node, operands)
    except Unfusable:
        return False
    return True


def reduction_axes(node):
    """For a fusible reduction row (sum, prod, amax, amin without a dtype change, argmax, argmin; over trailing dims):
    (its input's shape, the number of reduced trailing dims); else None."""
    t = node.target
    if node.op != "call_function" or not isinstance(t, Primitive) or t.inplace or t.op.name not in REDUCE_ROWS:
        return None
    arg = t.op.name in ("argmax", "argmin")
    if len(node.args) != 1 or not isinstance(node.args[0], Node) or \
            set(node.kwargs) - ({"dim", "keepdim"} if arg else {"dims", "keepdim", "dtype"}):
        return None
    x = node.args[0]
    if "val" not in x.meta or "val" not in node.meta:
        return None
    (shape, dtype), out_dtype = x.meta["val"], node.meta["val"][1]
    if (out_dtype != np.dtype(np.int64) if arg else dtype != out_dtype) or FUSED_DTYPES.get(dtype) in (None, "bool") \
            or not shape:
        return None
    nd, dims = len(shape), node.kwargs.get("dim" if arg else "dims")
    if arg and dims is not None:
        dims = (dims,)
    dims = tuple(range(nd)) if dims is None else tuple(sorted(d % nd for d in dims))
    if not dims or dims != tuple(range(nd - len(dims), nd)):
        return None
    if t.op.name in ("amax", "amin", "argmax", "argmin") and any(shape[d] == 0 for d in dims):
        return None  # eager raises its error
    return tuple(shape), len(dims)


def row_op_axes(node):
    """For softmax/log_softmax over the last dim or native_layer_norm of float inputs: (input shape, reduced dims)."""
    t = node.target
    if node.op != "call_function" or not isinstance(t, Primitive) or t.op.name not in ROW_OPS:
        return None
    x = node.args[0]
    if not isinstance(x, Node) or "val" not in x.meta:
        return None
    shape, dtype = x.meta["val"]
    if dtype not in _FLOATS or not shape:
        return None
    if t.op.name == "native_layer_norm":
        k = node.kwargs.get("k")
        for a in node.args[1:]:
            if a is not None and (not isinstance(a, Node) or a.meta.get("val", (None, None))[1] != dtype):
                return None
        return (tuple(shape), k) if isinstance(k, int) and 0 < k <= len(shape) else None
    if t.op.name in _BACKWARD_ROWS:  # (grad, output): both of the input's shape and dtype
        y = node.args[1]
        if not isinstance(y, Node) or y.meta.get("val", (None, None)) != (shape, dtype) \
                or node.meta.get("val", (None, None))[1] != dtype:
            return None
    dim = node.kwargs.get("dim")
    return (tuple(shape), 1) if isinstance(dim, int) and dim % len(shape) == len(shape) - 1 else None


def _space(shape, group):
    if shape == group.shape:
        return "point"
    keep, squeezed = group.row_shapes
    if group.reduce_axes and shape == keep:
        return "row"
    if group.reduce_axes and shape == squeezed:
        return "rowsq"
    return None


def _placement(n, kind, info, group, member):
    """(space, phase) of ``n`` if it can join ``group`` (given its members), else None."""
    internal = [p for p in _tensor_inputs(n) if member.get(p) == group.gid]
    if kind == "point":
        space = _space(n.meta["val"][0], group)
        # ("op": a single-output row op such as softmax, whose value is over the whole space: an epilogue.)
        allowed = {"point": ("point", "row", "op"), "row": ("row",), "rowsq": ("rowsq",)}.get(space)
        if space is None or any(group.space[p] not in allowed for p in internal):
            return None
        return space, max((group.phase[p] for p in internal), default=0)
    shape, r = info
    if shape != group.shape or group.reduce_axes not in (0, r) or any(group.space[p] != "point" for p in internal):
        return None
    base = max((group.phase[p] for p in internal), default=0)
    if kind == "reduce":
        return ("row" if n.kwargs.get("keepdim") else "rowsq"), base + 1
    return "op", base + 2


def _merge(groups, anc, ext_anc, ids, read, late):
    """Merge groups ``ids`` into the first; rename them in every ancestor set. A merged group some node outside
    already reads waits on what the others waited on: late (`_waits_on`)."""
    keep, others = ids[0], set(ids[1:])
    if read & set(ids):
        read.add(keep)
        late.add(keep)
    for gid in ids[1:]:
        old = groups.pop(gid)
        groups[keep].nodes.extend(old.nodes)
        groups[keep].space.update(old.space)
        groups[keep].phase.update(old.phase)
        groups[keep].reduce_axes = max(groups[keep].reduce_axes, old.reduce_axes)
        ext_anc[keep] |= ext_anc.pop(gid)
    for sets in (anc, ext_anc):
        for key, s in sets.items():
            if s & others:
                sets[key] = (s - others) | {keep}
    return keep


def _classify(n, member):
    """('point' | 'reduce' | 'op' | 'item', info) or (None, None)."""
    if n.op == "call_function" and n.target is operator.getitem and n.args[0] in member:
        return "item", None
    if fusible(n):
        return "point", None
    info = reduction_axes(n)
    if info is not None:
        return "reduce", info
    info = row_op_axes(n)
    return ("op", info) if info is not None else (None, None)


def _fits(parts, n):
    """Whether groups ``parts`` merged, plus node ``n``, stay within `MAX_NODES` members and `MAX_INPUTS` inputs."""
    members = {m for g in parts for m in g.nodes} | {n}
    if len(members) > MAX_NODES:
        return False
    inputs = {p for m in members for p in _tensor_inputs(m)} - members
    return len(inputs) <= MAX_INPUTS


def _waits_on(gids, ext_anc, late):
    """Groups ``gids`` and every group they wait on. A node's ``anc`` holds what its group waited on when it was
    placed, but a group runs as one unit once all its inputs are ready: a member it takes after a node outside read
    it (a ``late`` group), reading group h, makes that reader wait on h too, which a cycle check must follow."""
    if late.isdisjoint(gids):
        return gids
    out, todo = set(), list(gids)
    while todo:
        g = todo.pop()
        if g not in out:
            out.add(g)
            todo.extend(ext_anc.get(g, ()))
    return out


def _group_nodes(nodes):
    groups, member, anc, ext_anc = {}, {}, {}, {}
    read, late = set(), set()  # groups a node outside reads; those of them that waited on more afterwards

    def seen(p):
        """What reading ``p`` waits on now: its ancestors, and all its group waits on (other members' inputs)."""
        a = anc.get(p, set())
        return a | ext_anc[member[p]] if p in member else a

    segment, next_id = 0, 0
    for n in nodes:
        ins = _tensor_inputs(n)
        if n.op == "call_function" and isinstance(n.target, Primitive) and n.target.inplace:
            segment += 1  # an in-place node is a barrier
        kind, info = _classify(n, member)
        if kind is None:
            anc[n] = set().union(*(seen(p) for p in ins))
            read.update(member[p] for p in ins if p in member)
            continue
        if kind == "item":  # an output of a row op: lives where the op does
            gid = member[n.args[0]]
            g = groups[gid]
            g.nodes.append(n)
            g.space[n] = _space(tuple(n.meta["val"][0]), g) if "val" in n.meta else "op"
            g.phase[n] = g.phase[n.args[0]]
            member[n] = gid
            anc[n] = set(anc[n.args[0]])
            continue
        candidates = {member[p] for p in ins if p in member}
        candidates = {c for c in candidates if groups[c].segment == segment and _fits([groups[c]], n)
                      and _placement(n, kind, info, groups[c], member) is not None}
        # A candidate that also reaches n through a node outside it would close a cycle.
        for p in ins:
            if member.get(p) not in candidates:
                candidates -= _waits_on(seen(p), ext_anc, late)
        chosen = sorted(candidates)
        if len(chosen) > 1 and (any(g in _waits_on(ext_anc[h], ext_anc, late) for g in chosen for h in chosen
                                    if g != h)
                                or len({groups[g].shape for g in chosen}) > 1
                                or len({groups[g].reduce_axes for g in chosen} - {0}) > 1
                                or not _fits([groups[g] for g in chosen], n)):
            # One group alone: it must not reach n through an input living elsewhere (e.g. a recomputed forward
            # chain at the top of a backward graph, read again after a matmul that consumed it).
            alone = [g for g in chosen
                     if not any(g in _waits_on(seen(p), ext_anc, late) for p in ins if member.get(p) != g)]
            chosen = [max(alone, key=lambda g: len(groups[g].nodes))] if alone else []
        gid = None
        if chosen:
            gid = _merge(groups, anc, ext_anc, chosen, read, late) if len(chosen) > 1 else chosen[0]
            for m in groups[gid].nodes:
                member[m] = gid
            place = _placement(n, kind, info, groups[gid], member)
            if place is None or place[1] >= MAX_PHASES + (kind == "reduce"):
                gid = None  # the merged group no longer takes it, or a pass too many: start a new group
        if gid is None:
            shape = n.meta["val"][0] if kind == "point" else info[0]
            gid, next_id = next_id, next_id + 1
            groups[gid] = FusedGroup(gid, tuple(shape), segment)
            ext_anc[gid] = set()
            place = _placement(n, kind, info, groups[gid], member)
        g = groups[gid]
        if kind != "point":
            g.reduce_axes = info[1]
        g.nodes.append(n)
        g.space[n], g.phase[n] = place
        member[n] = gid
        waited = len(ext_anc[gid])
        for p in ins:
            if member.get(p) != gid:
                ext_anc[gid] |= seen(p)
                if p in member:
                    read.add(member[p])
        if len(ext_anc[gid]) > waited and gid in read:
            late.add(gid)
        anc[n] = set().union(*(seen(p) for p in ins)) | {gid}
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
