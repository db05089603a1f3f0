"""The batching rules of `_vmap_batched`: how one op-table row runs over a batch held in front of its tensors.

A rule gets the node's arguments (batched ones wrapped in `Batched`, whose ``t`` carries the batch in dim 0) and
returns a `Batched` result, or NotImplemented to have the node run per sample. The arguments' dims and shapes are the
sample's ("logical"), as the trace recorded them; each rule rewrites them for the batched ("physical") tensors.

>>> import jitorch
>>> from jitorch.fx.make_fx import Primitive
>>> from jitorch.ops import OPS
>>> RULES["permute"](Primitive(OPS["permute"]), (Batched(jitorch.zeros(5, 2, 3)),), {"dims": (1, 0)}, 5).t.shape
jitorch.Size([5, 3, 2])
"""
from __future__ import annotations

from . import _dtype
from ._tensor import Tensor

__all__ = ["Bail", "Batched", "RULES", "has_batched", "wrap", "sample_rank", "padded", "pointwise",
           "pointwise_operands", "reduction"]


class Bail(Exception):
    """The graph cannot stand for ``func`` over the batch: run the per-sample loop instead."""


class Batched:
    """A value with the batch in dim 0 of ``t``; the sample's own shape is ``t.shape[1:]``."""

    __slots__ = ("t",)

    def __init__(self, t):
        self.t = t

    @property
    def rank(self):
        return self.t.dim() - 1


def has_batched(value):
    """Whether a `Batched` value is anywhere in ``value`` (nested tuples, lists and dicts)."""
    if isinstance(value, Batched):
        return True
    if isinstance(value, (tuple, list)):
        return any(has_batched(v) for v in value)
    if isinstance(value, dict):
        return any(has_batched(v) for v in value.values())
    return False


def wrap(out):
    """A row's result as `Batched` values (a tensor, or a tuple of them); anything else makes the path give up."""
    if isinstance(out, Tensor):
        return Batched(out)
    if isinstance(out, tuple):
        wrapped = [wrap(o) for o in out]
        return type(out)(*wrapped) if hasattr(out, "_fields") else tuple(wrapped)
    raise Bail


def sample_rank(value):
    """The rank a value has in one sample (a batched one without its batch dim; 0 for a non-tensor)."""
    return value.rank if isinstance(value, Batched) else value.dim() if isinstance(value, Tensor) else 0


def padded(value, rank):
    """A batched value as ``(B, 1, ..., *sample)`` with ``rank`` sample dims, so it broadcasts as the sample did."""
    t = value.t
    missing = rank - value.rank
    return t.reshape((t.shape[0],) + (1,) * missing + tuple(t.shape[1:])) if missing > 0 else t


def pointwise_operands(prim, args, kwargs, rank):
    """An elementwise row's operands for the batched call: batched ones padded to ``rank`` sample dims so they
    broadcast as the samples did. A 0-d sample is a 1-D tensor here and would promote as a dimensioned one (a
    float64 0-d sample times a float32 vector must stay float32): such operands are cast to the samples' result
    type first."""
    values = list(args) + list(kwargs.values())
    cast = _zero_d_promotion(prim.op, values) if rank else None

    def physical(v):
        if not isinstance(v, Batched):
            return v
        t = padded(v, rank)
        keep = cast is None or v.rank or t.dtype == cast or (prim.op.masks and t.dtype == _dtype.bool)
        return t if keep else t.to(cast)

    return [physical(a) for a in args], {k: physical(v) for k, v in kwargs.items()}


def pointwise(prim, args, kwargs, size):
    """An elementwise row over the batch (see `pointwise_operands`)."""
    rank = max(sample_rank(a) for a in list(args) + list(kwargs.values()))
    args, kwargs = pointwise_operands(prim, args, kwargs, rank)
    return wrap(prim(*args, **kwargs))


def _zero_d_promotion(op, values):
    """The samples' result dtype when a batched operand is 0-d among dimensioned ones, else None."""
    if op.promotion == "keep" or not any(isinstance(v, Batched) and v.rank == 0 for v in values):
        return None
    dims, zeros, scalars = [], [], []
    for v in values:
        if isinstance(v, (Batched, Tensor)):
            (dims if sample_rank(v) else zeros).append(v.t.dtype if isinstance(v, Batched) else v.dtype)
        elif isinstance(v, (bool, int, float, complex)):
            d = _dtype.scalar_dtype(v)
            scalars.append(_dtype.int64 if d is _dtype.int64 else d)
    return _dtype.result_type_of(dims, zeros, scalars)


def _expanded(value, size):
    """Every tensor argument batched (an unbatched one expanded over the batch), for rows whose inputs share a
    shape."""
    if isinstance(value, Batched):
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
        return wrap(prim(*[_expanded(a, size) for a in args], **{**kwargs, name: shifted}))
    return rule


def reduction(prim, args, kwargs, size):
    (a,) = args
    if "dims" in kwargs:  # (a trace records the dims it reduced, never None)
        return wrap(prim(a.t, **{**kwargs, "dims": tuple(d + 1 for d in kwargs["dims"])}))
    return _shift("dim")(prim, args, kwargs, size)


def _prepend(name, lead):
    def rule(prim, args, kwargs, size):
        if not isinstance(args[0], Batched) or has_batched((args[1:], kwargs)):
            return NotImplemented
        return wrap(prim(args[0].t, *args[1:], **{**kwargs, name: lead(args[0], kwargs[name])}))
    return rule


def _view(prim, args, kwargs, size):
    (a,) = args
    return Batched(a.t.reshape((size,) + tuple(kwargs["shape"])))


def _expand(prim, args, kwargs, size):
    (a,) = args
    shape = tuple(kwargs["shape"])
    return Batched(prim(padded(a, len(shape)), **{**kwargs, "shape": (size,) + shape}))


def _matmul(prim, args, kwargs, size):
    a, b = args
    ra, rb = sample_rank(a), sample_rank(b)
    if ra == 0 or rb == 0:
        return NotImplemented
    batch_rank = max(ra, 2) - 2, max(rb, 2) - 2
    target = max(batch_rank)

    def physical(v, r, vector_axis):
        if not isinstance(v, Batched):
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
    if isinstance(b, Batched) and rb == 1:
        out = out.squeeze(-1)
    if isinstance(a, Batched) and ra == 1:
        out = out.squeeze(-1 if rb == 1 else -2)
    return Batched(out)


def _linear(prim, args, kwargs, size):
    if has_batched((args[1:], kwargs)):
        return NotImplemented
    return Batched(prim(args[0].t, *args[1:], **kwargs))


def _last_dims(prim, args, kwargs, size):
    """Rows that work on the sample's trailing dims only (layer norm over the last ``k``, tril/triu)."""
    if not isinstance(args[0], Batched) or has_batched((args[1:], kwargs)):
        return NotImplemented
    return wrap(prim(args[0].t, *args[1:], **kwargs))


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
        return Batched(loss)
    total = loss.sum(1)
    if reduction == "sum":
        return Batched(total)
    return Batched(total / (rows != kwargs["ignore_index"]).sum(1).to(total.dtype))


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
    return Batched(out.reshape(size, n, classes))


def _merge_leading(positions, shape_attr=None):
    """Rows that treat the sample's leading dim (a minibatch of its own: ``N`` of a convolution or pooling input)
    row by row: the batch and ``N`` merge into one leading dim for the call and split again after it. The tensors
    at ``positions`` may be batched, every other one must not be."""
    def rule(prim, args, kwargs, size):
        others = [a for i, a in enumerate(args) if i not in positions]
        if has_batched((others, kwargs)):
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
        return wrap(type(out)(split) if isinstance(out, tuple) and not hasattr(out, "_fields") else
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
    return Batched(out.reshape((size, out.shape[0] // size) + tuple(out.shape[1:])))


def _indexed(prim, args, kwargs, size, n_before):
    """``index``/``index_put`` whose index arrays lead the key (an embedding lookup and its gradient): every sample
    reads or writes its own slice through one more index array, ``arange(B)`` in front. ``n_before``: the tensor
    arguments before the index arrays (the source, and the values for a put)."""
    from ._creation import arange

    key = tuple(kwargs["key"])
    positions = [i for i, k in enumerate(key) if type(k) is not slice]
    indices = list(args[n_before:])
    # A boolean mask picks a different count in each sample: per sample.
    if not positions or positions != list(range(len(positions))) or any(
            (a.t if isinstance(a, Batched) else a).dtype == _dtype.bool for a in indices):
        return NotImplemented
    rank = max(sample_rank(a) for a in indices)
    indices = [padded(a, rank) if isinstance(a, Batched) else a for a in indices]
    lead = arange(size, device=indices[0].device).reshape((size,) + (1,) * rank)
    source = _expanded(args[0], size)
    # A put's values broadcast against the indexed part of each sample: (broadcast index dims, unindexed dims).
    picked = rank + sample_rank(args[0]) - len(positions)
    rest = [padded(a, picked) if isinstance(a, Batched) else a for a in args[1:n_before]]
    out = prim(source, *rest, *indices, lead, **{**kwargs, "key": (len(indices),) + key})
    return Batched(out)


RULES = {
    "index": lambda prim, args, kwargs, size: _indexed(prim, args, kwargs, size, 1),
    "index_put": lambda prim, args, kwargs, size: _indexed(prim, args, kwargs, size, 2),
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
    "unsqueeze": _prepend("dim", lambda a, d: d + 1),
    "permute": _prepend("dims", lambda a, dims: (0,) + tuple(d + 1 for d in dims)),
    "expand": _expand,
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
