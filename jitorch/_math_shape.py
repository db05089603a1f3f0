"""Results whose shape the input's values or sizes decide: ``repeat_interleave`` (elements repeated by counts),
``vander`` (a column per power), ``combinations`` (a row per combination), as composites of existing ops.

Re-exported by `_math_extra` (``jitorch.repeat_interleave``, ``jitorch.vander``, ``jitorch.combinations``).

>>> import jitorch
>>> repeat_interleave(jitorch.tensor([2, 0, 1]))
tensor([0, 0, 2])
>>> vander(jitorch.tensor([1, 2, 3]), N=3)
tensor([[1, 1, 1],
        [4, 2, 1],
        [9, 3, 1]])
>>> combinations(jitorch.tensor([1, 2, 3]))
tensor([[1, 2],
        [1, 3],
        [2, 3]])
"""
from __future__ import annotations

import itertools

import numpy as np

from . import _dtype
from ._dispatch import TORCH_TYPE_NAMES
from ._shape import wrap_dim
from ._tensor import Tensor

__all__ = ["repeat_interleave", "vander", "combinations"]


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Repeat each element ``repeats`` times along ``dim`` (flattened when ``dim`` is None)."""
    from ._creation import tensor
    from ._indexing import index_select

    if repeats is None:  # torch.repeat_interleave(repeats): indices repeated by their counts
        if input.dim() != 1:
            raise RuntimeError(f"repeat_interleave: repeats must be a 1-d tensor, got {input.dim()}-d")
        _check_repeats(input)
        counts = input.cpu().numpy()
        if (counts < 0).any():
            raise RuntimeError("repeat_interleave: repeats can not be negative")
        # torch's result has the repeats' dtype (int32 counts give int32 indices)
        out = tensor(np.repeat(np.arange(counts.size, dtype=counts.dtype), counts), device=input.device)
        return _check_output_size(out, output_size)
    x = input.reshape(-1) if dim is None else input
    dim = 0 if dim is None else wrap_dim(dim, x.dim())
    size = x.shape[dim] if x.dim() else 1
    if isinstance(repeats, Tensor):
        if repeats.dim() > 1:
            raise RuntimeError("repeat_interleave: repeats must be 0-dim or 1-dim tensor")
        _check_repeats(repeats)
        counts = repeats.cpu().numpy().reshape(-1)
    else:
        counts = np.asarray([int(repeats)])
    if counts.size == 1:
        counts = np.full(size, counts[0])
    if counts.size != size:
        raise RuntimeError(f"repeat_interleave: repeats must have the same size as input along dim, but got "
                           f"repeats.size(0) = {counts.size} and input.size({dim}) = {size}")
    if (counts < 0).any():
        raise RuntimeError("repeat_interleave: repeats can not be negative")
    index = _check_output_size(tensor(np.repeat(np.arange(size), counts), device=input.device), output_size)
    if x.dim() == 0:
        x = x.reshape(1)
    return index_select(x, dim, index)


def _check_repeats(repeats):
    if repeats.dtype.name not in ("int32", "int64"):  # torch's kernel takes only these
        name = TORCH_TYPE_NAMES[repeats.dtype.name]
        raise NotImplementedError(f"\"repeat_interleave_cpu\" not implemented for '{name}'")


def _check_output_size(index, output_size):
    if output_size is not None and index.shape[0] != output_size:
        raise RuntimeError(f"repeat_interleave: output_size {output_size} does not match {index.shape[0]}")
    return index


def vander(x, N=None, increasing=False):  # noqa: N803 - torch's argument name
    """Vandermonde matrix: columns are powers of ``x`` (decreasing unless ``increasing``)."""
    from ._movement import stack

    if x.dim() != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    n = x.shape[0] if N is None else N
    if n < 0:
        raise RuntimeError("N must be non-negative.")
    if not x.dtype.is_floating_point and not x.dtype.is_complex:
        x = x.to(_dtype.int64)
    powers = range(n) if increasing else range(n - 1, -1, -1)
    cols = [x ** p if p else x.new_ones(x.shape) for p in powers]
    return stack(cols, 1) if cols else x.new_zeros((x.shape[0], 0))


def combinations(input, r=2, with_replacement=False):
    """All length-``r`` combinations of the elements of a 1-d tensor, one per row."""
    from ._creation import tensor
    from ._movement import stack

    if input.dim() != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return input.new_empty((0,))
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    rows = list(pick(range(input.shape[0]), r))
    if not rows:
        return input.new_empty((0, r))
    index = tensor(np.asarray(rows, dtype=np.int64), device=input.device)
    return stack([input[index[:, k]] for k in range(r)], 1)
