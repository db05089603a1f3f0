"""Shape ops on nested tensors: the dense view of the values, with the ragged dim's place followed (``transpose``,
``permute``, ``view``/``reshape``, ``unflatten``/``flatten``, ``(un)squeeze``, ``chunk``/``split``, ``cat``); the batch
and ragged dims stay where they are, as torch requires.

>>> import jitorch, jitorch.nested
>>> nt = jitorch.nested.nested_tensor([jitorch.ones(1, 4), jitorch.ones(2, 4)], layout=jitorch.jagged)
>>> nt.unflatten(-1, (2, 2)).transpose(1, 2).shape
jitorch.Size([2, 2, j..., 2])
"""
from __future__ import annotations

from ._nested_int import NestedInt
from ._refusals import nested_refusal
from ._tensor import NestedTensor, jagged_like, make_strided

__all__ = ["transpose", "permute", "view", "unflatten", "flatten", "unsqueeze", "squeeze", "split", "chunk", "cat"]


def _strided_each(nt, fn):
    return make_strided([fn(c) for c in nt._nt_components])


def transpose(nt, dim0, dim1):
    """Swap two dims other than the batch dim (the ragged dim moves with its index)."""
    d0, d1 = nt._wrap(dim0, "transpose"), nt._wrap(dim1, "transpose")
    if 0 in (d0, d1) and d0 != d1:
        if nt._nt_components is not None:
            raise RuntimeError("transpose(): Nested tensor dimension 0 cannot be transposed (strided layout)")
        raise ValueError("transpose(): Transpose is not supported on the batch dimension for jagged NT")
    if nt._nt_components is not None:
        return _strided_each(nt, lambda c: c.transpose(d0 - 1, d1 - 1))
    r = nt._nt_ragged_idx
    r = d1 if r == d0 else d0 if r == d1 else r
    return jagged_like(nt, nt._nt_values.transpose(d0 - 1, d1 - 1), r)


def permute(nt, *dims):
    """Reorder the dims after the batch dim (dim 0 stays first)."""
    dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else dims
    order = [nt._wrap(d, "permute") for d in dims]
    if sorted(order) != list(range(nt.dim())) or order[0] != 0:
        raise RuntimeError(f"permute(): dims {list(dims)} must be a permutation keeping the batch dim first for a "
                           "nested tensor")
    if nt._nt_components is not None:
        raise nested_refusal("permute", "strided")
    return jagged_like(nt, nt._nt_values.permute([d - 1 for d in order[1:]]), order.index(nt._nt_ragged_idx))


def _sizes(shape):
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (list, tuple)) else tuple(shape)


def view(nt, *shape, op="view"):
    """``view``/``reshape``: new sizes for the dims after the ragged dim (the batch, the dims before the ragged dim
    and the ragged dim itself, given as its ``j`` size or -1, stay)."""
    shape = _sizes(shape)
    if nt._nt_components is not None:
        if not shape or shape[0] not in (-1, len(nt._nt_components)):
            raise RuntimeError(f"{op}(): the batch dim of a strided nested tensor cannot change, got {list(shape)}")
        return _strided_each(nt, lambda c: getattr(c, op)(*[c.shape[0] if isinstance(s, NestedInt) else s
                                                               for s in shape[1:]]))
    r = nt._nt_ragged_idx
    now = nt.shape
    fits = len(shape) > r and shape[0] in (len(nt), -1) and shape[r] in (-1, nt._nt_ragged) and \
        tuple(shape[1:r]) == tuple(now[1:r])
    if not fits:
        raise RuntimeError(f"{op}(): cannot view shape {_text(now)} as {_text(shape)} (the batch dim, the ragged dim "
                           "and the dims before it stay; give the ragged dim as its j size or -1)")
    values = nt._nt_values
    sizes = [values.shape[i] for i in range(r)] + list(shape[r + 1:])
    return jagged_like(nt, getattr(values, op)(*sizes))


def _text(shape):
    return "(" + ", ".join(str(s) for s in shape) + ")"


def unflatten(nt, dim, sizes):
    d = nt._wrap(dim, "unflatten")
    if d == 0 or d == nt._nt_ragged_idx:
        raise RuntimeError(f"unflatten(): not supported for NestedTensor on {'dim=0' if d == 0 else 'ragged dim'}")
    if nt._nt_components is not None:
        return _strided_each(nt, lambda c: c.unflatten(d - 1, sizes))
    r = nt._nt_ragged_idx
    return jagged_like(nt, nt._nt_values.unflatten(d - 1, sizes), r + len(sizes) - 1 if d < r else r)


def flatten(nt, start_dim=0, end_dim=-1):
    s, e = nt._wrap(start_dim, "flatten"), nt._wrap(end_dim, "flatten")
    r = nt._nt_ragged_idx
    if s == e:
        return nt
    if s == 0 or (r is not None and s <= r <= e):
        raise RuntimeError(f"flatten(): not supported for NestedTensor over dims {s} to {e} (the batch and ragged "
                           "dims cannot be flattened)")
    if nt._nt_components is not None:
        return _strided_each(nt, lambda c: c.flatten(s - 1, e - 1))
    return jagged_like(nt, nt._nt_values.flatten(s - 1, e - 1), r - (e - s) if e < r else r)


def unsqueeze(nt, dim):
    n = nt.dim() + 1
    if not -n <= dim < n:
        raise IndexError(f"unsqueeze: Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got "
                         f"{dim})")
    d = dim % n
    if d == 0:
        raise RuntimeError("unsqueeze(): not supported for NestedTensor on dim=0")
    if nt._nt_components is not None:
        return _strided_each(nt, lambda c: c.unsqueeze(d - 1))
    r = nt._nt_ragged_idx
    return jagged_like(nt, nt._nt_values.unsqueeze(d - 1), r + 1 if d <= r else r)


def squeeze(nt, dim=None):
    if dim is None:
        raise RuntimeError("squeeze(): For nested tensors, squeeze without the dim argument is not supported")
    d = nt._wrap(dim, "squeeze")
    if d == 0:
        raise RuntimeError("squeeze(): not supported for NestedTensor on dim=0")
    if nt._nt_components is not None:
        return _strided_each(nt, lambda c: c.squeeze(d - 1))
    r = nt._nt_ragged_idx
    if d == r:
        raise RuntimeError("squeeze(): not supported for NestedTensor on ragged dim")
    out = nt._nt_values.squeeze(d - 1)
    return jagged_like(nt, out, r - 1 if d < r and out.dim() < nt._nt_values.dim() else r)


def split(nt, split_size_or_sections, dim=0, op="split"):
    """Pieces along a dim after the ragged dim (the last dim, typically), each with ``nt``'s sequences."""
    d = nt._wrap(dim, op)
    if d == 0 or d == nt._nt_ragged_idx:
        raise RuntimeError(f"{op}(): not supported for NestedTensor on {'dim=0' if d == 0 else 'ragged dim'}")
    if nt._nt_components is not None:
        if d != nt.dim() - 1:
            raise RuntimeError(f"{op}(): Chunk for nested tensors is currently only supported for the last "
                               "dimension (strided layout)")
        pieces = [getattr(c, op)(split_size_or_sections, d - 1) for c in nt._nt_components]
        return tuple(make_strided(parts) for parts in zip(*pieces))
    if not nt.is_contiguous():
        raise ValueError(f"{op}(): expected self to be a contiguous jagged layout NestedTensor (shape {nt.shape!r}); "
                         "call .contiguous() first")
    return tuple(jagged_like(nt, v) for v in getattr(nt._nt_values, op)(split_size_or_sections, d - 1))


def chunk(nt, chunks, dim=0):
    return split(nt, chunks, dim, op="chunk")


def cat(tensors, dim=0):
    """Join nested tensors of one structure along a dim after the batch and ragged dims (the strided layout: the
    last dim, or dim 0 to join the lists)."""
    import jitorch

    tensors = list(tensors)
    if not all(isinstance(t, NestedTensor) for t in tensors):
        raise RuntimeError("cat(): expected all inputs to be nested tensors, got "
                           f"{[type(t).__name__ for t in tensors]}")
    ref = tensors[0]
    d = ref._wrap(dim, "cat")
    if ref._nt_components is not None:
        if d == 0:
            return make_strided([c for t in tensors for c in t._nt_components])
        return make_strided([jitorch.cat(parts, d - 1) for parts in zip(*(t._nt_components for t in tensors))])
    if d == 0:
        raise RuntimeError("cat(): not supported for NestedTensor on dim=0")
    if d == ref._nt_ragged_idx:
        raise RuntimeError("cat(): not supported for NestedTensor on ragged dim")
    if any(t._nt_ragged is not ref._nt_ragged or t._nt_ragged_idx != ref._nt_ragged_idx for t in tensors):
        raise RuntimeError("cat(): nested tensors of different offsets cannot be joined (shapes "
                           f"{[_text(t.shape) for t in tensors]})")
    return jagged_like(ref, jitorch.cat([t._nt_values for t in tensors], d - 1))


def unbind(nt, dim=0):
    return nt.unbind(dim)

