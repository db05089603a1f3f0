"""Layers and reductions on nested tensors: ``linear``/``matmul`` with dense weights, ``softmax``/``log_softmax``,
``layer_norm``, ``sum``/``mean`` and ``scaled_dot_product_attention``, each the dense op on the values where the
ragged dim is not involved, per sequence where it is (as torch allows).

>>> import jitorch, jitorch.nested
>>> nt = jitorch.nested.nested_tensor([jitorch.ones(1, 2), jitorch.ones(2, 2)], layout=jitorch.jagged)
>>> nt.sum(1)
tensor([[1., 1.],
        [2., 2.]])
"""
from __future__ import annotations

from ._refusals import nested_refusal
from ._tensor import NestedTensor, components, jagged_like, make_strided

__all__ = ["linear", "matmul", "softmax_like", "layer_norm", "reduce", "sdpa", "from_sequences"]


def _jitorch():
    import jitorch

    return jitorch


def from_sequences(nt, parts, ragged_idx=None):
    """A jagged tensor with ``nt``'s offsets over per-sequence results ``parts`` (ragged along the same dim)."""
    if nt._nt_lengths is not None:
        raise nested_refusal("from_sequences", why="per-sequence results of a nested tensor with holes (lengths) "
                             "are not supported; make it contiguous first")
    r = nt._nt_ragged_idx if ragged_idx is None else ragged_idx
    return jagged_like(nt, _jitorch().cat(parts, r - 1), r)


def _dim_arg(args, kwargs, position=1):
    return args[position] if len(args) > position else kwargs.get("dim")


def linear(input, weight, bias=None):
    """``F.linear`` of a jagged ``(B, j, ..., in)`` tensor (ragged dim 1) or per strided component."""
    F = _jitorch().nn.functional
    if not isinstance(input, NestedTensor) or isinstance(weight, NestedTensor) or isinstance(bias, NestedTensor):
        raise nested_refusal("linear", why="only a nested input with dense weight and bias is supported")
    if input._nt_components is not None:
        return make_strided([F.linear(c, weight, bias) for c in input._nt_components])
    if input._nt_ragged_idx != 1 or input._nt_ragged_idx == input.dim() - 1 or not input.is_contiguous():
        raise ValueError(f"linear(): expected input to be a contiguous jagged layout NestedTensor with the ragged "
                         f"dim at dim 1, got shape {input.shape!r}; transpose it back first")
    return jagged_like(input, F.linear(input._nt_values, weight, bias))


def matmul(a, b):
    """``a @ b``: a jagged ``a`` with a dense matrix (or one per sequence), two nested tensors of one structure
    whose ragged dim is a batch dim of the product, or strided components pairwise."""
    torch = _jitorch()
    layout = (a if isinstance(a, NestedTensor) else b)._layout_name()
    refused = RuntimeError(f"matmul(): not supported between inputs of shapes {_text(a)} and {_text(b)} "
                           f"({layout} layout nested tensor)")
    if layout == "strided":
        if not (isinstance(a, NestedTensor) and isinstance(b, NestedTensor)):
            raise RuntimeError("matmul(): Expected both to be nested, but got a nested and a non-nested operand "
                               "(strided-layout nested tensor)")
        return make_strided([x @ y for x, y in zip(a._nt_components, b._nt_components)])
    if not isinstance(a, NestedTensor):
        raise refused
    if a._nt_ragged_idx > a.dim() - 2 or isinstance(b, NestedTensor) and a._nt_ragged_idx == a.dim() - 2:
        raise refused  # the ragged dim must be a batch dim of the product, or the rows of a dense weight's
    if isinstance(b, NestedTensor):
        if b._nt_ragged is not a._nt_ragged or b._nt_ragged_idx != a._nt_ragged_idx:
            raise refused
        return jagged_like(a, torch.matmul(a._nt_values, b._nt_values))
    if b.dim() <= 2:
        return jagged_like(a, torch.matmul(a._nt_values, b))
    if b.dim() == a.dim() and b.shape[0] == len(a):
        return from_sequences(a, [torch.matmul(c, w) for c, w in zip(components(a), b.unbind(0))])
    raise refused


def _text(x):
    return repr(x.shape) if not (isinstance(x, NestedTensor) and x._nt_components is not None) else "(nested)"


def softmax_like(name, func, args, kwargs):
    """``softmax``/``log_softmax`` over a dim of a nested tensor (not the batch dim; the ragged dim per sequence,
    when it is dim 1)."""
    nt = args[0]
    dim = _dim_arg(args, kwargs)
    rest = {k: v for k, v in kwargs.items() if k not in ("dim", "_stacklevel")}
    if len(args) > 3:
        rest.setdefault("dtype", args[3])
    elif len(args) > 2 and not isinstance(args[2], int):
        rest.setdefault("dtype", args[2])
    if dim is None:
        raise RuntimeError(f"{name}(): a nested tensor needs an explicit dim")
    d = nt._wrap(dim, name)
    if d == 0:
        raise RuntimeError(f"{name}(): not supported when reducing across the batch dimension for NestedTensor")
    if nt._nt_components is not None:
        if name != "softmax":
            raise nested_refusal(name, "strided")
        return make_strided([func(c, d - 1, **rest) for c in nt._nt_components])
    if d == nt._nt_ragged_idx:
        if name != "softmax":
            raise RuntimeError(f"{name}(): not supported when reducing along the ragged dimension for NestedTensor")
        if d > 1:
            raise RuntimeError(f"{name}(): not supported when reducing along the ragged dimension for ragged_idx > 1 "
                               "for NestedTensor")
        return from_sequences(nt, [func(c, 0, **rest) for c in components(nt)])
    return jagged_like(nt, func(nt._nt_values, d - 1, **rest))


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """``F.layer_norm`` over trailing dims that leave out the batch and ragged dims."""
    F = _jitorch().nn.functional
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if input._nt_components is not None:
        if weight is None or bias is None:
            raise ValueError("NestedTensor layer_norm requires weight and bias (strided layout)")
        return make_strided([F.layer_norm(c, shape, weight, bias, eps) for c in input._nt_components])
    if input.dim() - len(shape) <= input._nt_ragged_idx:
        raise RuntimeError(f"layer_norm(): normalizing over the ragged dimension is not supported for NestedTensor "
                           f"(shape {input.shape!r}, normalized_shape {list(shape)})")
    return jagged_like(input, F.layer_norm(input._nt_values, shape, weight, bias, eps))


def reduce(name, nt, dim=None, keepdim=False, *, dtype=None):
    """``sum``/``mean`` of a nested tensor: everything (a dense 0-d tensor), the ragged dim (a dense ``(B, ...)``
    tensor, per sequence), the batch and ragged dims together, or dims past both (a nested result)."""
    torch = _jitorch()
    extra = {} if dtype is None else {"dtype": dtype}
    if nt._nt_components is not None:
        return _reduce_strided(name, nt, dim, keepdim, extra)
    parts = components(nt)
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        flat = torch.cat([p.reshape(-1) for p in parts]) if nt._nt_lengths is not None else nt._nt_values
        return getattr(flat, name)(**extra)
    dims = sorted({nt._wrap(d, name) for d in (dim if isinstance(dim, (list, tuple)) else (dim,))})
    r = nt._nt_ragged_idx
    if dims == [0]:
        raise RuntimeError(f"{name}(): reducing along the batch dimension but not the ragged dimension is not "
                           "supported for nested tensors")
    if r in dims and dims not in ([r], [0, r]):
        raise RuntimeError(f"{name}(): reducing along a ragged and non-batch dimension is not supported for "
                           "nested tensors")
    if dims == [r]:
        return torch.stack([getattr(p, name)(r - 1, keepdim=keepdim, **extra) for p in parts])
    if dims == [0, r]:
        rows = torch.cat(parts, r - 1) if nt._nt_lengths is not None else nt._nt_values
        out = getattr(rows, name)(r - 1, keepdim=keepdim, **extra)
        return out.unsqueeze(0) if keepdim else out
    if 0 in dims:
        raise RuntimeError(f"{name}(): reducing along the batch dimension but not the ragged dimension is not "
                           "supported for nested tensors")
    out = getattr(nt._nt_values, name)([d - 1 for d in dims], keepdim=keepdim, **extra)
    shift = 0 if keepdim else sum(d < r for d in dims)
    return jagged_like(nt, out, r - shift)


def _reduce_strided(name, nt, dim, keepdim, extra):
    if name != "sum" or dim is None:
        raise nested_refusal(name, "strided")
    dims = dim if isinstance(dim, (list, tuple)) else (dim,)
    if len(dims) != 1:
        raise RuntimeError("sum(): NestedTensor only allows reduction of a single dimension for now (strided layout)")
    d = nt._wrap(dims[0], name)
    if d != nt.dim() - 1:
        raise RuntimeError(f"sum(): NestedTensor can only be reduced across the last dimension for now got "
                           f"dimension {d} instead (strided layout)")
    if not keepdim:
        raise RuntimeError("sum(): NestedTensor always requires keepdim=True for now (strided layout)")
    return make_strided([c.sum(d - 1, keepdim=True, **extra) for c in nt._nt_components])


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """``F.scaled_dot_product_attention`` of jagged ``(B, heads, j, D)`` q/k/v (``transpose(1, 2)`` of a projected
    ``(B, j, heads, D)`` batch): dense attention per sequence, each query sequence over its own key/value
    sequence; the result has the query's structure."""
    F = _jitorch().nn.functional
    qkv = (query, key, value)
    if not all(isinstance(t, NestedTensor) and t._nt_components is None for t in qkv):
        raise RuntimeError("scaled_dot_product_attention(): query, key and value must all be jagged-layout nested "
                           f"tensors, got {[type(t).__name__ for t in qkv]}")
    if attn_mask is not None:
        raise ValueError("scaled_dot_product_attention(): Masks are not yet supported! (jagged layout nested "
                         "tensors: the sequences' own lengths are the mask)")
    if is_causal:
        raise RuntimeError("scaled_dot_product_attention(): Nested tensors for query / key are not supported when "
                           "is_causal=True (jagged layout)")
    for label, t in zip(("query", "key", "value"), qkv):
        if t.dim() != 4 or t._nt_ragged_idx != 2:
            raise RuntimeError(f"scaled_dot_product_attention(): {label} of shape {t.shape!r} must be (B, heads, "
                               "j, D) with the ragged dim at dim 2: transpose(1, 2) a (B, j, heads, D) tensor")
        if len(t) != len(query):
            raise RuntimeError(f"scaled_dot_product_attention(): {label} holds {len(t)} sequences, query "
                               f"{len(query)}")
    if not (key._nt_ragged is value._nt_ragged or key._bounds()[1] == value._bounds()[1]):
        raise RuntimeError("scaled_dot_product_attention(): key and value must have the same sequence lengths")
    outs = [F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale, enable_gqa=enable_gqa)
            for q, k, v in zip(components(query), components(key), components(value))]
    return from_sequences(query, outs, 2)
