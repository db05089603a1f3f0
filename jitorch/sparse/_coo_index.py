"""Index arithmetic of COO tensors, in jitorch ops (so it runs on the values' device and values stay differentiable):
row-major linear positions, the coalesced pattern, scattering values into a dense tensor and gathering them back.

>>> import jitorch
>>> idx, inverse, count = coalesced_pattern(jitorch.tensor([[1, 0, 1], [2, 0, 2]]), (2, 3))
>>> idx, inverse, count
(tensor([[0, 1],
        [0, 2]]), tensor([1, 0, 1]), 2)
"""
from __future__ import annotations

from .. import _creation, _dtype
from ..runtime.meta import contiguous_strides

__all__ = ["linear_index", "coalesced_pattern", "first_of_each", "scatter_dense", "gather_dense"]


def linear_index(indices, sizes):
    """Each entry's row-major position among the sparse dims ``sizes``: an int64 tensor of shape ``(nnz,)``."""
    if indices.shape[0] == 0:
        return _creation.zeros(indices.shape[1], dtype=_dtype.int64, device=indices.device)
    strides = _creation.tensor(contiguous_strides(sizes), dtype=_dtype.int64, device=indices.device)
    return (indices * strides[:, None]).sum(0)


def coalesced_pattern(indices, size):
    """``(unique indices in row-major order, inverse, count)``: entry ``k`` of ``indices`` sits at column
    ``inverse[k]`` of the unique indices, which have ``count`` columns."""
    from .._sorting import unique

    sizes = tuple(size)[:indices.shape[0]]
    uniq, inverse = unique(linear_index(indices, sizes), sorted=True, return_inverse=True)
    count = int(uniq.shape[0])
    rows = [(uniq // stride) % int(n) for stride, n in zip(contiguous_strides(sizes), sizes)]
    if not rows:
        return _creation.zeros((0, count), dtype=_dtype.int64, device=indices.device), inverse, count
    from .._movement import stack

    return stack(rows), inverse, count


def first_of_each(inverse, count):
    """For each of the ``count`` groups of ``inverse``, the first entry in it."""
    nnz = inverse.shape[0]
    order = _creation.arange(nnz, device=inverse.device)
    start = _creation.full((count,), nnz, dtype=_dtype.int64, device=inverse.device)
    return start.scatter_reduce(0, inverse, order, "amin")


def scatter_dense(indices, values, size):
    """The dense tensor of ``size`` with ``values`` added at ``indices`` (differentiable in ``values``)."""
    out = values.new_zeros(tuple(size))
    if indices.shape[0] == 0:  # no sparse dims: every entry is the whole tensor
        return (out + values.sum(0)).to(out.dtype)
    return out.index_put(tuple(indices.unbind(0)), values, accumulate=True)


def gather_dense(dense, indices):
    """The entries of ``dense`` at ``indices``: ``(nnz, *dense_dims)`` (differentiable in ``dense``)."""
    if indices.shape[0] == 0:
        return dense.expand((indices.shape[1],) + tuple(dense.shape)).clone()
    return dense[tuple(indices.unbind(0))]
