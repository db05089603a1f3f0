"""``torch.sparse.softmax`` / ``log_softmax``: softmax along a dim over a sparse_coo tensor's specified entries.

The unspecified entries count as -inf (they take no share), so each line along ``dim`` normalises only the values it
holds, and the result has the input's (coalesced) pattern. Written in jitorch ops on the values, so gradients reach
them (GAT-style attention over edges).

>>> import jitorch
>>> s = jitorch.sparse_coo_tensor([[0, 0, 1], [0, 2, 1]], [1.0, 1.0, 5.0], (2, 3))
>>> jitorch.sparse.softmax(s, 1).to_dense()
tensor([[0.5000, 0.0000, 0.5000],
        [0.0000, 1.0000, 0.0000]])
"""
from __future__ import annotations

from .._sorting import unique
from ._coo import SparseCooTensor, make_sparse
from ._coo_index import linear_index

__all__ = ["softmax", "log_softmax"]


def _lines(s, dim):
    """Each entry's line along ``dim`` (entries that differ only in ``dim`` share one), and the count of lines."""
    keep = [d for d in range(s.sparse_dim()) if d != dim]
    indices = s._sp_indices
    if not keep:
        return indices.new_zeros(indices.shape[1]), 1
    sizes = tuple(s.shape[d] for d in keep)
    _, inverse = unique(linear_index(indices[keep], sizes), sorted=True, return_inverse=True)
    return inverse, int(inverse.max()) + 1 if inverse.numel() else 0


def _normalized(name, s, dim, dtype, log):
    if not isinstance(s, SparseCooTensor):
        raise RuntimeError(f"sparse.{name}: expected a sparse_coo tensor, got a tensor with layout {s.layout}; "
                           f"use jitorch.{name} for dense tensors")
    if dim is None or not -s.dim() <= dim < s.dim():
        raise IndexError(f"Dimension out of range (expected to be in range of [{-s.dim()}, {s.dim() - 1}], but got "
                         f"{dim})")
    dim %= s.dim()
    if dim >= s.sparse_dim():
        raise NotImplementedError(f"sparse.{name}: a dense dim ({dim}) of a hybrid sparse_coo tensor is not "
                                  "supported in jitorch; softmax over a sparse dim, or convert with .to_dense()")
    s = s.coalesce()
    values = s._sp_values if dtype is None else s._sp_values.to(dtype)
    if not values.dtype.is_floating_point:
        raise RuntimeError(f"sparse.{name}: expected a floating point tensor, got {values.dtype}")
    line, count = _lines(s, dim)
    shape = (count,) + tuple(values.shape[1:])
    index = line.reshape((-1,) + (1,) * (values.dim() - 1)).expand(values.shape)
    # The line maximum only shifts the exponent for range: a constant for the gradient, as in torch.
    top = values.new_full(shape, float("-inf")).scatter_reduce(0, index, values.detach(), "amax")
    shifted = values - top.gather(0, index)
    total = shifted.exp().new_zeros(shape).index_add(0, line, shifted.exp())
    out = shifted - total.log().gather(0, index) if log else shifted.exp() / total.gather(0, index)
    return make_sparse(s._sp_indices, out, s.shape, True)


def softmax(input, dim, *, dtype=None):
    """Softmax along ``dim`` over the specified entries of a sparse_coo tensor (unspecified ones count as -inf).

    >>> import jitorch
    >>> s = jitorch.sparse_coo_tensor([[0, 0], [0, 2]], [1.0, 1.0], (1, 3))
    >>> softmax(s, 1).to_dense()
    tensor([[0.5000, 0.0000, 0.5000]])
    """
    return _normalized("softmax", input, dim, dtype, log=False)


def log_softmax(input, dim, *, dtype=None):
    """Log-softmax along ``dim`` over the specified entries of a sparse_coo tensor.

    >>> import jitorch
    >>> s = jitorch.sparse_coo_tensor([[0, 0], [0, 2]], [1.0, 1.0], (1, 3))
    >>> log_softmax(s, 1).values()
    tensor([-0.6931, -0.6931])
    """
    return _normalized("log_softmax", input, dim, dtype, log=True)
