"""Shape functions whose result is new memory, as PyTorch's are: flips and rolls, concatenation and stacking
(``cat``, ``stack``, ``hstack``...), ``atleast_*d``, ``nonzero``, ``clone``/``contiguous``, ``tile``/``repeat``,
and the in-place ``copy_``/``fill_``/``zero_``; composites of ``ops/movement.py`` rows.

Split from ``_movement.py`` (the views), which re-exports them and attaches the Tensor methods.

>>> import jitorch
>>> x = jitorch.arange(4).reshape(2, 2)
>>> jitorch.cat([x, x], 1).tolist(), jitorch.flip(x, 0).tolist(), x.repeat(1, 2).shape
([[0, 1, 0, 1], [2, 3, 2, 3]], [[2, 3], [0, 1]], jitorch.Size([2, 4]))
"""
from __future__ import annotations

import functools
import operator

import numpy as np

from . import _dispatch
from . import _memory_format as MF
from ._dispatch import TENSOR_TYPES, TORCH_TYPE_NAMES, apply, apply_inplace, sync_view
from ._creation_filled import fills_exactly
from ._dispatch_inplace import refuse_internal_overlap, refuse_partial_overlap, writable_plain
from ._grad_state import GradState
from ._dispatch_fast import keep_result
from ._dispatch_modes import MODES
from ._dtype import checked_scalar, promote_types
from ._shape import broadcast_shapes, normalize_shape, sizes_or_keyword, wrap_dim, wrap_dims
from ._tensor import Tensor
from .autograd.graph import named
from .ops import movement as M
from .ops.native_transpose import MIN_SIZE as _TILED_MIN
# _movement imports this module at its end, once these are defined.
from ._movement import _flat, narrow, unsqueeze

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


def _quick_join(op, tensors, dim, stacking):
    """The ``cat`` (``stacking`` false) or ``stack`` row's result for plain CPU tensors of one dtype whose shapes
    fit, else None: the general path then checks, promotes and names what is wrong. A cat of
    two 10x10 tensors spent three quarters of its 8 us in those checks and the dispatcher's; torch's call: 2.6 us."""
    if MODES or (type(tensors) is not list and type(tensors) is not tuple) or not tensors:
        return None
    first = tensors[0]
    if type(first) not in TENSOR_TYPES or type(first._data) is not np.ndarray:
        return None
    shape = first._data.shape
    ndim = len(shape) + stacking
    if type(dim) is not int or not -ndim <= dim < ndim or ndim == 0:
        return None
    d = dim + ndim if dim < 0 else dim
    if not stacking:
        if ndim == 1 and shape[0] == 0:  # a legacy empty: skipped, though promoted with (the general path)
            return None
        before, after = shape[:d], shape[d + 1:]
    # channels-last inputs take the cat of views (see stack); a cat's other layouts, ATen's format rule (`_cat_format`)
    contiguous = not stacking or ndim in (5, 6)
    dtype = first._data.dtype
    arrays = []
    grad = False
    for t in tensors:
        if type(t) not in TENSOR_TYPES:
            return None
        if t._base is not None and t._view_ver != t._ver_owner._ver:
            sync_view(t)
        a = t._data
        if type(a) is not np.ndarray or a.dtype is not dtype and a.dtype != dtype:  # mixed: the general path promotes
            return None
        s = a.shape
        if s != shape and (stacking or len(s) != ndim or s[:d] != before or s[d + 1:] != after
                           or ndim == 1 and s[0] == 0) or contiguous and not a.flags.c_contiguous:
            return None
        grad = grad or t._requires_grad
        arrays.append(a)
    attrs = {"dim": d}
    return keep_result(op, tuple(tensors), attrs, op.kernel(_dispatch.CPU_XP, *arrays, **attrs), grad)


def cat(tensors, dim=0, *, out=None):
    if out is None:
        result = _quick_join(M.CAT, tensors, dim, False)
        if result is not None:
            return result
    tensors = _tensor_list(tensors, "cat")
    if not tensors:
        raise ValueError("jitorch.cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if t._data.ndim == 0:
            raise RuntimeError(f"cat(): zero-dimensional tensor (at position {i}) cannot be concatenated; use "
                               "torch.stack, or reshape it to (1,) first")
    # PyTorch skips legacy 1-D empty tensors, whatever the other shapes; when all are such, it wraps no dim.
    kept = [t for t in tensors if not (t._data.ndim == 1 and t._data.shape[0] == 0)]
    if not kept:
        kept, dim = tensors[:1], 0
    ref = kept[0]
    d = wrap_dim(dim, ref._data.ndim, "cat")
    for i, t in enumerate(kept):
        if t._data.ndim != ref._data.ndim:
            raise RuntimeError(f"cat(): Tensors must have same number of dimensions: got {ref._data.ndim} and "
                               f"{t._data.ndim}")
        for ax, (a, b) in enumerate(zip(ref._data.shape, t._data.shape)):
            if ax != d and a != b:
                raise RuntimeError(f"cat(): Sizes of tensors must match except in dimension {d}. Expected size {a} but "
                                   f"got size {b} for tensor number {i} in the list.")
    fmt = _cat_format(kept)
    result = apply(M.CAT, *kept, dim=d) if fmt is None else apply(M.CAT, *kept, dim=d, fmt=fmt)
    if len(kept) < len(tensors):
        # The skipped empties still take part in the type promotion (a float accumulator started as tensor([])).
        promoted = functools.reduce(promote_types, (t.dtype for t in tensors))
        if promoted != result.dtype:
            result = result.to(promoted)
    if out is not None:
        from ._pointwise import _write_out

        if result.dtype.category > out.dtype.category:  # torch's cat says so with a TypeError of its own
            raise TypeError(f"cat(): input types can't be cast to the desired output type "
                            f"{TORCH_TYPE_NAMES[out.dtype.name]}; pass an out tensor of dtype {result.dtype}")
        return _write_out(result, out, "cat")
    return result


def concat(tensors, dim=0, *, out=None):
    """``cat`` under the name torch's errors then use.

    >>> import jitorch
    >>> jitorch.concat([jitorch.ones(1), jitorch.zeros(1)]).tolist()
    [1.0, 0.0]
    """
    _check_sequence(tensors, "concat")
    return cat(tensors, dim, out=out)


def concatenate(tensors, dim=0, *, out=None):
    """``cat`` under the name torch's errors then use (NumPy's).

    >>> import jitorch
    >>> jitorch.concatenate((jitorch.ones(1), jitorch.zeros(1))).tolist()
    [1.0, 0.0]
    """
    _check_sequence(tensors, "concatenate")
    return cat(tensors, dim, out=out)


def _cat_format(tensors):
    """ATen's memory format for a cat's result: the inputs' common suggested format, else ``contiguous_format``;
    None for C-contiguous inputs, whose NumPy concatenate is row-major already (a transposed input's would not be)."""
    if all(t._data.flags.c_contiguous for t in tensors):
        return None
    found = None
    for t in tensors:
        fmt = MF.suggested_format(t)
        if fmt is MF.contiguous_format or found is not None and fmt is not found:
            return MF.contiguous_format
        found = fmt
    return found


def _c_type_name(kind):
    """A type's name as torch's argument parser prints it: dotted for extension types (numpy.ndarray,
    collections.deque), bare for builtins and Python classes (heap types)."""
    heap = kind.__flags__ & (1 << 9)
    return kind.__name__ if heap or kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"


def _check_sequence(tensors, op):
    """torch's TypeError for a ``tensors`` argument that is not a list or tuple: a Tensor (iterating would silently
    unbind it, ``default_collate(tensor)`` say), a generator, a set, ..."""
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{op}(): argument 'tensors' (position 1) must be tuple of Tensors, not "
                        f"{_c_type_name(type(tensors))}")


def _tensor_list(tensors, op):
    """``tensors`` as a list, refusing other containers and entries with torch's TypeError (a collate of mixed
    items)."""
    _check_sequence(tensors, op)
    tensors = list(tensors)
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got {_c_type_name(type(t))}")
    return tensors


def _nonempty_list(tensors, op):
    """`_tensor_list`, and torch's error for an empty one (the h/v/d/column stacks)."""
    tensors = _tensor_list(tensors, op)
    if not tensors:
        raise RuntimeError(f"{op} expects a non-empty TensorList")
    return tensors


def stack(tensors, dim=0, *, out=None):
    if out is None:
        result = _quick_join(M.STACK, tensors, dim, True)
        if result is not None:
            return result
    tensors = _tensor_list(tensors, "stack")
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    shape = tensors[0]._data.shape
    for i, x in enumerate(tensors):
        if x._data.shape != shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(shape)} at entry 0 and "
                               f"{list(x.shape)} at entry {i}")
    d = wrap_dim(dim, len(shape) + 1, "stack")
    # One row for row-major inputs and inputs of other ranks (a permuted image stacks row-major, as torch's); a
    # non-contiguous 4-D/5-D input (channels-last) takes ATen's composite, whose layout is cat's (`_cat_format`):
    # a cat along ``d`` viewed with the new dim split off, or along a new last dim a cat of unsqueezed views.
    if out is None and not MODES and (len(shape) not in (4, 5) or all(x._data.flags.c_contiguous for x in tensors)):
        return apply(M.STACK, *tensors, dim=d)
    if out is None and d < len(shape):
        return named(cat(tensors, d).view(shape[:d] + (len(tensors),) + shape[d:]), "StackBackward0")
    return named(cat([unsqueeze(x, d) for x in tensors], d, out=out), "StackBackward0")


def atleast_1d(*tensors):
    out = [x.reshape(1) if x._data.ndim == 0 else x for x in _flat(tensors)]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_2d(*tensors):
    out = [x.reshape(1, -1) if x._data.ndim < 2 else x for x in _flat(tensors)]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_3d(*tensors):
    out = []
    for x in _flat(tensors):
        if x._data.ndim == 0:
            x = x.reshape(1, 1, 1)
        elif x._data.ndim == 1:
            x = x.reshape(1, -1, 1)
        elif x._data.ndim == 2:
            x = x.unsqueeze(-1)
        out.append(x)
    return out[0] if len(out) == 1 else tuple(out)


def hstack(tensors):
    tensors = _nonempty_list(tensors, "hstack")
    tensors = atleast_1d(*tensors)
    tensors = [tensors] if isinstance(tensors, Tensor) else tensors
    return cat(tensors, 0 if tensors[0]._data.ndim == 1 else 1)


def vstack(tensors):
    tensors = _nonempty_list(tensors, "vstack")
    t2 = atleast_2d(*tensors)
    return cat([t2] if isinstance(t2, Tensor) else t2, 0)


def dstack(tensors):
    tensors = _nonempty_list(tensors, "dstack")
    t3 = atleast_3d(*tensors)
    return cat([t3] if isinstance(t3, Tensor) else t3, 2)


def column_stack(tensors):
    tensors = _nonempty_list(tensors, "column_stack")
    return hstack([x.reshape(-1, 1) if x._data.ndim <= 1 else x for x in tensors])


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
    if isinstance(value, Tensor):
        refuse_internal_overlap("fill_", self._data)
        if not value._requires_grad:
            value = value.item()
    if not isinstance(value, Tensor):
        value = checked_scalar(value, self.dtype)
        data = writable_plain(self)
        if data is not None and fills_exactly(value, data.dtype):
            data.fill(value)
            self._bump_version()
            return self
    return apply_inplace(M.FILL, self, value, cast_check=False)


def _zero_(self):
    data = writable_plain(self)
    if data is not None:
        data.fill(0)  # zero in every dtype
        self._bump_version()
        return self
    return apply_inplace(M.FILL, self, 0, cast_check=False)
