"""Index arithmetic of COO tensors, in jitorch ops (so it runs on the values' device and values stay differentiable):
row-major linear positions, the coalesced pattern (grouped on the host), sums by group, scattering values into a dense
tensor and gathering them back.

>>> import jitorch
>>> idx, inverse, count = coalesced_pattern(jitorch.tensor([[1, 0, 1], [2, 0, 2]]), (2, 3))
>>> idx, inverse, count
(tensor([[0, 1],
        [0, 2]]), tensor([1, 0, 1]), 2)
"""
from __future__ import annotations

import numpy as np

from .. import _creation, _dtype
from ..runtime.meta import contiguous_strides

__all__ = ["linear_index", "coalesced_pattern", "first_of_each", "group_sums", "scatter_dense", "gather_dense"]

_PRODUCT_DTYPES = frozenset({_dtype.float32, _dtype.float64, _dtype.complex64, _dtype.complex128})


def linear_index(indices, sizes):
    """Each entry's row-major position among the sparse dims ``sizes``: an int64 tensor of shape ``(nnz,)``."""
    if indices.shape[0] == 0:
        return _creation.zeros(indices.shape[1], dtype=_dtype.int64, device=indices.device)
    strides = _creation.tensor(contiguous_strides(sizes), dtype=_dtype.int64, device=indices.device)
    return (indices * strides[:, None]).sum(0)


def coalesced_pattern(indices, size):
    """``(unique indices in row-major order, inverse, count)``: entry ``k`` of ``indices`` sits at column
    ``inverse[k]`` of the unique indices, which have ``count`` columns.

    The positions are grouped on the host (the count sizes what follows, as torch's coalesce synchronizes on CUDA): a
    CPU graph capture refuses that read, and ``reduce-overhead`` compiles around it instead of freezing one count.
    """
    sizes = tuple(size)[:indices.shape[0]]
    uniq, inverse = np.unique(linear_index(indices, sizes).numpy(force=True), return_inverse=True)
    count, device = int(uniq.size), indices.device
    inverse = _creation.tensor(inverse.reshape(-1), dtype=_dtype.int64, device=device)
    if not sizes:
        return _creation.zeros((0, count), dtype=_dtype.int64, device=device), inverse, count
    rows = np.stack(np.unravel_index(uniq, sizes)) if count else np.zeros((len(sizes), 0), dtype=np.int64)
    return _creation.tensor(rows, dtype=_dtype.int64, device=device), inverse, count


def first_of_each(inverse, count):
    """For each of the ``count`` groups of ``inverse``, the first entry in it."""
    nnz = inverse.shape[0]
    order = _creation.arange(nnz, device=inverse.device)
    start = _creation.full((count,), nnz, dtype=_dtype.int64, device=inverse.device)
    return start.scatter_reduce(0, inverse, order, "amin")


def group_sums(values, groups, count):
    """``values`` summed by group: row ``k`` into row ``groups[k]`` of ``count`` rows, each group in the rows' order
    (differentiable in ``values``).

    Host float and complex values take the product with the groups' 0/1 matrix (the ``sparse_mm`` row: SciPy's CSR
    product adds a row's entries in their order, as ``index_add`` does, at a tenth of a host scatter-add's time for
    rows of an embedding's width); other values take ``index_add``.
    """
    nnz = values.shape[0]
    width = values[0].numel() if nnz else 0
    if not (values.device.type == "cpu" and values.dtype in _PRODUCT_DTYPES and width and count):
        return values.new_zeros((count,) + tuple(values.shape[1:])).index_add(0, groups, values)
    from .._dispatch import apply
    from .._movement import stack
    from ..ops.sparse_ops import SPARSE_MM

    pattern = stack([groups, _creation.arange(nnz, device=groups.device)])
    ones = _creation.ones(nnz, dtype=values.dtype)
    summed = apply(SPARSE_MM, pattern, ones, values.reshape(nnz, width), rows=count, cols=nnz, transpose=False,
                   coalesced=False)
    return summed.reshape((count,) + tuple(values.shape[1:]))


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
