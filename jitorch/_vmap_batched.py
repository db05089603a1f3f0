"""``vmap``'s batched path: trace one sample's primitives, then run that graph once over the whole batch.

`_vmap.vmap` runs ``func`` once per sample. For batches of 8 and more it first tries this path: ``make_fx`` records
the op-table primitives ``func`` runs on the first sample (a per-sample gradient ``vmap(grad(loss))`` records its
backward too, as primitives), and an interpreter runs each node once on tensors that carry the batch in front. Each
node's batching rule sees the per-sample ("logical") shapes and rewrites the call for the physical ones: elementwise
rows broadcast the batch, reductions, softmax, views and ``cat`` shift their dims by one, ``linear`` and ``matmul``
batch through their leading dims. A row without a rule runs once per sample on that node alone (PyTorch's fallback
for an op without a batching rule). Anything the graph cannot stand for sends the whole call back to the loop,
before any output is made: a read of a value (``.item()``, a branch on data: the trace raises), a random draw, an
in-place write, an input that requires grad, an output that is not a tensor, an active dispatch mode (a trace or
capture records the loop's ops, as before). The rules live in `_vmap_rules`.

>>> import jitorch
>>> from jitorch.utils._pytree import tree_flatten
>>> leaves, spec = tree_flatten((jitorch.arange(24.0).reshape(8, 3),))
>>> run_batched(lambda r: (r * r).sum(), leaves, [0], spec, {}, 8, 0)
tensor([   5.,   50.,  149.,  302.,  509.,  770., 1085., 1454.])
"""
from __future__ import annotations

import operator

from ._dispatch_modes import MODES
from ._tensor import Tensor
from .autograd.grad_mode import is_grad_enabled
from ._vmap_rules import RULES, Bail, Batched, has_batched, padded, pointwise, reduction, wrap
from .ops.table import Pointwise, Reduction
from .utils._pytree import tree_flatten, tree_unflatten

__all__ = ["run_batched", "MIN_BATCH"]

MIN_BATCH = 8  # the trace costs about four samples' eager runs: below this the loop is as fast
_RANDOM_ROWS = {"bernoulli_mask", "uniform_sample", "normal_sample", "integer_sample", "bernoulli_sample"}


def run_batched(func, leaves, dims, spec, kwargs, size, out_dims):
    """``func`` over the batch as one traced graph, or None when it must run sample by sample (see the module)."""
    from .fx.make_fx import record_graph
    from ._vmap import _broadcast, _structure_error

    # Under a mode (a trace, a capture, autocast) the loop's per-sample ops are what that mode should see, not this
    # path's extra trace.
    if MODES or any(isinstance(x, Tensor) and x.requires_grad for x in leaves):
        return None
    tensors = [i for i, d in enumerate(dims) if d is not None]
    batched = {i: leaves[i].movedim(dims[i], 0) for i in tensors}
    sample = [batched[i][0] if i in batched else x for i, x in enumerate(leaves)]

    def flat(*args):
        return func(*tree_unflatten(list(args), spec), **kwargs)

    try:
        graph, root = record_graph(flat, sample, refuse_value_reads=True, metadata=False,
                                   refuse_outside_writes=True)
        out = _interpret(graph, root, [Batched(batched[i]) if i in batched else x for i, x in enumerate(leaves)], size)
    except Exception:  # noqa: BLE001 - a value read while tracing (data-dependent Python), a row the rules do not
        # cover as traced, or the user's own error: the loop runs such code, and raises the user's errors as vmap's
        return None
    out_leaves, out_spec = tree_flatten(out)
    name = getattr(func, "__name__", repr(func))
    first = tree_unflatten(out_leaves, out_spec)  # the structure alone: out_dims must match it
    if isinstance(out_dims, tuple) and len(out_dims) == 1 and len(out_leaves) == 1:
        out_dims = out_dims[0]
    per_out = _broadcast(out_dims, first, _structure_error(f"vmap({name}, ..., out_dims={out_dims})(<inputs>)",
                                                           "out_dims", "outputs"))
    result = []
    for v, d in zip(out_leaves, per_out):
        if d is None or not isinstance(v, (Tensor, Batched)):
            return None  # the loop gives torch's errors (a batched output with out_dims None, a non-tensor)
        t = v.t if isinstance(v, Batched) else v.unsqueeze(0).expand((size,) + tuple(v.shape)).contiguous()
        if not -t.dim() <= d < t.dim():
            return None
        result.append(t.movedim(0, d % t.dim()))
    return tree_unflatten(result, out_spec)


def _interpret(graph, root, inputs, size):
    from .fx.make_fx import Primitive

    env = {}
    placeholders = iter(inputs)
    for node in graph.nodes:
        if node.op == "placeholder":
            env[node] = next(placeholders)
        elif node.op == "get_attr":
            value = operator.attrgetter(node.target)(root)
            if isinstance(value, Tensor) and value.requires_grad and is_grad_enabled():
                raise Bail  # a closed-over tensor that requires grad: the loop keeps its graph
            env[node] = value
        elif node.op == "call_function":
            args = _load(node.args, env)
            kwargs = _load(node.kwargs, env)
            target = node.target
            if isinstance(target, Primitive):
                if target.op.name in _RANDOM_ROWS:
                    raise Bail
                env[node] = _write(target, node, args, kwargs) if target.inplace else \
                    _call_row(target, args, kwargs, size)
            elif target is operator.getitem and isinstance(args[0], (tuple, list, dict)):
                env[node] = args[0][args[1]]
            elif has_batched((args, kwargs)):
                raise Bail
            else:
                env[node] = target(*args, **kwargs)
        elif node.op == "output":
            return _load(node.args[0], env)
        else:
            raise Bail
    raise Bail


def _write(prim, node, args, kwargs):
    """An elementwise in-place op (``ReLU(inplace=True)``, ``h.add_(1)``) on a batched value the function computed
    itself and no view shares: the same write on the batched tensor. Anything else keeps the loop: a batch-wide
    view may be a copy here (``reshape``), so a write through an alias would not reach its base."""
    from .fx.make_fx import Primitive

    def is_view(n):
        return isinstance(n.target, Primitive) and n.target.op.view

    target, written = args[0], node.args[0]
    if not (isinstance(target, Batched) and isinstance(prim.op.fusion, Pointwise)
            and isinstance(written.target, Primitive) and not is_view(written)
            and not any(is_view(u) for u in written.users)):
        raise Bail
    rank = target.rank
    prim(target.t, *[padded(a, rank) if isinstance(a, Batched) else a for a in args[1:]],
         **{k: padded(v, rank) if isinstance(v, Batched) else v for k, v in kwargs.items()})
    return target


def _load(value, env):
    if isinstance(value, (tuple, list)):
        loaded = [_load(v, env) for v in value]
        return type(value)(loaded) if not hasattr(value, "_fields") else type(value)(*loaded)
    if isinstance(value, dict):
        return {k: _load(v, env) for k, v in value.items()}
    if type(value).__name__ == "Node":
        return env[value]
    return value


def _call_row(prim, args, kwargs, size):
    if not has_batched((args, kwargs)):
        return prim(*args, **kwargs)
    op = prim.op
    rule = RULES.get(op.name)
    if rule is None and isinstance(op.fusion, Pointwise):
        rule = pointwise
    elif rule is None and isinstance(op.fusion, Reduction) and len(args) == 1:
        rule = reduction
    if rule is not None:
        out = rule(prim, args, kwargs, size)
        if out is not NotImplemented:
            return out
    return _per_sample(prim, args, kwargs, size)


def _per_sample(prim, args, kwargs, size):
    """The node once per sample, results stacked: right for any row, at a Python loop's cost."""
    from ._movement import stack

    def pick(value, i):
        if isinstance(value, Batched):
            return value.t[i]
        if isinstance(value, (tuple, list)):
            return type(value)(pick(v, i) for v in value)
        if isinstance(value, dict):
            return {k: pick(v, i) for k, v in value.items()}
        return value

    outs = [prim(*pick(args, i), **pick(kwargs, i)) for i in range(size)]
    first = outs[0]
    if isinstance(first, Tensor):
        return Batched(stack(outs, 0))
    if isinstance(first, tuple) and all(isinstance(o, Tensor) for o in first):
        stacked = [stack([o[j] for o in outs], 0) for j in range(len(first))]
        return wrap(type(first)(*stacked) if hasattr(first, "_fields") else tuple(stacked))
    raise Bail
