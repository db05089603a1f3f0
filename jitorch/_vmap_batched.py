"""``vmap``'s batched path: trace one sample's primitives, then run that graph once over the whole batch.

`_vmap.vmap` runs ``func`` once per sample. For batches of 8 and more it first tries this path: ``make_fx`` records
the op-table primitives ``func`` runs on the first sample (a per-sample gradient ``vmap(grad(loss))`` records its
backward too, as primitives), and an interpreter runs each node once on tensors that carry the batch in front. Each
node's batching rule sees the per-sample ("logical") shapes and rewrites the call for the physical ones: elementwise
rows broadcast the batch, reductions, softmax, views and ``cat`` shift their dims by one, ``linear`` and ``matmul``
batch through their leading dims. A row without a rule runs once per sample on that node alone (PyTorch's fallback
for an op without a batching rule). Anything the graph cannot stand for sends the whole call back to the loop,
before any output is made: a read of a value (``.item()``, a branch on data: the trace raises), a random draw, an
in-place write, an input that requires grad, an output that is not a tensor.

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
from .ops.table import Pointwise, Reduction
from .utils._pytree import tree_flatten, tree_unflatten

__all__ = ["run_batched", "MIN_BATCH"]

MIN_BATCH = 8  # the trace costs about four samples' eager runs: below this the loop is as fast
_RANDOM_ROWS = {"bernoulli_mask", "uniform_sample", "normal_sample", "integer_sample", "bernoulli_sample"}


class _Bail(Exception):
    """The graph cannot stand for ``func`` over the batch: run the per-sample loop instead."""


class _Batched:
    """A value with the batch in dim 0 of ``t``; the sample's own shape is ``t.shape[1:]``."""

    __slots__ = ("t",)

    def __init__(self, t):
        self.t = t

    @property
    def rank(self):
        return self.t.dim() - 1


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
        graph, root = record_graph(flat, sample, refuse_value_reads=True)
        out = _interpret(graph, root, [_Batched(batched[i]) if i in batched else x for i, x in enumerate(leaves)], size)
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
        if d is None or not isinstance(v, (Tensor, _Batched)):
            return None  # the loop gives torch's errors (a batched output with out_dims None, a non-tensor)
        t = v.t if isinstance(v, _Batched) else v.unsqueeze(0).expand((size,) + tuple(v.shape)).contiguous()
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
                raise _Bail  # a closed-over tensor that requires grad: the loop keeps its graph
            env[node] = value
        elif node.op == "call_function":
            args = _load(node.args, env)
            kwargs = _load(node.kwargs, env)
            target = node.target
            if isinstance(target, Primitive):
                if target.inplace or target.op.name in _RANDOM_ROWS:
                    raise _Bail
                env[node] = _call_row(target, args, kwargs, size)
            elif target is operator.getitem and isinstance(args[0], (tuple, list, dict)):
                env[node] = args[0][args[1]]
            elif _has_batched((args, kwargs)):
                raise _Bail
            else:
                env[node] = target(*args, **kwargs)
        elif node.op == "output":
            return _load(node.args[0], env)
        else:
            raise _Bail
    raise _Bail


def _load(value, env):
    if isinstance(value, (tuple, list)):
        loaded = [_load(v, env) for v in value]
        return type(value)(loaded) if not hasattr(value, "_fields") else type(value)(*loaded)
    if isinstance(value, dict):
        return {k: _load(v, env) for k, v in value.items()}
    if type(value).__name__ == "Node":
        return env[value]
    return value


def _has_batched(value):
    if isinstance(value, _Batched):
        return True
    if isinstance(value, (tuple, list)):
        return any(_has_batched(v) for v in value)
    if isinstance(value, dict):
        return any(_has_batched(v) for v in value.values())
    return False


def _call_row(prim, args, kwargs, size):
    if not _has_batched((args, kwargs)):
        return prim(*args, **kwargs)
    op = prim.op
    rule = _RULES.get(op.name)
    if rule is None and isinstance(op.fusion, Pointwise):
        rule = _pointwise
    elif rule is None and isinstance(op.fusion, Reduction) and len(args) == 1:
        rule = _reduction
    if rule is not None:
        out = rule(prim, args, kwargs, size)
        if out is not NotImplemented:
            return out
    return _per_sample(prim, args, kwargs, size)


def _wrap(out):
    if isinstance(out, Tensor):
        return _Batched(out)
    if isinstance(out, tuple):
        wrapped = [_wrap(o) for o in out]
        return type(out)(*wrapped) if hasattr(out, "_fields") else tuple(wrapped)
    raise _Bail


def _per_sample(prim, args, kwargs, size):
    """The node once per sample, results stacked: right for any row, at a Python loop's cost."""
    from ._movement import stack

    def pick(value, i):
        if isinstance(value, _Batched):
            return value.t[i]
        if isinstance(value, (tuple, list)):
            return type(value)(pick(v, i) for v in value)
        if isinstance(value, dict):
            return {k: pick(v, i) for k, v in value.items()}
        return value

    outs = [prim(*pick(args, i), **pick(kwargs, i)) for i in range(size)]
    first = outs[0]
    if isinstance(first, Tensor):
        return _Batched(stack(outs, 0))
    if isinstance(first, tuple) and all(isinstance(o, Tensor) for o in first):
        stacked = [stack([o[j] for o in outs], 0) for j in range(len(first))]
        return _wrap(type(first)(*stacked) if hasattr(first, "_fields") else tuple(stacked))
    raise _Bail


def _rank(value):
    return value.rank if isinstance(value, _Batched) else value.dim() if isinstance(value, Tensor) else 0


def _padded(value, rank):
    """A batched value as ``(B, 1, ..., *sample)`` with ``rank`` sample dims, so it broadcasts as the sample did."""
    t = value.t
    missing = rank - value.rank
    return t.reshape((t.shape[0],) + (1,) * missing + tuple(t.shape[1:])) if missing > 0 else t


def _pointwise(prim, args, kwargs, size):
    rank = max(_rank(a) for a in list(args) + list(kwargs.values()))

    def physical(v):
        return _padded(v, rank) if isinstance(v, _Batched) else v

    return _wrap(prim(*[physical(a) for a in args], **{k: physical(v) for k, v in kwargs.items()}))


def _expanded(value, size):
    """Every tensor argument batched (an unbatched one expanded over the batch), for rows whose inputs share a
    shape."""
    if isinstance(value, _Batched):
        return value.t
    if isinstance(value, Tensor):
        return value.unsqueeze(0).expand((size,) + tuple(value.shape))
    if isinstance(value, (tuple, list)):
        return type(value)(_expanded(v, size) for v in value)
    return value


def _shift(name):
    """Rows whose ``name`` attribute (a dim or a tuple of dims, already non-negative in the trace) counts the
    sample's dims: the batch in front moves them by one."""
    def rule(prim, args, kwargs, size):
        value = kwargs.get(name)
        if value is None or isinstance(value, bool):
            return NotImplemented
        shifted = tuple(d + 1 for d in value) if isinstance(value, (tuple, list)) else value + 1
        return _wrap(prim(*[_expanded(a, size) for a in args], **{**kwargs, name: shifted}))
    return rule


def _reduction(prim, args, kwargs, size):
    (a,) = args
    if "dims" in kwargs:
        dims = kwargs["dims"]
        dims = tuple(range(a.rank)) if dims is None else dims
        return _wrap(prim(a.t, **{**kwargs, "dims": tuple(d + 1 for d in dims)}))
    return _shift("dim")(prim, args, kwargs, size)


def _prepend(name, lead):
    def rule(prim, args, kwargs, size):
        if not isinstance(args[0], _Batched) or _has_batched((args[1:], kwargs)):
            return NotImplemented
        return _wrap(prim(args[0].t, *args[1:], **{**kwargs, name: lead(args[0], kwargs[name])}))
    return rule


def _view(prim, args, kwargs, size):
    (a,) = args
    return _Batched(a.t.reshape((size,) + tuple(kwargs["shape"])))


def _expand(prim, args, kwargs, size):
    (a,) = args
    shape = tuple(kwargs["shape"])
    return _Batched(prim(_padded(a, len(shape)), **{**kwargs, "shape": (size,) + shape}))


def _matmul(prim, args, kwargs, size):
    a, b = args
    ra, rb = _rank(a), _rank(b)
    if ra == 0 or rb == 0:
        return NotImplemented
    batch_rank = max(ra, 2) - 2, max(rb, 2) - 2
    target = max(batch_rank)

    def physical(v, r, vector_axis):
        if not isinstance(v, _Batched):
            return v
        t = v.t.unsqueeze(vector_axis) if r == 1 else v.t
        rank = max(r, 2)
        return t.reshape((size,) + (1,) * (target + 2 - rank) + tuple(t.shape[1:]))

    pa, pb = physical(a, ra, 1), physical(b, rb, 2)
    if pa.dim() >= 2 and pb.dim() >= 2 and pa.shape[-1] == 1 and pb.shape[-2] == 1:
        out = pa * pb  # a one-term product (per-sample weight gradients): an outer product, not B tiny GEMMs
    else:
        out = prim(pa, pb)
    # Only a batched vector was made a matrix here (torch drops an unbatched one's dim itself).
    if isinstance(b, _Batched) and rb == 1:
        out = out.squeeze(-1)
    if isinstance(a, _Batched) and ra == 1:
        out = out.squeeze(-1 if rb == 1 else -2)
    return _Batched(out)


def _linear(prim, args, kwargs, size):
    if _has_batched((args[1:], kwargs)):
        return NotImplemented
    return _Batched(prim(args[0].t, *args[1:], **kwargs))


def _last_dims(prim, args, kwargs, size):
    """Rows that work on the sample's trailing dims only (layer norm over the last ``k``, tril/triu)."""
    if not isinstance(args[0], _Batched) or _has_batched((args[1:], kwargs)):
        return NotImplemented
    return _wrap(prim(args[0].t, *args[1:], **kwargs))


def _rows_of(target, size):
    """(B, N) targets from a batched or shared (N,) target."""
    return _expanded(target, size).reshape(size, -1)


def _nll_loss(prim, args, kwargs, size):
    """The (N, C) rows of every sample as one (B * N, C) call with reduction 'none', reduced per sample."""
    logp = _expanded(args[0], size)
    reduction = kwargs["reduction"]
    n = logp.shape[1]
    rows = _rows_of(args[1], size)
    loss = prim(logp.reshape(size * n, -1), rows.reshape(-1), **{**kwargs, "reduction": "none"}).reshape(size, n)
    if reduction == "none":
        return _Batched(loss)
    total = loss.sum(1)
    if reduction == "sum":
        return _Batched(total)
    return _Batched(total / (rows != kwargs["ignore_index"]).sum(1).to(total.dtype))


def _nll_loss_backward(prim, args, kwargs, size):
    g, target = args
    n, classes = kwargs["shape"]
    rows = _rows_of(target, size)
    g = _expanded(g, size)
    if kwargs["reduction"] != "none":
        g = g.reshape(size, 1)
        if kwargs["reduction"] == "mean":  # an all-ignored sample: zero gradients, as the row's max(count, 1)
            g = g / (rows != kwargs["ignore_index"]).sum(1, keepdim=True).clamp(min=1).to(g.dtype)
        g = g.expand(size, n)
    out = prim(g.reshape(-1), rows.reshape(-1), **{**kwargs, "shape": (size * n, classes), "reduction": "none"})
    return _Batched(out.reshape(size, n, classes))


def _merge_leading(positions, shape_attr=None):
    """Rows that treat the sample's leading dim (a minibatch of its own: ``N`` of a convolution or pooling input)
    row by row: the batch and ``N`` merge into one leading dim for the call and split again after it. The tensors
    at ``positions`` may be batched, every other one must not be."""
    def rule(prim, args, kwargs, size):
        others = [a for i, a in enumerate(args) if i not in positions]
        if _has_batched((others, kwargs)):
            return NotImplemented
        lead = None
        merged = list(args)
        for i in positions:
            t = _expanded(args[i], size)
            if t.dim() < 2:
                return NotImplemented
            lead = t.shape[1]
            merged[i] = t.reshape((size * lead,) + tuple(t.shape[2:]))
        attrs = dict(kwargs)
        if shape_attr is not None:
            attrs[shape_attr] = (size * attrs[shape_attr][0],) + tuple(attrs[shape_attr][1:])
        out = prim(*merged, **attrs)
        split = [o.reshape((size, lead) + tuple(o.shape[1:])) for o in (out if isinstance(out, tuple) else (out,))]
        return _wrap(type(out)(split) if isinstance(out, tuple) and not hasattr(out, "_fields") else
                     type(out)(*split) if isinstance(out, tuple) else split[0])
    return rule


def _convolution_weight(prim, args, kwargs, size):
    """Per-sample weight gradients as ONE grouped call: sample ``b``'s channels become group ``b``'s (the usual
    trick for per-sample convolution gradients)."""
    x, g = (_expanded(a, size) for a in args)
    n, groups = x.shape[1], kwargs["groups"]

    def grouped(t):  # (B, N, C, *spatial) -> (N, B * C, *spatial)
        return t.transpose(0, 1).reshape((n, size * t.shape[2]) + tuple(t.shape[3:]))

    out = prim(grouped(x), grouped(g), **{**kwargs, "groups": size * groups})
    return _Batched(out.reshape((size, out.shape[0] // size) + tuple(out.shape[1:])))


_RULES = {
    "convolution": _merge_leading((0,)),
    "convolution_transpose": _merge_leading((0,)),
    "convolution_weight": _convolution_weight,
    "max_pool": _merge_leading((0,)),
    "adaptive_max_pool": _merge_leading((0,)),
    "max_pool_scatter": _merge_leading((0, 1), "shape"),
    "nll_loss": _nll_loss,
    "nll_loss_backward": _nll_loss_backward,
    "nll_check_targets": _last_dims,
    "view": _view,
    "permute": _prepend("dims", lambda a, dims: (0,) + tuple(d + 1 for d in dims)),
    "expand": lambda prim, args, kwargs, size: _expand(prim, args, kwargs, size),
    "slice": _prepend("key", lambda a, key: (slice(None),) + (tuple(key) if isinstance(key, tuple) else (key,))),
    "diagonal": lambda prim, args, kwargs, size: _prepend("dim1", lambda a, d: d + 1)(
        prim, args, {**kwargs, "dim2": kwargs["dim2"] + 1}, size),
    "unfold": _prepend("dimension", lambda a, d: d + 1),
    "matmul": _matmul,
    "linear": _linear,
    "native_layer_norm": _last_dims,
    "tril": _last_dims,
    "triu": _last_dims,
    **{name: _shift("dim") for name in ("softmax", "log_softmax", "softmax_backward_data",
                                        "log_softmax_backward_data", "cat", "take_along", "argsort",
                                        "logcumsumexp", "topk_indices", "cumextreme_indices")},
    "flip": _shift("dims"),
}
