"""``torch.segment_reduce`` (and its alias ``torch._segment_reduce``, which graph libraries call for CSR pooling), and
the COO/CSR index conversions they call (``torch._convert_indices_from_coo_to_csr``, ``..._csr_to_coo``).

Consecutive runs of ``data`` along ``axis`` (given by ``lengths`` or ``offsets``) reduce to one slice each, as a
``scatter_reduce`` into one slot per segment plus a spare slot for the elements no segment covers (``unsafe`` lengths
that fall short, positions before ``offsets[0]``). The segment bounds are read on the host, like
``repeat_interleave``'s counts.

>>> import jitorch
>>> x = jitorch.tensor([1.0, 2.0, 3.0, 4.0])
>>> jitorch.segment_reduce(x, "max", lengths=jitorch.tensor([1, 0, 3]))
tensor([1., -inf, 4.])
"""
from __future__ import annotations

import numpy as np

from . import _creation, _dtype
from ._dispatch import TORCH_TYPE_NAMES
from ._shape import wrap_dim

__all__ = ["segment_reduce"]

_REDUCES = {"sum": "sum", "mean": "sum", "prod": "prod", "max": "amax", "amax": "amax", "min": "amin",
            "amin": "amin"}


def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False, initial=None):
    """Reduce each segment of ``data`` along ``axis`` with sum, mean, prod, max or min; an empty segment gives
    ``initial`` (else 0, nan, 1, -inf or inf)."""
    if lengths is None and offsets is None:
        raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined.")
    if indices is not None:
        raise RuntimeError("segment_reduce(): indices based reduction is not supported yet.")
    if reduce not in _REDUCES:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    if not data.is_floating_point():
        raise NotImplementedError(f"\"_segment_reduce_cpu\" not implemented for '{TORCH_TYPE_NAMES[data.dtype.name]}'")
    bounds = lengths if lengths is not None else offsets
    if bounds.dtype.name not in ("int32", "int64"):
        raise NotImplementedError(f"\"_segment_reduce_lengths_cpu_kernel1\" not implemented for "
                                  f"'{TORCH_TYPE_NAMES[bounds.dtype.name]}'")
    if data._data.ndim < bounds._data.ndim:
        raise RuntimeError(f"segment_reduce(): data has {data._data.ndim} dimensions, fewer than the "
                           f"{bounds._data.ndim} of its lengths or offsets")
    axis = wrap_dim(axis, data._data.ndim, "segment_reduce")
    if axis != bounds._data.ndim - 1:
        raise RuntimeError(f"segment_reduce(): Expected axis to be the last dimension of lengths but got {axis}.")
    if tuple(bounds._data.shape[:-1]) != tuple(data._data.shape[:axis]):
        raise RuntimeError(f"segment_reduce(): lengths or offsets of shape {list(bounds.shape)} do not match the "
                           f"leading dims of data {list(data.shape)}")
    size = data._data.shape[axis]
    b = bounds.cpu().numpy().astype(np.int64)
    if lengths is not None:
        if (b < 0).any():
            raise RuntimeError("lengths contains negative value!")
        if not unsafe and (b.sum(-1) != size).any():
            raise RuntimeError("segment_reduce(): Expected all rows of lengths along axis to sum to "
                               "data.size(lengths.dim()-1) when !unsafe.")
        b = np.concatenate([np.zeros(b.shape[:-1] + (1,), np.int64), np.cumsum(b, -1)], -1)
    nseg = b.shape[-1] - 1
    # each position's segment: the last start at or before it; positions outside every segment go to the spare slot
    pos = np.arange(size)
    seg = np.stack([np.searchsorted(row, pos, side="right") - 1 for row in b.reshape(-1, nseg + 1)])
    seg[(seg < 0) | (seg >= nseg)] = nseg
    seg = seg.reshape(b.shape[:-1] + (size,) + (1,) * (data._data.ndim - axis - 1))
    index = _creation.tensor(seg, device=data.device).expand(data.shape)
    return _reduce(data, reduce, index, axis, nseg, initial)


def _reduce(data, reduce, index, axis, nseg, initial):
    shape = list(data.shape)
    shape[axis] = nseg + 1
    op = _REDUCES[reduce]
    if op == "sum" or op == "prod":
        start = (0 if op == "sum" else 1) if initial is None else initial
        out = _creation.full(shape, start, dtype=data.dtype, device=data.device)
        out = out.scatter_reduce(axis, index, data, op, include_self=True)
        if reduce == "mean":
            count = _creation.zeros(shape, dtype=data.dtype, device=data.device).scatter_add(
                axis, index, _creation.ones_like(data))
            # without initial an empty segment is 0 / 0 = nan, as torch's; with it, initial / 1
            out = out / (count if initial is None else count.clamp(min=1))
    else:
        # Ties share the gradient among the data elements only (initial is a constant, not a competitor), as torch's
        # backward does: reduce without it, then let it replace the segments it beats.
        empty = float("-inf") if op == "amax" else float("inf")
        out = _creation.full(shape, empty, dtype=data.dtype, device=data.device)
        out = out.scatter_reduce(axis, index, data, op, include_self=False)
        if initial is not None:
            keep = out >= initial if op == "amax" else out <= initial
            out = out.where(keep, _creation.full((), initial, dtype=data.dtype, device=data.device))
    return out.narrow(axis, 0, nseg)


def _convert_indices_from_coo_to_csr(input, size, *, out_int32=False):
    """The CSR row pointers of sorted COO row indices: ``out[k]`` counts the entries of ``input`` below ``k``."""
    from ._sorting import searchsorted

    if input._data.ndim != 1:
        raise RuntimeError(f"Input is supposed to be a vector, but got {input._data.ndim} dimensional tensor.")
    if input.dtype.name not in ("int32", "int64"):
        raise NotImplementedError(f"\"convert_indices_from_coo_to_csr_cpu\" not implemented for "
                                  f"'{TORCH_TYPE_NAMES[input.dtype.name]}'")
    rows = _creation.arange(int(size) + 1, dtype=input.dtype, device=input.device)
    return searchsorted(input, rows, out_int32=out_int32)


def _convert_indices_from_csr_to_coo(crow_indices, col_indices, *, out_int32=False, transpose=False):
    """The (2, nnz) COO indices of CSR ``crow_indices``/``col_indices`` (columns first when ``transpose``)."""
    from ._math_extra import repeat_interleave
    from ._movement import stack

    dtype = _dtype.int32 if out_int32 else _dtype.int64
    counts = crow_indices.diff().to(_dtype.int64)
    rows = repeat_interleave(_creation.arange(counts.numel(), dtype=dtype, device=crow_indices.device), counts)
    cols = col_indices.to(dtype)
    return stack([cols, rows] if transpose else [rows, cols])
