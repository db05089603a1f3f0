"""In-place writes the recorder turns into graph values: writes into views of the graph's own tensors
(``h[:, -1] = 0``), and writes into tensors the call made itself (``mask = torch.zeros(t); mask[:, 0] = 1``,
``out = torch.empty(b, n); out[:, i] = ...``), which used to be graph breaks.

A write ``op_(view, *args)`` becomes ``new = op(view, *args)`` (the row's functional form, cast back into the
view's dtype and shape as the in-place op does: `functionalize.record_functional_write`, shared with module
buffer writes) and, for a view, ``new_base = copy_slices(base, new, chain)``; later reads of the view and of its
base read those nodes. A tensor the call made is a graph constant holding its value from before the first write;
the base's live views (the written one too) see the write, as in eager mode, each taken again from the new base
(an unused one is dead code: the last ``slice`` below). Under autograd
the compiled training path traces the call again (`training.joint_for`) and `functionalize_view_writes` does the
same on its joint graph.

>>> import jitorch
>>> from jitorch._compile.trace import trace
>>> def f(x):
...     out = jitorch.zeros(x.shape[0], 2)
...     out[:, 1] = x.sum(1)
...     return out
>>> t = trace(f, (jitorch.ones(3, 4),), {})
>>> t.break_reason, [n.target.__name__ for n in t.gm.graph.nodes if n.op == "call_function"]
(None, ['sum', 'slice', 'copy', 'copy_slices', 'slice'])
>>> t.gm(jitorch.ones(3, 4)).tolist()
[[0.0, 4.0], [0.0, 4.0], [0.0, 4.0]]
"""
from __future__ import annotations

from .._tensor import Tensor
from ..autograd.grad_mode import GradState
from ..fx.make_fx import Primitive, _primitive, view_nodes
from ..fx.node import Node
from .functionalize import RANDOM_ROWS, _made_here, functional_ops, record_functional_write

__all__ = ["NOT_FUNCTIONAL", "functional_write", "functionalize_view_writes", "is_view"]

NOT_FUNCTIONAL = object()
def functional_write(rec, op, t, args, attrs):
    """Record ``op_(t, *args)`` as graph values and run it (the call's own effect); `NOT_FUNCTIONAL` when the write
    must stay a graph break (nothing has run then)."""
    base = t if t._base is None else t._base
    if t._base is not None and (t._view_chain is None or base._base is not None):
        return NOT_FUNCTIONAL
    local = rec.local(base) is not None
    made = id(base) in rec.info.created
    if t is base and (local or not made) or not (local or made):
        return NOT_FUNCTIONAL  # a whole graph tensor takes the in-place node path; inputs and outside tensors break
    others = [obj for (table, _), ref in list(rec._refs.items())
              if table == "nodes" and (obj := ref()) is not None and obj is not t and obj is not base
              and obj._base is base]
    if any(o._view_chain is None for o in others):
        return NOT_FUNCTIONAL
    base_node = rec.arg(base)
    if made and not local:
        # The graph's constant is the tensor's value before this first write, not the tensor (written below).
        for i, obj in enumerate(rec.ext_objs):
            if obj is base:
                rec.ext_objs[i] = Tensor._make(base._data.copy())
    view_node = rec.arg(t) if t is not base else base_node
    new_view = record_functional_write(rec, op, t, view_node, args, attrs)
    rec._note_grad(op, (t, base))  # an inference graph cannot stand for a write autograd follows
    graph = rec.seg.graph
    if t is not base:
        new_base = _step(rec, graph.call_function(_primitive("copy_slices"), (base_node, new_view),
                                                  {"chain": t._view_chain}))
        rec.bind(base, new_base)
        # The written view too is taken again from the new base (not left as the write's value), so a later in-place
        # write of the base reaches it, as in eager mode; the other views see the write the same way.
        for other in [t] + others:
            rec.bind(other, [_step(rec, n) for n in view_nodes(graph, new_base, other._view_chain)][-1])
    return t


def _step(rec, node):
    node.meta["step"], node.meta["grad"] = len(rec.seg.steps), GradState.enabled
    rec.seg.steps.append((node, node))
    return node


def functionalize_view_writes(gm):
    """A joint graph's forward writes into views of its own values (after make_fx: ``fill_(slice(clone(m)))``) as
    ``copy_slices(base, op(view), chain)``, later readers of the base reading the new value; returns how many.

    Only where no other view of the base is read after the write (it would see the write in eager mode) and the
    view is a chain of view ops over a value the graph made. The whole-tensor case is `functionalize_intermediates`.
    """
    done, graph = 0, gm.graph
    for node in list(graph.nodes):
        target = node.target
        if not (node.op == "call_function" and isinstance(target, Primitive) and target.inplace and node.args
                and node.meta.get("phase", "forward") == "forward"):
            continue
        chain, views, base = [], [], node.args[0]
        while is_view(base):
            chain.append((base.target.op, dict(base.kwargs)))
            views.append(base)
            base = base.args[0]
        if not chain or not _made_here(base) or target.op in RANDOM_ROWS:
            continue
        order = {n: i for i, n in enumerate(graph.nodes)}
        if any(order[u] > order[node] for u in _other_views(base, views, order, order[node])):
            continue  # another view of the base taken before the write is read after it
        names = functional_ops(target.op)
        with graph.inserting_before(node):
            new = graph.call_function(_primitive(names[0]), node.args, dict(node.kwargs))
            new.meta = dict(node.meta)
            if len(names) > 1:  # the view's shape and dtype, as the in-place op keeps them
                new = graph.call_function(_primitive("copy"), (node.args[0], new))
                new.meta = dict(node.meta)
            new_base = graph.call_function(_primitive("copy_slices"), (base, new), {"chain": tuple(reversed(chain))})
            new_base.meta = dict(base.meta)
            # The written view and the views it was taken through, read after the write (``h = y[:, :2]``;
            # ``h[:, 0] = 1``; ``return h``), are taken again from the new base: they see the write, as in eager.
            derived, cur = {}, new_base
            for v in reversed(views):
                cur = graph.call_function(v.target, (cur,) + tuple(v.args[1:]), dict(v.kwargs))
                cur.meta = dict(v.meta)
                derived[v] = cur
        for v in views:
            for user in list(v.users):
                if user is not node and order.get(user, -1) > order[node]:
                    user.replace_input_with(v, derived[v])
        for user in list(base.users):
            if user is not new_base and order.get(user, -1) > order[node]:
                user.replace_input_with(base, new_base)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        done += 1
    return done


def is_view(node):
    """Whether ``node`` is an out-of-place view row of the graph (slice, transpose, view...)."""
    return isinstance(node, Node) and node.op == "call_function" and isinstance(node.target, Primitive) and \
        node.target.op.view and not node.target.inplace and bool(node.args)


def _other_views(base, chain, order, before):
    """Every reader of a view of ``base`` (views of views too, and views of the chain's own views: ``k = a[:, :2]``
    beside the written ``a[:, 1:3]``) taken before position ``before``, outside ``chain`` (views taken after the
    write are views of the new value: they are rewired to it)."""
    out, stack = [], [u for v in [base, *chain] for u in v.users if is_view(u) and u not in chain
                      and order[u] < before]
    while stack:
        v = stack.pop()
        for u in v.users:
            (stack if is_view(u) else out).append(u)
    return out
