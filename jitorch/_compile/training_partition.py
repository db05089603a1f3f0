"""What a compiled training call keeps between its passes: the joint graph split into a forward graph returning
``(*outputs, *saved)`` and a backward graph taking ``(*saved, *tangents)``, with cheap elementwise chains recomputed
in the backward instead of saved when that keeps fewer bytes (`recompute_plan`).

Split from ``training.py`` (which builds the joint graph and compiles the two halves).

>>> import jitorch
>>> from jitorch._compile.training import joint_for
>>> x = jitorch.tensor([1.0, 2.0], requires_grad=True)
>>> spec = joint_for(lambda x: (x.exp() * 2).sin().sum(), (x,), {}, None, None)
>>> fwd, bwd, n_saved = split_joint(spec.joint, spec.n_outs, recompute=False)
>>> [n.name for n in bwd.graph.nodes if n.op == "placeholder"]
['saved_mul', 'saved_exp', 'tangent0']
>>> fwd, bwd, n_saved = split_joint(spec.joint, spec.n_outs)  # exp and mul recomputed from the input
>>> [n.name for n in bwd.graph.nodes if n.op == "placeholder"]
['saved_arg0', 'tangent0']
"""
from __future__ import annotations

import numpy as np

from ..fx.graph import Graph
from ..fx.graph_module import GraphModule
from ..fx.joint import BACKWARD, FORWARD
from ..fx.make_fx import Primitive
from ..fx.node import Node
from ..ops.movement import CLONE
from .fusion import fusible, reduction_axes, row_op_axes

__all__ = ["recompute_plan", "split_joint"]


def _cheap(node):
    """A forward value the backward may recompute: one pointwise row (deterministic, no attributes to honour)."""
    target = node.target
    return node.op == "call_function" and isinstance(target, Primitive) and not target.inplace \
        and target.op.pointwise and "val" in node.meta and "snapshot" not in node.meta


def _bytes(node):
    if node.op == "placeholder":  # an input is alive anyway (a parameter, the batch): keeping it costs nothing
        return 0
    shape, dtype = node.meta["val"]
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def recompute_plan(saved):
    """``(saved', recomputed)``: save the inputs of elementwise chains and recompute the chains in the backward.

    Every saved value made by a pointwise row is replaced, transitively, by the inputs of its pointwise chain (the
    chain's boundary: inputs, matmuls, reductions...). The backward recomputes the chain inside its own fused
    kernels, so e.g. GELU's ``x*x``, ``tanh(...)`` and ``1 + tanh(...)`` are no longer kept between the passes. Each
    connected chain is recomputed only when that keeps strictly fewer bytes (a lone ReLU would not: its input is as
    large as its output).
    """
    chains = {}  # node -> the chain (a shared list) it belongs to
    for s in saved:
        if not _cheap(s) or s in chains:
            continue
        chain, stack = [], [s]
        while stack:
            n = stack.pop()
            if n in chains:
                if chains[n] is not chain:  # two saved values share a chain: merge
                    other = chains[n]
                    chain.extend(other)
                    for m in other:
                        chains[m] = chain
                continue
            chains[n] = chain
            chain.append(n)
            stack.extend(a for a in n.all_input_nodes if _cheap(a))
    keep = [s for s in saved if s not in chains]
    recomputed = set()
    for chain in {id(c): c for c in chains.values()}.values():
        members = set(chain)
        boundary = [a for n in chain for a in n.all_input_nodes if a not in members and a.op != "get_attr"]
        boundary = list(dict.fromkeys(boundary))
        old = sum(_bytes(s) for s in saved if s in members)
        new = sum(_bytes(b) for b in boundary if b not in keep)
        if new < old:
            recomputed |= members
            keep += [b for b in boundary if b not in keep]
        else:
            keep += [s for s in saved if s in members and s not in keep]
    return [s for s in saved if s in keep] + [k for k in keep if k not in saved], recomputed


def snapshot_written_buffers(gm, buffers):
    """Make the backward read a forward copy of each buffer in ``buffers`` (those the forward updates, written back
    after it runs) that it reads, directly or through a recomputed chain: the constant itself holds the new values by
    then (``y = lin(x + self.cache); self.cache.add_(1)`` differentiates at the old cache). Returns whether the
    graph changed."""
    ids = {id(b) for b in buffers}

    def written(n):
        obj = gm
        for part in n.target.split("."):
            obj = getattr(obj, part)
        return id(obj) in ids
    return snapshot_for_backward(gm, [n for n in gm.graph.nodes if n.op == "get_attr" and written(n)])


def snapshot_for_backward(gm, leaves):
    """Give the backward a forward copy of each of ``leaves`` (constants or inputs whose memory is written after
    the forward) that it reads, directly or through a recomputed chain. Returns whether the graph changed."""
    nodes = list(gm.graph.nodes)
    feeds_backward, stack = set(), [a for n in nodes if n.meta.get("phase") == BACKWARD for a in n.all_input_nodes]
    while stack:
        n = stack.pop()
        if n not in feeds_backward and n.meta.get("phase") != BACKWARD:
            feeds_backward.add(n)
            stack.extend(n.all_input_nodes)
    changed = False
    for n in leaves:
        if n not in feeds_backward:
            continue
        with gm.graph.inserting_after(n):
            snap = gm.graph.call_function(Primitive(CLONE), (n,))
        snap.meta = {**n.meta, "phase": FORWARD, "snapshot": True}  # saved, never recomputed from the leaf
        n.replace_all_uses_with(snap, delete_user_cb=lambda user: user is not snap)
        changed = True
    return changed


def split_joint(gm, n_outs, recompute=True):
    """``(forward_gm, backward_gm, n_saved)`` from a joint GraphModule whose first ``n_outs`` results are outputs.

    With ``recompute`` the backward recomputes cheap elementwise values instead of receiving them (`recompute_plan`).
    """
    nodes = list(gm.graph.nodes)
    results = nodes[-1].args[0]
    outs, grads = results[:n_outs], results[n_outs:]
    fwd = [n for n in nodes if n.meta.get("phase") == FORWARD]
    bwd = [n for n in nodes if n.meta.get("phase") == BACKWARD]
    fwd_set = set(fwd)
    saved = []  # forward values the backward reads (constants are copied instead: they cost nothing to keep)
    for n in [a for b in bwd for a in b.all_input_nodes] + [g for g in grads if isinstance(g, Node)]:
        if n in fwd_set and n.op != "get_attr" and n not in saved:
            saved.append(n)
    recomputed = set()
    if recompute:
        saved, recomputed = recompute_plan(saved)

    fg, fmap = Graph(), {}

    def forward_lookup(a):
        if a not in fmap:  # a constant no forward op reads
            fmap[a] = fg.node_copy(a)
        return fmap[a]

    def output(o):
        if o.op != "get_attr":
            return fmap[o]
        # A constant returned as it is (``return y, jitorch.zeros(2)``, a buffer): a copy per run, or every call's
        # result would be one tensor, and a write into one call's result would change the next call's.
        copy = fg.call_function(Primitive(CLONE), (forward_lookup(o),))
        copy.meta = {k: v for k, v in o.meta.items() if k != "phase"}
        copy.meta["phase"] = FORWARD
        return copy

    for n in fwd:
        fmap[n] = fg.node_copy(n, forward_lookup)
    fg.output(tuple(output(o) for o in outs) + tuple(fmap[s] for s in saved))

    bg, bmap = Graph(), {}
    for s in saved:
        bmap[s] = bg.placeholder(f"saved_{s.name}")
        bmap[s].meta = dict(s.meta)

    def lookup(a):
        if a not in bmap:  # a forward constant first read here
            bmap[a] = bg.node_copy(a)
        return bmap[a]

    # A recomputed chain is copied once per kind of reader, right before its first reader. Readers that fuse
    # (pointwise rows, reductions) get a copy that fuses into their own kernel and reads only the chain's inputs;
    # a library call (a matmul reading GELU's output) gets a copy whose kernel writes just the value it reads.
    # One shared copy would make its kernel write every intermediate that some fused reader needs.
    copies = {True: {}, False: {}}

    def recompute(a, fused):
        done = copies[fused]
        if a not in done:
            done[a] = bg.node_copy(a, lambda p: recompute(p, fused) if p in recomputed else lookup(p))
        return done[a]

    for n in [n for n in bwd if n.op == "placeholder"]:
        bmap[n] = bg.node_copy(n, lookup)
    for n in [n for n in bwd if n.op != "placeholder"]:
        fused = _fuses(n)
        bmap[n] = bg.node_copy(n, lambda a: recompute(a, fused) if a in recomputed else lookup(a))
    bg.output(tuple(None if g is None else recompute(g, False) if g in recomputed else lookup(g) for g in grads))
    return GraphModule(gm, fg), GraphModule(gm, bg), len(saved)


def _fuses(node):
    """Whether the fusion pass may put ``node`` in a kernel (then recomputed values it reads fuse in with it)."""
    return fusible(node) or reduction_axes(node) is not None or row_op_axes(node) is not None
