"""The backward engine: dependency-counted topological execution of the recorded graph.

Gradients for leaves are summed while the graph runs and stored once at the end (`engine_leaves.py`), so no gradient
tensor is ever shared between two ``.grad`` fields or with a tensor the user passed in. The loop runs a plain row node
(one output, no hooks) inline; every other node takes `engine_hooks.run_node`.

>>> import jitorch
>>> x = jitorch.tensor([1.0, 2.0], requires_grad=True)
>>> (x * x).sum().backward()
>>> x.grad
tensor([2., 4.])
"""
from __future__ import annotations

import sys

import numpy as np

from .. import _dtype
from .._dispatch_modes import MODES
from .._tensor import Tensor
from .anomaly_mode import AnomalyState
from .engine_hooks import run_node
from .engine_leaves import finish_leaves, grad_sum, leaf_hooks_suppressed  # noqa: F401 - fx.joint's
from .graph import Node
from .grad_mode import GradState
from .graph_task import _TASKS, GraphTask

_ndarray = np.ndarray
_refcount = sys.getrefcount
_plus = grad_sum


def _edge_of(t):
    if t._base is not None and t._view_ver != t._ver_owner._ver:
        from .._dispatch import sync_view

        sync_view(t)
    if t.grad_fn is not None:
        return (t.grad_fn, t._output_nr)
    if t._requires_grad:
        return (t, 0)
    return None


def _collect_dependencies(roots):
    """For every node reachable from the roots, its pending entry: one gradient slot per output (summed into as the
    graph runs), then how many edges point at the node (counted down as they deliver)."""
    pending = {}
    stack = []
    for n in roots:  # in order: sums are reproducible
        if isinstance(n, Node) and n not in pending:
            pending[n] = _entry(n, 0)
            stack.append(n)
    get, pop, push = pending.get, stack.pop, stack.append
    while stack:  # a root reachable from another root has its entry already: every node is expanded once
        for edge in pop().next:
            if edge is not None:
                target = edge[0]
                entry = get(target)
                if entry is not None:
                    entry[-1] += 1
                elif isinstance(target, Node):  # leaves (tensors) are never counted
                    pending[target] = [None, 1] if target._out_meta is None else _entry(target, 1)
                    push(target)
    return pending


def _entry(node, count):
    return [None] * (len(node._out_meta) if node._out_meta is not None else 1) + [count]


def _needed_nodes(roots, wanted_nodes, wanted_leaves):
    """Nodes that must run: some wanted input lies below them (the others need not run; a wanted non-leaf's own
    node only has its gradient captured)."""
    memo = {}

    def visit(node):
        key = id(node)
        if key in memo:
            return memo[key]
        memo[key] = False
        stack = [(node, iter(node.next))]
        order = []
        # Iterative post-order DFS: deep graphs (RNNs over long sequences) must not hit the recursion limit.
        while stack:
            cur, it = stack[-1]
            advanced = False
            for edge in it:
                if edge is None:
                    continue
                target = edge[0]
                if isinstance(target, Node) and id(target) not in memo:
                    memo[id(target)] = False
                    stack.append((target, iter(target.next)))
                    advanced = True
                    break
            if not advanced:
                stack.pop()
                order.append(cur)
        for cur in order:
            below = False
            for edge in cur.next:
                if edge is None:
                    continue
                target = edge[0]
                if isinstance(target, Node):
                    below = below or memo[id(target)]
                else:
                    below = below or id(target) in wanted_leaves
            runs[id(cur)] = below
            memo[id(cur)] = below or cur in wanted_nodes
        return memo[key]

    # memo: a wanted input is this node's output or lies below it; runs: one lies below it, so the node must run.
    # A wanted non-leaf's own node only has its gradient captured: running it would free its history, which
    # ``grad(y, h)`` must leave for a later backward through ``h``.
    runs = {}
    for r in roots:
        if isinstance(r, Node):
            visit(r)
    return {k for k, v in runs.items() if v}


def _wanted_edges(edges, needed, wanted_nodes, wanted_leaves):
    """Per edge, whether a wanted input is its target or lies below it (`Node.needs_grad` during that node's run)."""
    return tuple(e is not None and (id(e[0]) in needed or e[0] in wanted_nodes if isinstance(e[0], Node)
                                    else id(e[0]) in wanted_leaves) for e in edges)


def _fix_meta(grad, meta):
    """Reduce a broadcast gradient to the input's shape and cast it to the input's dtype."""
    shape, dtype = meta
    if grad._data.shape != shape:
        grad = grad.sum_to_size(shape)
    if grad._data.dtype != dtype:
        grad = grad.to(dtype)
    return grad


def _fitted(edges, grads, metas):
    """``grads`` with each one an edge takes fitted to its input's recorded shape and dtype (`_fix_meta`)."""
    out = None
    for i, (edge, g, meta) in enumerate(zip(edges, grads, metas)):
        if edge is not None and g is not None and meta is not None:
            d = g._data
            try:
                fits = d.shape == meta[0] and d.dtype == meta[1]
            except RuntimeError:  # a sparse gradient (sparse=True embeddings): no strided array (free when absent)
                fits = _sparse_fits(g, meta)
            if not fits:
                if out is None:
                    out = list(grads)
                out[i] = _fix_meta(g, meta) if not g.is_sparse else g.to(_dtype.from_numpy_dtype(meta[1]))
    return grads if out is None else out


def _sparse_fits(g, meta):
    if tuple(g.shape) != tuple(meta[0]):
        raise RuntimeError(f"a sparse gradient of shape {list(g.shape)} reached an input of shape {list(meta[0])}: "
                           "a broadcast gradient cannot be summed to its input's shape while sparse")
    return g._sp_values._data.dtype == meta[1]


def _sum_plain(a, b):
    """``a + b`` for two gradients bound for the same input while nothing records (no ``create_graph``, no mode):
    NumPy directly, and into ``a``'s own memory when the engine's slot is all that holds ``a`` and its array (torch's
    InputBuffer accumulates in place under the same condition: nobody else can see the buffer). Called as
    ``slot[i] = _sum_plain(slot[i], g)``: the slot, the parameter and getrefcount's argument are ``_SOLE``."""
    x = a._data
    y = b._data
    if type(x) is _ndarray and type(y) is _ndarray and type(a) is Tensor and type(b) is Tensor \
            and x.shape == y.shape and x.dtype == y.dtype:
        if _refcount(a) == _SOLE and _refcount(x) == _SOLE and x.base is None and x.flags.writeable:
            np.add(x, y, out=x)
            return a
        out = x + y
        return Tensor._make(out if type(out) is _ndarray else np.asarray(out))  # (0-d sums are NumPy scalars)
    return grad_sum(a, b)


def _sole_count():
    """What getrefcount reports in `_sum_plain` for a tensor and array nothing else holds (the interpreter decides
    how many references a call takes: measured, not assumed)."""
    def probe(a, b):
        x = a._data
        return _refcount(a), _refcount(x)

    slot = [Tensor._make(np.empty(1))]
    counts = probe(slot[0], None)
    return counts[0] if counts[0] == counts[1] else -1  # -1: never in place


_SOLE = _sole_count()


# Per backward running now (innermost last): whether it was asked for the gradients of given inputs (``grad``,
# ``backward(inputs=...)``), which a reentrant checkpoint's inner backward cannot honour.
_WITH_INPUTS: list = []


def is_checkpoint_valid():
    """torch's ``autograd._is_checkpoint_valid``: False inside a backward that was given ``inputs``."""
    return not _WITH_INPUTS or not _WITH_INPUTS[-1]


def run_backward(roots, root_grads, retain_graph, create_graph, inputs=None, accumulate_into_grad=True,
                 allow_unused=False):
    """Propagate ``root_grads`` from ``roots`` (tensors). Returns the gradients of ``inputs`` when given."""
    root_edges = []
    for i, t in enumerate(roots):
        edge = _edge_of(t)
        if edge is None:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        root_edges.append(edge)

    wanted_nodes, wanted_leaves, captured = {}, {}, {}
    if inputs is not None:
        for i, t in enumerate(inputs):
            if t.grad_fn is not None:
                wanted_nodes.setdefault(t.grad_fn, []).append((t._output_nr, i))
            else:
                if not t._requires_grad:
                    raise RuntimeError("One of the differentiated Tensors does not require grad")
                wanted_leaves.setdefault(id(t), []).append(i)

    nodes = [e[0] for e in root_edges]
    pending = _collect_dependencies(nodes)
    needed = _needed_nodes(nodes, wanted_nodes, wanted_leaves) if inputs is not None else None
    # Nothing records the backward's own ops: sums of gradients may bypass them (and reuse the engine's buffers).
    plain = not create_graph and not MODES
    add = _sum_plain if plain else _plus

    leaf_grads = {}  # id(leaf) -> [leaf, grad]
    for (target, nr), g in zip(root_edges, root_grads):
        if isinstance(target, Node):
            entry = pending[target]
        else:
            entry, nr = leaf_grads.setdefault(id(target), [target, None]), 1
        entry[nr] = g if entry[nr] is None else entry[nr] + g
    ready = [target for target in dict.fromkeys(nodes) if isinstance(target, Node) and not pending[target][-1]]

    # The lean path: no gradient captured, no node skipped, no anomaly checks; a plain node (`Node._plain`) then
    # runs inline, as `run_node` would run it.
    lean = not wanted_nodes and needed is None and not AnomalyState.enabled
    free = not retain_graph
    prev_enabled = GradState.enabled
    GradState.enabled = bool(create_graph)
    _WITH_INPUTS.append(inputs is not None)
    task = GraphTask(nodes, needed, wanted_nodes, wanted_leaves, accumulate_into_grad)
    _TASKS.append(task)
    try:
        pop, push, take, leaf_get = ready.pop, ready.append, pending.pop, leaf_grads.get
        while ready:
            node = pop()
            grads = take(node)
            if lean and node._plain:
                g = grads[0]
                if g is not None:
                    in_grads = node.op.backward(node, g)
                    if type(in_grads) is not tuple:
                        in_grads = (in_grads,)
                else:  # reached only by "no gradient" (a row's None, as floor_divide's to its divisor)
                    in_grads = (None,) * len(node.next)
                if free:  # Node.release, inline
                    node._saved_in = node._saved_out = None
                    node._freed = True
            else:
                del grads[-1]  # the count, now 0: what remains is one gradient per output
                if needed is None:
                    in_grads = run_node(node, grads, wanted_nodes, captured, needed, retain_graph)
                else:
                    node._grad_mask = _wanted_edges(node.next, needed, wanted_nodes, wanted_leaves)
                    try:
                        in_grads = run_node(node, grads, wanted_nodes, captured, needed, retain_graph)
                    finally:
                        node._grad_mask = None
                if in_grads is None:
                    continue
            edges = node.next
            if node.in_meta is not None:
                in_grads = _fitted(edges, in_grads, node.in_meta)
            for edge, g in zip(edges, in_grads):
                if edge is None:
                    continue
                target = edge[0]
                if isinstance(target, Node):
                    entry = pending[target]
                    if g is not None:
                        nr = edge[1]
                        # (``entry[nr]`` twice, no local: `_sum_plain` counts the references to the old sum)
                        entry[nr] = g if entry[nr] is None else add(entry[nr], g)
                    count = entry[-1] - 1
                    entry[-1] = count
                    if not count:
                        push(target)
                elif g is not None:
                    entry = leaf_get(id(target))
                    if entry is None:
                        leaf_grads[id(target)] = [target, g]
                    else:
                        entry[1] = add(entry[1], g)
        result = finish_leaves(leaf_grads, wanted_leaves, captured, inputs, accumulate_into_grad, create_graph,
                               root_grads, allow_unused, plain)
        if task.callbacks:
            task.run_callbacks()
        return result
    finally:
        _TASKS.pop()
        _WITH_INPUTS.pop()
        GradState.enabled = prev_enabled
