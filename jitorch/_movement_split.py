"""The views of one dim's pieces: ``narrow``, ``select``, ``split``/``chunk``, ``tensor_split`` and ``unbind``, each
piece a ``slice`` row view (those of one call share a node: `_split_grad`). Split from ``_movement.py``, which
re-exports them and attaches the Tensor methods.

>>> import jitorch
>>> x = jitorch.arange(6).reshape(2, 3)
>>> [p.tolist() for p in x.split([1, 2], 1)], x.select(1, -1).tolist(), x.narrow(0, 1, 1).tolist()
([[[0], [3]], [[1, 2], [4, 5]]], [2, 5], [[3, 4, 5]])
"""
from __future__ import annotations

import functools
import operator

import numpy as np

from . import _dispatch  # (``_dispatch.CPU_XP``: the CuPy-surface tests swap it)
from ._dispatch import apply
from ._dispatch_modes import MODES
from ._dispatch_record import view_result
from ._grad_state import GradState
from ._shape import wrap_dim
from ._split_grad import share_grad_fn
from ._tensor import Tensor
from .autograd.graph import named
from .autograd.view_creation import ViewCreation
from .ops import movement as M

__all__ = ["narrow", "select", "split", "chunk", "tensor_split", "unbind"]


def _key_for(ndim, dim, item):
    return (slice(None),) * dim + (item,)


def _sliced(input, key, name=None):
    """The ``slice`` row's view of ``input`` by the checked basic ``key``, shown as ``name`` when given."""
    data = input._data
    if type(data) is np.ndarray and not MODES:
        return view_result(M.SLICE, input, M.SLICE.kernel(_dispatch.CPU_XP, data, key), {"key": key}, name)
    out = apply(M.SLICE, input, key=key)
    return out if name is None else named(out, name)


def narrow(input, dim, start, length):
    d = wrap_dim(dim, input._data.ndim, "narrow")
    size = input._data.shape[d]
    start = operator.index(start)
    if not -size <= start <= size:
        raise IndexError(f"narrow(): start out of range (expected to be in range of [{-size}, {size}], but got "
                         f"{start}) for dimension {d} of size {size}")
    if length < 0:
        raise RuntimeError(f"narrow(): length must be non-negative, got {length}")
    if start < 0:
        start += size
    if start + length > size:
        raise RuntimeError(f"narrow(): start ({start}) + length ({length}) exceeds dimension size ({size}).")
    return _sliced(input, _key_for(input._data.ndim, d, slice(start, start + length)))


def select(input, dim, index):
    d = wrap_dim(dim, input._data.ndim, "select")
    size = input._data.shape[d]
    index = operator.index(index)
    if not -size <= index < size:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(input.shape)} at dimension "
                         f"{d}")
    return _sliced(input, _key_for(input._data.ndim, d, index % size), "SelectBackward0")


def _split_dim(input, dim, op, zero_dim_error):
    """(the wrapped dim, its size) that ``op`` splits ``input`` along; a 0-d input gets the op's own error."""
    if input._data.ndim == 0:
        raise RuntimeError(zero_dim_error)
    d = wrap_dim(dim, input._data.ndim, op)
    return d, input._data.shape[d]


def split(tensor, split_size_or_sections, dim=0):
    d, size = _split_dim(tensor, dim, "split", "split expects at least a 1-dimensional tensor")
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0 and size:
            raise RuntimeError(f"split expects split_size be non-negative, but got split_size={step}")
        sizes = [min(step, size - i) for i in range(0, size, step)] if size else [0]
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != size:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {size} (input tensor's size at "
                               f"dimension {d}), but got split_sizes={sizes}")
    name = "SplitBackward0" if isinstance(split_size_or_sections, int) else "SplitWithSizesBackward0"
    if isinstance(split_size_or_sections, int) or all(type(s) is int and s >= 0 for s in sizes):
        return _pieces(tensor, d, sizes, name)
    out, start = [], 0
    for s in sizes:  # (narrow's errors for a negative or non-integer size)
        out.append(narrow(tensor, d, start, s))
        start += s
    return _multi_output_views(tuple(out), name, tensor, d)


def _pieces(tensor, d, sizes, name):
    """The slice row's views of ``tensor``'s consecutive pieces of ``sizes`` (checked: they fit) along dim ``d``
    (wrapped), as one call's outputs (`_multi_output_views`)."""
    out, start = [], 0
    lead = (slice(None),) * d
    data = tensor._data
    if type(data) is np.ndarray and not MODES:  # (`_sliced`'s direct path, its checks once for all the pieces)
        kernel, xp = M.SLICE.kernel, _dispatch.CPU_XP
        for s in sizes:
            key = lead + (slice(start, start + s),)
            # (a key of slices alone: NumPy's view is the row's kernel's, less its frame and None handling)
            out.append(view_result(M.SLICE, tensor, data[key] if xp is np else kernel(xp, data, key), {"key": key}))
            start += s
    else:
        for s in sizes:
            out.append(_sliced(tensor, lead + (slice(start, start + s),)))
            start += s
    return _multi_output_views(tuple(out), name, tensor, d)


def _multi_output_views(views, grad_name, input, dim):
    """Mark the views of a function that returns several (torch's ``MULTI_OUTPUT_NODE``): with grad mode on, torch
    refuses in-place writes into them, which could not be recorded on the one node they share (`share_grad_fn`:
    one ``cat``/``stack`` of their gradients)."""
    if GradState.enabled:
        if input._requires_grad:
            share_grad_fn(views, input, dim, grad_name)
        creations = _MULTI_OUTPUT.get(grad_name)
        if creations is None or len(creations) < len(views):
            op = grad_name.removesuffix("Backward0")
            creations = _MULTI_OUTPUT[grad_name] = tuple(_multi_output_creation(op, nr) for nr in range(len(views)))
        for v, creation in zip(views, creations):
            if v._nograd_view is None:
                v._nograd_view = creation
    return views


_MULTI_OUTPUT: dict = {}  # node name -> the creations of its outputs 0, 1, ... (as many as its largest call had)


@functools.lru_cache(maxsize=1024)
def _multi_output_creation(op, nr):
    return ViewCreation("multi", f"Output {nr} of {op}")  # (never changed once made: shared by the views)


def chunk(input, chunks, dim=0):
    chunks = operator.index(chunks)  # a NumPy integer or a 0-d integer tensor too, as torch's argument parser
    if input._data.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    nd = input._data.ndim
    d = dim if type(dim) is int and 0 <= dim < nd else wrap_dim(dim, nd, "chunk")
    size = input._data.shape[d]
    if size == 0:  # PyTorch returns ``chunks`` empty pieces of an empty dim (split_with_sizes' node)
        return split(input, [0] * chunks, d)
    step = -(-size // chunks)
    return _pieces(input, d, [min(step, size - i) for i in range(0, size, step)], "SplitBackward0")  # (split's)


def tensor_split(input, indices_or_sections=None, dim=0, *, sections=None, indices=None):
    # NOTE: torch's overloads name the second argument ``sections``, ``indices`` or ``tensor_indices_or_sections``.
    given = [v for v in (indices_or_sections, sections, indices) if v is not None]
    if len(given) != 1:
        raise TypeError("tensor_split() expects exactly one of sections, indices or tensor_indices_or_sections")
    indices_or_sections = given[0]
    if isinstance(indices_or_sections, Tensor):
        if indices_or_sections.ndim > 1:
            raise RuntimeError("tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
                               f"one-dimensional tensor, but got a tensor with {indices_or_sections.ndim} dims")
        indices_or_sections = indices_or_sections.tolist()
    elif not isinstance(indices_or_sections, (int, list, tuple)):
        indices_or_sections = operator.index(indices_or_sections)  # a NumPy integer
    d, size = _split_dim(input, dim, "tensor_split",
                         "tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims")
    if isinstance(indices_or_sections, int):
        n = indices_or_sections
        if n <= 0:
            raise RuntimeError(f"tensor_split: number of sections must be larger than 0, got {n}")
        bounds = [i * (size // n) + min(i, size % n) for i in range(n + 1)]
    else:
        bounds = [0] + [min(int(i), size) for i in indices_or_sections] + [size]
    return tuple(narrow(input, d, a, max(0, b - a)) for a, b in zip(bounds, bounds[1:]))


def unbind(input, dim=0):
    d = wrap_dim(dim, input._data.ndim, "unbind")
    if input._data.ndim == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    views = tuple(select(input, d, i) for i in range(input._data.shape[d]))
    return _multi_output_views(views, "UnbindBackward0", input, d)
