"""A compiled training call as eager autograd sees it: one `jitorch.autograd.Function` running the compiled forward
now and the compiled backward when gradients arrive (a double backward differentiates an eager rerun), and the
checks that make its outputs behave as eager ones (outputs cut from history-less bases, outputs eager autograd
saves, outputs that view one another).

Split from ``training.py`` (whose `TrainingPlan` calls `_CompiledTraining`).

>>> import jitorch
>>> as_output_dtypes([jitorch.ones(2, dtype=jitorch.float64), None], [jitorch.float32, jitorch.float32])
(tensor([1., 1.]), None)
"""
from __future__ import annotations

from .._tensor import Tensor
from ..autograd import grad as autograd_grad
from ..autograd.function import Function
from ..autograd.grad_mode import GradState, enable_grad
from ..fx.make_fx import Primitive
from ..fx.node import Node
from ..utils._pytree import tree_flatten
from .backend import write_back
from .functionalize import CompileState, rng_state, set_rng_state
from .view_writes import is_view

__all__ = ["as_output_dtypes", "eager_saved_outputs", "own_outputs"]


def own_outputs(outs, inputs):
    """Outputs of a compiled forward as tensors of their own: a view of one of the graph's intermediates (the Python
    runner's slice of a product) is cut from that base, which has no autograd history; the native runner's outputs
    never have one. Otherwise an in-place write into the output would rebase it on the history-less base and lose
    the Function's gradient. Views of an input (or of an input's base) or of another output keep their base."""
    keep = {id(a) for a in inputs if isinstance(a, Tensor)}
    keep |= {id(a._base) for a in inputs if isinstance(a, Tensor) and a._base is not None}
    keep |= {id(o) for o in outs if isinstance(o, Tensor)}
    return tuple(Tensor._make(o._data) if isinstance(o, Tensor) and o.__dict__.get("_base") is not None
                 and id(o._base) not in keep else o for o in outs)


def eager_saved_outputs(gm, n_outs):
    """Indices of the first ``n_outs`` outputs of ``gm`` that eager autograd keeps for the backward: made (through
    views) by a row that saves its output (``exp``, ``tanh``, ``softmax``...). Eagerly, a write into such a value
    before the backward raises; the compiled backward recomputes it or keeps its own copy, so the compiled Function
    saves these outputs too, and the same write raises there."""
    found = []
    for i, o in enumerate(_output_nodes(gm, n_outs)):
        made = (_view_chain(o) or [o])[-1]
        if isinstance(made, Node) and made.op == "call_function" and isinstance(made.target, Primitive) and \
                made.target.op.saves in ("outputs", "both") and not made.target.inplace:
            found.append(i)
    return tuple(found)


def as_output_dtypes(grads, dtypes):
    """Upstream gradients in their outputs' dtypes: the engine hands a root gradient over as the caller gave it
    (``out64.backward(grad32)``), and the compiled backward reads its memory as the traced tangent's dtype."""
    return tuple(g if g is None or g.dtype == d else g.to(d) for g, d in zip(grads, dtypes))


class _CompiledTraining(Function):
    """One call of a `TrainingPlan`: the compiled forward now, the compiled backward when gradients arrive."""

    _eager_views = True  # a compiled region: its returned views behave as eager views

    @staticmethod
    def forward(ctx, plan, *flat):
        # A double backward reruns the function eagerly: it must draw the masks this forward draws.
        ctx.rng = None
        if plan.random:
            ctx.rng = rng_state(cuda=any(isinstance(a, Tensor) and a.is_cuda for a in flat))
        res = plan.fwd(flat)
        n, k = plan.n_outs, len(plan.writes)
        res = own_outputs(res[:n], flat) + tuple(res[n:])
        if not all(plan.diff):
            # A non-differentiable output is a tensor of its own even when the graph returns the same value twice
            # (``loss, loss.detach()``): marking it must not mark the differentiable one.
            res = tuple(Tensor._make(o._data) if i < n and not plan.diff[i] else o for i, o in enumerate(res))
        write_back(plan.writes, res[n:n + k])
        ctx.plan = plan
        ctx.dtypes = tuple(o.dtype for o, d in zip(res[:n], plan.diff) if d)
        ctx.mark_non_differentiable(*(o for o, d in zip(res[:n], plan.diff) if not d))
        # Saved through save_for_backward so an in-place change before backward raises, as in eager autograd; the
        # outputs eager autograd would keep too (their values are not what the compiled backward reads).
        checked = [res[i] for i in plan.eager_saved]
        ctx.n_checked = len(checked)
        # Non-tensor arguments (a flag, a count in a tuple of inputs) are kept aside: only tensors are saved.
        ctx.others = [(i, a) for i, a in enumerate(flat) if not isinstance(a, Tensor)]
        ctx.n_flat = len(flat) - len(ctx.others)
        ctx.save_for_backward(*(a for a in flat if isinstance(a, Tensor)), *res[n + k:], *checked)
        return res[:n] if plan.tuple_out or n > 1 else res[0]

    @staticmethod
    def backward(ctx, *grads):
        plan = ctx.plan
        saved = ctx.saved_tensors
        flat, saved_values = list(saved[:ctx.n_flat]), saved[ctx.n_flat:len(saved) - ctx.n_checked]
        for i, a in ctx.others:
            flat.insert(i, a)
        grads = as_output_dtypes([g for g, d in zip(grads, plan.diff) if d], ctx.dtypes)
        if GradState.enabled:
            # The engine turns grad mode on for a backward exactly when create_graph=True; the compiled backward
            # builds no graph, so differentiate an eager rerun instead.
            # The rerun draws the forward's numbers and leaves the generators and buffers as they are now.
            now = CompileState(plan.writes)
            if ctx.rng is not None:
                set_rng_state(ctx.rng)
            try:
                with enable_grad():
                    outs = [o for o in tree_flatten(plan.eager(flat))[0] if isinstance(o, Tensor)]
                    outs = [o for o, d in zip(outs, plan.diff) if d]
                    wrt = [flat[i] for i in plan.wrt]
                    got = autograd_grad(outs, wrt, grad_outputs=list(grads), create_graph=True, allow_unused=True)
            finally:
                now.restore()
        else:
            got = plan.bwd(tuple(saved_values) + tuple(grads))
        full = [None] * len(flat)
        for i, g in zip(plan.wrt, got):
            full[i] = g
        return (None, *full)


def _output_nodes(gm, n_outs):
    """The first ``n_outs`` outputs of ``gm`` (nodes, or constants)."""
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    return list(out[:n_outs]) if isinstance(out, (tuple, list)) else [out]


def _view_chain(node):
    """The nodes ``node`` views through view rows, nearest first (empty when it is not a view)."""
    chain = []
    while is_view(node):
        node = node.args[0]
        chain.append(node)
    return chain


def _view_roots(gm, n_outs):
    """``(outputs, {output: the nodes it views through view rows, nearest first})`` of ``gm``'s first outputs."""
    outs = [o for o in _output_nodes(gm, n_outs) if isinstance(o, Node)]
    return set(outs), {o: _view_chain(o) for o in outs}


def _aliased_outputs(gm, n_outs):
    """Whether one of the first ``n_outs`` outputs of ``gm`` is a view (through view rows) of another of them."""
    mine, chains = _view_roots(gm, n_outs)
    return any(n in mine for chain in chains.values() for n in chain)


def _sibling_outputs(gm, n_outs):
    """Two outputs viewing one intermediate that is not an output (``y[:, :2], y[:, 1:3]``): compiled outputs are
    cut from such a base, so a write into one would not reach the other's gradient."""
    mine, chains = _view_roots(gm, n_outs)
    roots = [chain[-1] for o, chain in chains.items() if chain and chain[-1] not in mine
             and chain[-1].op != "placeholder"]
    return len(roots) != len(set(roots))
