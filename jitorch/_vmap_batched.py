"""``vmap``'s batched path: trace one sample's primitives, then run that graph once over the whole batch.

`_vmap.vmap` runs ``func`` once per sample. For batches of 8 and more it first tries this path: ``make_fx`` records
the op-table primitives ``func`` runs on the first sample (a per-sample gradient ``vmap(grad(loss))`` records its
backward too, as primitives), and an interpreter runs each node once on tensors that carry the batch in front. Each
node's batching rule sees the per-sample ("logical") shapes and rewrites the call for the physical ones: elementwise
rows broadcast the batch, reductions, softmax, views and ``cat`` shift their dims by one, ``linear`` and ``matmul``
batch through their leading dims. A row without a rule runs once per sample on that node alone (PyTorch's fallback
for an op without a batching rule). Anything the graph cannot stand for sends the whole call back to the loop,
before any output is made: a read of a value (``.item()``, a branch on data, even an input check: the trace
raises), a random draw (refused, drawing nothing), an in-place write into an input, a captured tensor or through a
view (elementwise writes into the function's own values stay batched), a captured tensor or input that requires
grad, an output that is not a tensor, an active dispatch mode (a trace or capture records the loop's ops, as
before). As a net under the rules, the last sample is also run on its own and must agree with the graph's answer
for it (code that reads values outside the op table, ``Tensor._make`` over ``._data``, is invisible to the trace).
The rules live in `_vmap_rules`.

>>> import jitorch
>>> from jitorch.utils._pytree import tree_flatten
>>> leaves, spec = tree_flatten((jitorch.arange(24.0).reshape(8, 3),))
>>> run_batched(lambda r: (r * r).sum(), leaves, [0], spec, {}, 8, 0)
tensor([   5.,   50.,  149.,  302.,  509.,  770., 1085., 1454.])
"""
from __future__ import annotations

import operator

from . import _vmap_cache
from ._dispatch_modes import MODES
from ._tensor import Tensor
from ._vmap_taint import SampleMode
from ._vmap_rules import RULES, Bail, Batched, has_batched, pointwise, pointwise_operands, reduction, wrap
from .fx.node import Node
from .ops.table import Pointwise, Reduction
from .utils._pytree import tree_flatten, tree_unflatten

__all__ = ["run_batched", "MIN_BATCH"]

MIN_BATCH = 8  # the trace costs about four samples' eager runs: below this the loop is as fast
_RANDOM_ROWS = {"bernoulli_mask", "uniform_sample", "normal_sample", "integer_sample", "bernoulli_sample"}


def run_batched(func, leaves, dims, spec, kwargs, size, out_dims):
    """``func`` over the batch as one traced graph, or None when it must run sample by sample (see the module)."""
    from .fx.make_fx import record_graph
    from ._vmap import _name, _output_dims

    # Under a mode (a trace, a capture, autocast) the loop's per-sample ops are what that mode should see, not this
    # path's extra trace. An outer vmap's first sample (`SampleMode`) sees this path's ops as it sees any others.
    if any(not isinstance(m, SampleMode) for m in MODES) or \
            any(isinstance(x, Tensor) and x.requires_grad for x in leaves):
        return None
    tensors = [i for i, d in enumerate(dims) if d is not None]
    batched = {i: leaves[i].movedim(dims[i], 0) for i in tensors}
    sample = [batched[i][0] if i in batched else x for i, x in enumerate(leaves)]

    def flat(*args):
        return func(*tree_unflatten(list(args), spec), **kwargs)

    entry, guards = _vmap_cache.lookup(func, leaves, dims, spec, kwargs, size)
    if entry is not None and entry.graph is None:
        return None  # this call, as traced before, runs sample by sample
    try:
        if entry is None:
            graph, root = record_graph(flat, sample, refuse_value_reads=True, metadata=False,
                                       refuse_outside_writes=True, strict_reads=True)
        else:
            graph, root = entry.graph, entry.root
        out = _interpret(graph, root, [Batched(batched[i]) if i in batched else x for i, x in enumerate(leaves)], size)
    except Exception:  # noqa: BLE001 - a value read while tracing (data-dependent Python), a row the rules
        # do not cover as traced, or the user's own error: the loop runs such code, and raises the user's errors
        _vmap_cache.remember(func, spec, guards)
        return None
    out_leaves, out_spec = tree_flatten(out)
    # The structure alone matters to out_dims: a batched value stands in as its batch-wide tensor.
    first = tree_unflatten([v.t if isinstance(v, Batched) else v for v in out_leaves], out_spec)
    per_out = _output_dims(_name(func), out_dims, first)
    result = []
    for v, d in zip(out_leaves, per_out):
        if not isinstance(v, (Tensor, Batched)) or (d is None and isinstance(v, Batched)):
            return None  # the loop gives torch's errors (a batched output with out_dims None, a non-tensor)
        if d is None:
            result.append(v)
            continue
        t = v.t if isinstance(v, Batched) else v.unsqueeze(0).expand((size,) + tuple(v.shape)).contiguous()
        if not -t.dim() <= d < t.dim():
            return None
        result.append(t.movedim(0, d % t.dim()))
    if not _last_sample_agrees(func, spec, kwargs, leaves, batched, size, result, per_out):
        _vmap_cache.remember(func, spec, guards)
        return None
    if entry is None:
        _vmap_cache.remember(func, spec, guards, graph, root)
    return tree_unflatten(result, out_spec)


def _last_sample_agrees(func, spec, kwargs, leaves, batched, size, result, per_out):
    """The last sample run on its own gives what the graph gave it: a net under the rules for code that reads a
    tensor's values outside the op table (``Tensor._make`` over an array computed from ``._data``), which the trace
    cannot see and would keep as the first sample's constant."""
    sample = [batched[i][size - 1] if i in batched else x for i, x in enumerate(leaves)]
    try:
        want = tree_flatten(func(*tree_unflatten(sample, spec), **kwargs))[0]
    except Exception:  # noqa: BLE001 - that sample's own error: the loop raises it as vmap's
        return False
    if len(want) != len(result):
        return False
    for got, w, d in zip(result, want, per_out):
        got = got if d is None else got.select(d, size - 1)
        if not isinstance(w, Tensor) or tuple(got.shape) != tuple(w.shape) or got.dtype != w.dtype:
            return False
        if got.numel() and not bool(got.detach().isclose(w.detach(), rtol=1e-4, atol=1e-5, equal_nan=True).all()):
            return False
    return True


def _interpret(graph, root, inputs, size):
    from .fx.make_fx import Primitive

    env = {}
    placeholders = iter(inputs)
    for node in graph.nodes:
        if node.op == "placeholder":
            env[node] = next(placeholders)
        elif node.op == "get_attr":
            value = operator.attrgetter(node.target)(root)
            if isinstance(value, Tensor) and value.requires_grad:
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
    physical, kw = pointwise_operands(prim, args, kwargs, target.rank)
    prim(*physical, **kw)
    return target


def _load(value, env):
    if isinstance(value, (tuple, list)):
        loaded = [_load(v, env) for v in value]
        return type(value)(loaded) if not hasattr(value, "_fields") else type(value)(*loaded)
    if isinstance(value, dict):
        return {k: _load(v, env) for k, v in value.items()}
    if isinstance(value, Node):
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
