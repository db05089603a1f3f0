"""Shape functions whose result is new memory, as PyTorch's are: flips and rolls, ``nonzero``,
``clone``/``contiguous``, ``tile``/``repeat``, and the in-place ``copy_``/``fill_``/``zero_``; composites of
``ops/movement.py`` rows. Concatenation and stacking (``cat``, ``stack``, ``hstack``..., ``atleast_*d``) are in
``_movement_join.py``, re-exported here.

Split from ``_movement.py`` (the views), which re-exports them and attaches the Tensor methods.

>>> import jitorch
>>> x = jitorch.arange(4).reshape(2, 2)
>>> jitorch.cat([x, x], 1).tolist(), jitorch.flip(x, 0).tolist(), x.repeat(1, 2).shape
([[0, 1, 0, 1], [2, 3, 2, 3]], [[2, 3], [0, 1]], jitorch.Size([2, 4]))
"""
from __future__ import annotations

import operator

import numpy as np

from . import _memory_format as MF
from ._dispatch import TENSOR_TYPES, apply, apply_inplace
from ._dispatch_inplace import fill_plain, refuse_internal_overlap, refuse_partial_overlap, writable_plain
from ._grad_state import GradState
from ._dtype import checked_scalar
from ._shape import broadcast_shapes, normalize_shape, sizes_or_keyword, wrap_dim, wrap_dims
from ._tensor import Tensor
from .autograd.graph import named
from .ops import half_cast, movement as M
from .ops.native_transpose import MIN_SIZE as _TILED_MIN
# _movement imports this module at its end, once these are defined.
from ._movement import narrow
from ._movement_join import (  # noqa: F401 - split for size; re-exported here
    _check_sequence, _nonempty_list, _tensor_list, atleast_1d, atleast_2d, atleast_3d, cat, column_stack, concat,
    concatenate, dstack, hstack, stack, vstack,
)

_ndarray = np.ndarray


def flip(input, *order, dims=None):
    dims = normalize_shape(sizes_or_keyword(order, dims, "flip", "dims"), "flip")
    return apply(M.FLIP, input, dims=wrap_dims(dims, input._data.ndim, "flip"))


def fliplr(input):
    return flip(input, 1)


def flipud(input):
    return flip(input, 0)


def roll(input, shifts, dims=None):
    shifts = tuple(shifts) if isinstance(shifts, (tuple, list)) else (operator.index(shifts),)
    dims = () if dims is None else tuple(dims) if isinstance(dims, (tuple, list)) else (operator.index(dims),)
    if not shifts:
        raise RuntimeError("roll: `shifts` required")
    if len(shifts) != len(dims) and not (len(shifts) == 1 and not dims):  # zip would silently drop the extra ones
        raise RuntimeError(f"roll: shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    if not dims:
        return roll(input.flatten(), shifts, 0).view(input.shape)
    if not input._data.size:
        return clone(input)  # ATen's roll of an empty tensor
    out = input
    for s, d in zip(shifts, dims):
        d = wrap_dim(d, out._data.ndim, "roll")
        n = out._data.shape[d]
        s %= n
        # ATen rolls one dim at a time as a cat of two narrows, so each step writes cat's memory format: the one the
        # pieces suggest when they agree, else row-major (a roll by a multiple of the size has an empty piece, which
        # suggests row-major). A channels-last input mostly stays channels-last; a transposed one becomes row-major.
        if not s:
            out = apply(M.CONTIGUOUS, out)
            continue
        a, b = narrow(out, d, n - s, s), narrow(out, d, 0, n - s)
        fmt = MF.contiguous_format
        if not MF.plainly_row_major(out._data):
            fmt = MF.suggested_format(a)
            fmt = fmt if fmt is MF.suggested_format(b) else MF.contiguous_format
        out = apply(M.CAT, a, b, dim=d, fmt=fmt)
    return out


def rot90(input, k=1, dims=(0, 1)):
    k %= 4
    d0, d1 = dims
    if k == 1:
        return flip(input, d1).transpose(d0, d1)
    if k == 2:
        return flip(input, d0, d1)
    if k == 3:
        return flip(input, d0).transpose(d0, d1)
    return clone(input)


def nonzero(input, *, as_tuple=False):
    idx = apply(M.NONZERO, input)
    if as_tuple:
        # a 0-d input acts as a one-element vector: one index 0 when its value is nonzero, none otherwise
        return tuple(idx.unbind(1)) if input._data.ndim else (idx.new_zeros(idx.shape[0]),)
    return idx


def argwhere(input):
    return nonzero(input)


def clone(input, *, memory_format=None):
    """A copy; ``preserve_format`` (the default) keeps the input's strides when it is dense, as PyTorch."""
    if memory_format is None or memory_format is MF.preserve_format:
        return apply(M.CLONE, input)
    MF.check_rank(memory_format, input._data.ndim)
    return apply(M.CONTIGUOUS, input, fmt=None if memory_format is MF.contiguous_format else memory_format)


def _contiguous(self, memory_format=None):
    """``self`` if it is contiguous in ``memory_format`` (default: row-major), else a copy laid out so."""
    if memory_format is None or memory_format is MF.contiguous_format:
        return self if self._data.flags.c_contiguous else apply(M.CONTIGUOUS, self)
    if memory_format is MF.preserve_format:
        raise RuntimeError("preserve memory format is unsupported by the contiguous operator")
    MF.check_rank(memory_format, self._data.ndim)
    return self if MF.is_contiguous_as(self._data, memory_format) else apply(M.CONTIGUOUS, self, fmt=memory_format)


def tile(input, *order, dims=None):
    dims = normalize_shape(sizes_or_keyword(order, dims, "tile", "dims"), "tile")
    if len(dims) < input._data.ndim:
        dims = (1,) * (input._data.ndim - len(dims)) + dims
    return _repeat(input, *dims)


def _repeat(self, *sizes, repeats=None):
    sizes = normalize_shape(sizes_or_keyword(sizes, repeats, "repeat", "repeats"), "repeat")
    if len(sizes) < self._data.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    x = self.reshape((1,) * (len(sizes) - self._data.ndim) + self._data.shape)
    target = [s * r for s, r in zip(x._data.shape, sizes)]
    if min(target, default=0) < 0:
        raise RuntimeError(f"repeat: Trying to create tensor with negative dimension {min(target)}: {target}")
    # Interleave a broadcast axis before each dim, then merge: one expand and one copy.
    shape = x._data.shape
    expanded_shape, unsq = [], []
    for s, r in zip(shape, sizes):
        unsq += [1, s]
        expanded_shape += [r, s]
    out = x.reshape(unsq).expand(expanded_shape)
    # Always a new row-major tensor, as torch's: a reshape could return a view of an expanded input (an overlapping
    # result that in-place ops refuse) or of the input itself (all repeats 1).
    return named(apply(M.CONTIGUOUS, out).view(tuple(s * r for s, r in zip(shape, sizes))), "RepeatBackward0")


def _copy_(self, src, non_blocking=False):
    if type(src) in TENSOR_TYPES and type(src._data) is _ndarray:
        data, dst = src._data, self._data
        src_base, dst_base = data.base, dst.base
        if src_base is not None or dst_base is not None:  # (arrays that own their memory share none)
            # torch refuses a source partly overlapping the destination: measured only for views of one owner
            # (NumPy names a view's owner as its base) or of a base that is itself a view (as_strided's buffer)
            try:
                if (data if src_base is None else src_base) is (dst if dst_base is None else dst_base) or (
                        src_base is not None and src_base.base is not None) or (
                        dst_base is not None and dst_base.base is not None):
                    refuse_partial_overlap(dst, data)
            except AttributeError:  # a base that is no array: memory NumPy does not own
                refuse_partial_overlap(dst, data)
        if not (GradState.enabled and src._requires_grad):
            dst = writable_plain(self)
            if dst is not None and data.shape == dst.shape and data.dtype == dst.dtype and (
                    src._base is None or src._view_ver == src._ver_owner._ver) and (
                    data.size < _TILED_MIN or data.flags.c_contiguous or not dst.flags.c_contiguous):
                # Nothing to cast, broadcast or record: the values straight in (NumPy buffers a source that
                # overlaps). A large transposed source into row-major memory takes the row's tiled copy.
                dst[...] = data
                self._bump_version()
                return self
            if dst is not None and data.shape == dst.shape and data.itemsize != dst.itemsize and (
                    src._base is None or src._view_ver == src._ver_owner._ver) and half_cast.astype_into(data, dst):
                self._bump_version()  # a float16/bfloat16 <-> float32 copy converted natively straight into dst
                return self
    if isinstance(src, (bool, int, float)):  # PyTorch copies a number like a 0-d tensor: a fill
        return _fill_(self, src)
    if not isinstance(src, Tensor):
        raise TypeError(f"copy_(): argument 'src' must be Tensor, not {type(src).__name__}")
    if src.device != self.device:
        src = src.to(self.device)
    if src._data.ndim > self._data.ndim:  # NumPy's broadcast_to would refuse with a message naming neither
        shape = broadcast_shapes(tuple(self.shape), tuple(src.shape), op="copy_")
        raise RuntimeError(f"copy_: output with shape {list(self.shape)} doesn't match the broadcast shape "
                           f"{list(shape)}")
    return apply_inplace(M.COPY, self, src, cast_check=False)


def _fill_(self, value):
    if isinstance(value, Tensor) and value._data.ndim:
        raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with {value._data.ndim} "
                           "dimensions.")
    name = "FillBackward2"
    if isinstance(value, Tensor):
        refuse_internal_overlap("fill_", self._data)
        name = "FillBackward3"
        if not value._requires_grad:
            value = value.item()
    if not isinstance(value, Tensor):
        value = checked_scalar(value, self.dtype)
        if fill_plain(self, value):
            return self
    return named_fill(apply_inplace(M.FILL, self, value, cast_check=False), name)


def named_fill(t, name):
    """torch names the in-place fills' nodes by overload (fill_(Scalar), fill_(Tensor), zero_); a fill of a view
    shows its view's node, which keeps its name."""
    fn = t.grad_fn
    return named(t, name) if fn is not None and type(fn).__name__ == "FillBackward0" else t


def _zero_(self):
    if fill_plain(self, 0):
        return self
    return named_fill(apply_inplace(M.FILL, self, 0, cast_check=False), "ZeroBackward0")
