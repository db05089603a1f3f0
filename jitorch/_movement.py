"""Public shape and view functions, and the Tensor methods of the whole movement family; all composites of
``ops/movement.py`` rows. The functions that make new memory (``cat``, ``flip``, ``clone``...) live in
``_movement_copy.py``, the matrix-structure ones (``diag``, ``tril``...) in ``_movement_matrix.py``, one dim's
pieces (``narrow``, ``split``...) in ``_movement_split.py``; all are re-exported here.

>>> import jitorch
>>> x = jitorch.arange(6).reshape(2, 3)
>>> x.permute(1, 0).shape, x.unsqueeze(0).shape, jitorch.cat([x, x], 1).shape
(jitorch.Size([3, 2]), jitorch.Size([1, 2, 3]), jitorch.Size([2, 6]))
"""
from __future__ import annotations

import numpy as np

from . import _dispatch  # (``_dispatch.CPU_XP``: the CuPy-surface tests swap it)
from ._dispatch import apply
from ._dispatch_modes import MODES
from ._dispatch_record import view_result
from ._grad_state import GradState
from ._shape import (broadcast_shapes as _broadcast_shape, infer_shape, int_sizes, normalize_shape, quick_infer,
                     raise_tensors_not_broadcastable, sizes_or_keyword, torch_broadcast_shapes, view_strides, wrap_dim,
                     wrap_dims)
from ._tensor import Size, Tensor
from .autograd.graph import named
from .ops import movement as M
# split for size; re-exported here
from ._movement_split import chunk, narrow, select, split, tensor_split, unbind  # noqa: F401

__all__ = [
    "reshape", "permute", "transpose", "swapaxes", "swapdims", "t", "adjoint", "squeeze", "unsqueeze", "flatten",
    "unflatten", "narrow", "select", "split", "chunk", "unbind", "tensor_split", "movedim", "moveaxis", "flip",
    "fliplr", "flipud", "roll", "rot90", "cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack",
    "column_stack", "tile", "broadcast_to", "broadcast_tensors", "broadcast_shapes", "as_strided", "diagonal",
    "tril", "triu", "nonzero", "argwhere", "clone", "atleast_1d", "atleast_2d", "atleast_3d", "ravel", "diag",
    "diag_embed", "block_diag", "meshgrid", "cartesian_prod",
]


_ndarray = np.ndarray
# The functions below first try a direct path for a CPU tensor and plain int arguments with no mode active: the view
# made on the array and marked by `view_result`, the row's own kernel and attrs. Anything else (other argument
# types, errors, meta or device arrays) goes through `apply`, which checks and raises as before.


def _view(self, *shape, size=None, dtype=None):
    data = self._data
    if size is None and dtype is None and type(data) is _ndarray and not MODES:
        new = int_sizes(shape)
        if new is not None:
            new = quick_infer(new, data.size)
            if new is not None and (new == data.shape or data.flags.c_contiguous):
                return view_result(M.RESHAPE, self, data.reshape(new), {"shape": new})
    if dtype is not None and not shape and size is None:
        return self._view_dtype(dtype)
    if len(shape) == 1 and not isinstance(shape[0], (int, tuple, list)) and not hasattr(shape[0], "__index__"):
        return self._view_dtype(shape[0])
    shape = infer_shape(normalize_shape(sizes_or_keyword(shape, size, "view"), "view"), self._data.size)
    if shape == self._data.shape or self._data.flags.c_contiguous:
        return apply(M.RESHAPE, self, shape=shape)
    item = self._data.itemsize
    if view_strides(self._data.shape, tuple(s // item for s in self._data.strides), shape) is None:
        raise RuntimeError(
            f"view size is not compatible with input tensor's size and stride (at least one dimension spans across "
            f"two contiguous subspaces): view {list(shape)} of a tensor of shape {list(self._data.shape)} and stride "
            f"{list(self.stride())}. Use .reshape(...) instead.")
    return apply(M.RESHAPE, self, shape=shape)


def reshape(input, *sizes, shape=None):
    """A view when the memory layout allows it, else a copy (as PyTorch)."""
    data = input._data
    if shape is None and type(data) is _ndarray and not MODES and data.flags.c_contiguous:
        new = int_sizes(sizes)
        if new is not None:
            new = quick_infer(new, data.size)
            if new is not None:
                return view_result(M.RESHAPE, input, data.reshape(new), {"shape": new})
    shape = infer_shape(normalize_shape(sizes_or_keyword(sizes, shape, "reshape", "shape"), "reshape"),
                        input._data.size, "reshape")
    if input._data.flags.c_contiguous:
        return apply(M.RESHAPE, input, shape=shape)
    item = input._data.itemsize
    if view_strides(input._data.shape, tuple(s // item for s in input._data.strides), shape) is not None:
        return apply(M.RESHAPE, input, shape=shape)
    return apply(M.RESHAPE, apply(M.CONTIGUOUS, input), shape=shape)


def _quick_order(order, nd):
    """``order`` as a tuple when it is a permutation of ``range(nd)`` in plain ints, else None."""
    if len(order) == 1 and type(order[0]) in (tuple, list):
        order = order[0]
    if len(order) != nd:
        return None
    seen = 0
    for d in order:
        if type(d) is not int or not 0 <= d < nd or seen >> d & 1:
            return None
        seen |= 1 << d
    return tuple(order)


def permute(input, *order, dims=None):
    data = input._data
    if dims is None and type(data) is _ndarray and not MODES:
        quick = _quick_order(order, data.ndim)
        if quick is not None:
            return view_result(M.PERMUTE, input, data.transpose(quick), {"dims": quick})
    dims = normalize_shape(sizes_or_keyword(order, dims, "permute", "dims"), "permute")
    if len(dims) != input._data.ndim:
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does not match the length "
                           f"of the desired ordering of dimensions i.e. input.dim() = {input._data.ndim} is not equal "
                           f"to len(dims) = {len(dims)}")
    return apply(M.PERMUTE, input, dims=wrap_dims(dims, input._data.ndim, "permute"))


def transpose(input, dim0, dim1):
    return _transposed(input, dim0, dim1, "TransposeBackward0")


def _transposed(input, dim0, dim1, name):
    data = input._data
    nd = data.ndim
    if type(dim0) is int and type(dim1) is int and -nd <= dim0 < nd and -nd <= dim1 < nd and type(
            data) is _ndarray and not MODES:
        dims = list(range(nd))
        dims[dim0], dims[dim1] = dims[dim1], dims[dim0]
        dims = tuple(dims)
        return view_result(M.PERMUTE, input, data.transpose(dims), {"dims": dims}, name)
    d0, d1 = wrap_dim(dim0, nd, "transpose"), wrap_dim(dim1, nd, "transpose")
    dims = list(range(nd))
    dims[d0], dims[d1] = d1, d0
    return named(apply(M.PERMUTE, input, dims=tuple(dims)), name)


def swapaxes(input, axis0, axis1):
    return transpose(input, axis0, axis1)


swapdims = transpose


def t(input):
    nd = input._data.ndim
    if nd > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {nd}D")
    return _transposed(input, 0, 1, "TBackward0") if nd == 2 else named(input.view(input.shape), "TBackward0")


def adjoint(input):
    return transpose(input, -2, -1)


def squeeze(input, dim=None):
    data = input._data
    shape = data.shape
    if type(data) is _ndarray and not MODES:
        if dim is None:
            new = tuple(s for s in shape if s != 1) if 1 in shape else shape
            return view_result(M.RESHAPE, input, data.reshape(new), {"shape": new}, "SqueezeBackward0")
        if type(dim) is int and -len(shape) <= dim < len(shape):
            dim %= len(shape)
            new = shape[:dim] + shape[dim + 1:] if shape[dim] == 1 else shape
            return view_result(M.RESHAPE, input, data.reshape(new), {"shape": new}, "SqueezeBackward1")
    dims = wrap_dims(dim, len(shape), "squeeze")
    new = tuple(s for i, s in enumerate(shape) if not (i in dims and s == 1))
    # torch's overloads: squeeze(), squeeze(int), squeeze(dims)
    variant = 0 if dim is None else 2 if isinstance(dim, (tuple, list)) else 1
    return named(apply(M.RESHAPE, input, shape=new), f"SqueezeBackward{variant}")


def unsqueeze(input, dim):
    """``input`` viewed with a size-1 dim at ``dim``, strided as torch's (stride 1 when it is the last).

    >>> import jitorch
    >>> jitorch.zeros(4, 3).t().unsqueeze(2).stride()
    (1, 3, 1)
    """
    data = input._data
    if type(dim) is int and type(data) is _ndarray and not MODES and -data.ndim - 1 <= dim <= data.ndim:
        dim %= data.ndim + 1
        return view_result(M.UNSQUEEZE, input, M.UNSQUEEZE.kernel(_dispatch.CPU_XP, data, dim), {"dim": dim})
    return apply(M.UNSQUEEZE, input, dim=wrap_dim(dim, input._data.ndim + 1, "unsqueeze"))


def flatten(input, start_dim=0, end_dim=-1):
    shape = input._data.shape
    if not shape:
        return reshape(input, 1)
    s, e = wrap_dim(start_dim, len(shape), "flatten"), wrap_dim(end_dim, len(shape), "flatten")
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    n = 1
    for x in shape[s:e + 1]:
        n *= x
    return reshape(input, shape[:s] + (n,) + shape[e + 1:])


def unflatten(input, dim, sizes):
    shape = input._data.shape
    d = wrap_dim(dim, len(shape), "unflatten")
    if not len(sizes):
        raise RuntimeError("unflatten: sizes must be non-empty")
    try:
        sizes = infer_shape(tuple(sizes), shape[d], "unflatten")
    except RuntimeError as e:
        if "is invalid for input of size" not in str(e):
            raise
        raise RuntimeError(f"unflatten: Provided sizes {list(sizes)} don't multiply up to the size of dim {d} "
                           f"({shape[d]}) in the input tensor") from None
    return reshape(input, shape[:d] + sizes + shape[d + 1:])


def ravel(input):
    return reshape(input, -1)


def movedim(input, source, destination):
    nd = input._data.ndim
    src = wrap_dims(source if isinstance(source, (tuple, list)) else [source], nd, "movedim")
    dst = wrap_dims(destination if isinstance(destination, (tuple, list)) else [destination], nd, "movedim")
    order = [d for d in range(nd) if d not in src]
    for s, d in sorted(zip(dst, src)):
        order.insert(s, d)
    return apply(M.PERMUTE, input, dims=tuple(order))


moveaxis = movedim


def _flat(tensors):
    return list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)


def expand(self, *sizes, size=None):
    data = self._data
    quick = int_sizes(sizes) if size is None and type(data) is _ndarray and not MODES else None
    if quick is not None and len(quick) >= data.ndim:
        shape = data.shape
        lead = len(quick) - len(shape)
        if -1 in quick:
            quick = quick[:lead] + tuple(n if s == -1 else s for n, s in zip(shape, quick[lead:]))
        if quick == shape:  # (no copy of the array, torch's node name)
            return view_result(M.RESHAPE, self, data.reshape(shape), {"shape": shape}, "ExpandBackward0")
        if min(quick) >= 0:
            strides = (0,) * lead
            for n, s, stride in zip(shape, quick[lead:], data.strides):
                if n == s:
                    strides += (stride,)
                elif n == 1:
                    strides += (0,)
                else:
                    break
            else:  # every size kept or broadcast from 1: nothing to refuse
                if data.flags.c_contiguous and data.size and _dispatch.CPU_XP is np:
                    # The row's kernel (`M._expand_kernel`) inline, its strides made above: a third of the call.
                    out = _ndarray(quick, data.dtype, data, 0, strides)
                    out.setflags(write=False)
                else:
                    out = M.EXPAND.kernel(_dispatch.CPU_XP, data, quick)
                return view_result(M.EXPAND, self, out, {"shape": quick})
    sizes = normalize_shape(sizes_or_keyword(sizes, size, "expand"), "expand")
    shape = self._data.shape
    if len(sizes) < len(shape):
        kind = "CPUBoolType" if self._data.dtype == np.bool_ else self.type()  # (torch's own spelling for bool)
        raise RuntimeError(f"expand({kind}{{{list(shape)}}}, size={list(sizes)}): the number of sizes provided "
                           f"({len(sizes)}) must be greater or equal to the number of dimensions in the tensor "
                           f"({len(shape)})")
    lead = len(sizes) - len(shape)
    out = []
    for i, s in enumerate(sizes):
        if i < lead:
            if s < 0:
                raise RuntimeError(f"expand: -1 is not allowed in a leading, non-existing dimension {i}")
            out.append(s)
            continue
        cur = shape[i - lead]
        if s == -1:
            s = cur
        if cur != s and cur != 1:
            raise RuntimeError(f"The expanded size of the tensor ({s}) must match the existing size ({cur}) at "
                               f"non-singleton dimension {i}.  Target sizes: {list(sizes)}.  Tensor sizes: "
                               f"{list(shape)}")
        out.append(s)
    out = tuple(out)
    if out == shape:
        return named(apply(M.RESHAPE, self, shape=shape), "ExpandBackward0")
    return apply(M.EXPAND, self, shape=out)


def broadcast_to(input, size):
    return expand(input, tuple(size))


def broadcast_shapes(*shapes):
    return Size(torch_broadcast_shapes(shapes))


def broadcast_tensors(*tensors):
    tensors = _flat(tensors)
    try:
        shape = Size(_broadcast_shape(*[x.shape for x in tensors]))
    except RuntimeError:
        raise_tensors_not_broadcastable([x.shape for x in tensors])
        raise
    # A tensor already of the broadcast shape comes back as itself, as in torch: a distribution built on a Parameter
    # keeps that Parameter as its ``loc`` (a leaf that collects ``.grad``), not a view of it.
    return tuple(x if tuple(x.shape) == tuple(shape) else expand(x, shape) for x in tensors)


def as_strided(input, size, stride, storage_offset=None):
    rel = 0 if storage_offset is None else storage_offset - input.storage_offset()
    return apply(M.AS_STRIDED, input, size=tuple(size), stride=tuple(stride), offset=rel, in_stride=input.stride())


def _unfold(self, dimension, size, step):
    """All windows of ``size`` elements with stride ``step`` along ``dimension``, as a new last dim (a view)."""
    nd = self._data.ndim
    d = wrap_dim(dimension, max(nd, 1), "unfold")
    length = self._data.shape[d] if nd else 1
    if size > length:
        raise RuntimeError(f"unfold: maximum size for tensor at dimension {d} is {length} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"unfold: step is {step} but must be > 0")
    if nd == 0:
        return self.reshape(1)
    return apply(M.UNFOLD, self, dimension=d, size=size, step=step)


from ._movement_copy import (  # noqa: E402 - split for size; re-exported here
    _contiguous, _copy_, _fill_, _repeat, _zero_, argwhere, atleast_1d, atleast_2d, atleast_3d, cat, clone,
    column_stack, concat, concatenate, dstack, flip, fliplr, flipud, hstack, nonzero, roll, rot90, stack, tile, vstack,
)
from ._movement_matrix import (  # noqa: E402 - split for size; re-exported here
    _diagonal_scatter, _slice_scatter_2d, block_diag, cartesian_prod, diag, diag_embed, diagonal, meshgrid, tril, triu,
)

_METHODS = {name: globals()[name] for name in __all__ if name not in ("cat", "concat", "concatenate", "stack",
                                                                    "hstack", "vstack", "dstack", "column_stack",
                                                                    "broadcast_tensors", "broadcast_shapes", "meshgrid",
                                                                    "cartesian_prod", "block_diag", "atleast_1d",
                                                                    "atleast_2d", "atleast_3d")}
_METHODS.update(
    view=_view, view_as=lambda self, other: _view(self, other.shape),
    reshape_as=lambda self, other: reshape(self, other.shape), expand=expand,
    expand_as=lambda self, other: expand(self, other.shape), contiguous=_contiguous, repeat=_repeat,
    split=lambda self, split_size, dim=0: split(self, split_size, dim),
    copy_=_copy_, fill_=_fill_, zero_=_zero_, unfold=_unfold, diagonal_scatter=_diagonal_scatter,
    slice_scatter_2d=_slice_scatter_2d,
    T=property(lambda self: permute(self, tuple(range(self._data.ndim - 1, -1, -1)))),
    mT=property(lambda self: transpose(self, -2, -1)), H=property(lambda self: t(self).conj()),
    mH=property(lambda self: transpose(self, -2, -1).conj()),
    # The in-place forms' nodes carry torch's names for them (squeeze_'s by overload: (), int, dims).
    squeeze_=lambda self, dim=None: _set_geometry(self, squeeze(self, dim), "SqueezeBackward" + (
        "3" if dim is None else "5" if isinstance(dim, (tuple, list)) else "4")),
    unsqueeze_=lambda self, dim: _set_geometry(self, unsqueeze(self, dim), "UnsqueezeBackward1"),
    t_=lambda self: _set_geometry(self, t(self), "TBackward1"),
    transpose_=lambda self, dim0, dim1: _set_geometry(self, transpose(self, dim0, dim1), "TransposeBackward1"),
    tril_=lambda self, diagonal=0: self.copy_(tril(self, diagonal)),
    triu_=lambda self, diagonal=0: self.copy_(triu(self, diagonal)),
)


def _set_geometry(self, new, grad_name):
    # In-place shape changes swap the array view; history follows the new view.
    if self._requires_grad and self.grad_fn is None and GradState.enabled:
        # (a leaf given the view's grad_fn would stop being a leaf and never receive its .grad)
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    self._data = new._data
    if new.grad_fn is not None:
        self.grad_fn = named(new, grad_name).grad_fn
    return self


for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
