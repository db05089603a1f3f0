"""Matrix-structure functions: diagonals, triangles, ``block_diag``, ``meshgrid`` and ``cartesian_prod``.

Split from ``_movement.py`` (which re-exports them and attaches the Tensor methods).

>>> import jitorch
>>> jitorch.diag(jitorch.tensor([1, 2])).tolist(), jitorch.triu(jitorch.ones(2, 2)).tolist()
([[1, 0], [0, 2]], [[1.0, 1.0], [0.0, 1.0]])
"""
from __future__ import annotations

from ._dispatch import apply
from ._shape import wrap_dim
from .ops import movement as M


def _flat(tensors):
    return list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)


def _stack(tensors, dim):
    from ._movement import stack  # _movement imports this module at its end

    return stack(tensors, dim)

def diagonal(input, offset=0, dim1=0, dim2=1):
    nd = input._data.ndim
    d1, d2 = wrap_dim(dim1, nd, "diagonal"), wrap_dim(dim2, nd, "diagonal")
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return apply(M.DIAGONAL, input, offset=offset, dim1=d1, dim2=d2)


def diag(input, diagonal=0):
    if input._data.ndim == 1:
        n = input._data.shape[0] + abs(diagonal)
        out = input.new_zeros((n, n))
        return out.diagonal_scatter(input, diagonal)
    if input._data.ndim == 2:
        return diagonal_fn(input, diagonal)
    raise RuntimeError("diag(): Supports 1D or 2D tensors. Got " + f"{input._data.ndim}D")


diagonal_fn = diagonal


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    n = input._data.shape[-1] + abs(offset)
    nd = input._data.ndim + 1
    d1, d2 = wrap_dim(dim1, nd, "diag_embed"), wrap_dim(dim2, nd, "diag_embed")
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    batch = iter(input._data.shape[:-1])  # the batch dims keep their order around the two new ones
    out = input.new_zeros(tuple(n if d in (d1, d2) else next(batch) for d in range(nd)))
    return out.diagonal_scatter(input, offset, d1, d2)


def _diagonal_scatter(self, src, offset=0, dim1=0, dim2=1):
    from .ops.inplace_views import copy_slices

    nd = self._data.ndim
    attrs = dict(offset=offset, dim1=wrap_dim(dim1, nd, "diagonal_scatter"),
                 dim2=wrap_dim(dim2, nd, "diagonal_scatter"))
    return copy_slices(self, src, ((M.DIAGONAL, attrs),))


def block_diag(*tensors):
    from ._tensor import Tensor

    if not tensors:  # torch's empty block matrix: one row, no columns
        from ._creation import zeros

        return zeros((1, 0))
    for i, x in enumerate(tensors):
        if not isinstance(x, Tensor):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got {type(x).__name__}")
        if x._data.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {i} has "
                               f"{x._data.ndim} dimensions")
    tensors = [x.reshape(1, -1) if x._data.ndim < 2 else x for x in tensors]
    rows = sum(x._data.shape[0] for x in tensors)
    cols = sum(x._data.shape[1] for x in tensors)
    from ._dtype import result_type

    out = tensors[0].new_zeros((rows, cols), dtype=result_type(*tensors))
    r = c = 0
    for x in tensors:
        h, w = x._data.shape
        out = out.slice_scatter_2d(x, r, c)
        r, c = r + h, c + w
    return out


def _slice_scatter_2d(self, src, r, c):
    from .ops.inplace_views import copy_slices

    h, w = src._data.shape
    return copy_slices(self, src, ((M.SLICE, {"key": (slice(r, r + h), slice(c, c + w))}),))


def tril(input, diagonal=0):
    if input._data.ndim < 2:
        raise RuntimeError("tril: input tensor must have at least 2 dimensions")
    return apply(M.TRIL, input, diagonal=diagonal)


def triu(input, diagonal=0):
    if input._data.ndim < 2:
        raise RuntimeError("triu: input tensor must have at least 2 dimensions")
    return apply(M.TRIU, input, diagonal=diagonal)


def _check_meshgrid(tensors):
    """ATen's meshgrid checks: at least one tensor, each 0-D or 1-D, one dtype and one device for all."""
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    for i, x in enumerate(tensors):
        if x.dim() > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got a tensor of "
                               f"shape {list(x.shape)} at position {i}; flatten it first")
    first = tensors[0]
    if any(x.dtype != first.dtype for x in tensors):
        raise RuntimeError(f"meshgrid expects all tensors to have the same dtype (got {[x.dtype for x in tensors]})")
    if any(x.device != first.device for x in tensors):
        raise RuntimeError(f"meshgrid expects all tensors to have the same device (got "
                           f"{[str(x.device) for x in tensors]})")


def meshgrid(*tensors, indexing="ij"):
    tensors = _flat(tensors)
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: {indexing}")
    _check_meshgrid(tensors)
    swap = indexing == "xy" and len(tensors) >= 2
    if swap:
        tensors = [tensors[1], tensors[0]] + tensors[2:]
    shape = tuple(x.numel() for x in tensors)
    out = []
    for i, x in enumerate(tensors):
        view = [1] * len(tensors)
        view[i] = -1
        out.append(x.reshape(view).expand(shape))
    if swap:  # the grids of the swapped inputs, handed back in the caller's order
        out[0], out[1] = out[1], out[0]
    return tuple(out)


def cartesian_prod(*tensors):
    grids = meshgrid(*tensors, indexing="ij")
    return _stack([g.reshape(-1) for g in grids], 1) if len(tensors) > 1 else tensors[0]
