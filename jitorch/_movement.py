"""Public shape and view functions and their Tensor methods; all composites of ``ops/movement.py`` rows.

>>> import jitorch
>>> x = jitorch.arange(6).reshape(2, 3)
>>> x.permute(1, 0).shape, x.unsqueeze(0).shape, jitorch.cat([x, x], 1).shape
(jitorch.Size([3, 2]), jitorch.Size([1, 2, 3]), jitorch.Size([2, 6]))
"""
from __future__ import annotations

import operator

from . import _memory_format as MF
from ._dispatch import TORCH_TYPE_NAMES, apply, apply_inplace
from ._dtype import checked_scalar
from ._shape import infer_shape, normalize_shape, sizes_or_keyword, view_strides, wrap_dim, wrap_dims
from ._tensor import Tensor
from .autograd.graph import named
from .ops import movement as M

__all__ = [
    "reshape", "permute", "transpose", "swapaxes", "swapdims", "t", "adjoint", "squeeze", "unsqueeze", "flatten",
    "unflatten", "narrow", "select", "split", "chunk", "unbind", "tensor_split", "movedim", "moveaxis", "flip",
    "fliplr", "flipud", "roll", "rot90", "cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack",
    "column_stack", "tile", "broadcast_to", "broadcast_tensors", "broadcast_shapes", "as_strided", "diagonal",
    "tril", "triu", "nonzero", "argwhere", "clone", "atleast_1d", "atleast_2d", "atleast_3d", "ravel", "diag",
    "diag_embed", "block_diag", "meshgrid", "cartesian_prod",
]


def _view(self, *shape, size=None, dtype=None):
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
    shape = infer_shape(normalize_shape(sizes_or_keyword(sizes, shape, "reshape", "shape"), "reshape"),
                        input._data.size, "reshape")
    if input._data.flags.c_contiguous:
        return apply(M.RESHAPE, input, shape=shape)
    item = input._data.itemsize
    if view_strides(input._data.shape, tuple(s // item for s in input._data.strides), shape) is not None:
        return apply(M.RESHAPE, input, shape=shape)
    return apply(M.RESHAPE, apply(M.CONTIGUOUS, input), shape=shape)


def permute(input, *order, dims=None):
    dims = normalize_shape(sizes_or_keyword(order, dims, "permute", "dims"), "permute")
    if len(dims) != input._data.ndim:
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does not match the length "
                           f"of the desired ordering of dimensions i.e. input.dim() = {input._data.ndim} is not equal "
                           f"to len(dims) = {len(dims)}")
    return apply(M.PERMUTE, input, dims=wrap_dims(dims, input._data.ndim, "permute"))


def transpose(input, dim0, dim1):
    nd = input._data.ndim
    d0, d1 = wrap_dim(dim0, nd, "transpose"), wrap_dim(dim1, nd, "transpose")
    dims = list(range(nd))
    dims[d0], dims[d1] = d1, d0
    return named(apply(M.PERMUTE, input, dims=tuple(dims)), "TransposeBackward0")


def swapaxes(input, axis0, axis1):
    return transpose(input, axis0, axis1)


swapdims = transpose


def t(input):
    if input._data.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input._data.ndim}D")
    return named(transpose(input, 0, 1) if input._data.ndim == 2 else input.view(input.shape), "TBackward0")


def adjoint(input):
    return transpose(input, -2, -1)


def squeeze(input, dim=None):
    shape = input._data.shape
    dims = wrap_dims(dim, len(shape), "squeeze")
    new = tuple(s for i, s in enumerate(shape) if not (i in dims and s == 1))
    # torch's overloads: squeeze(), squeeze(int), squeeze(dims)
    variant = 0 if dim is None else 2 if isinstance(dim, (tuple, list)) else 1
    return named(apply(M.RESHAPE, input, shape=new), f"SqueezeBackward{variant}")


def unsqueeze(input, dim):
    shape = list(input._data.shape)
    d = wrap_dim(dim, len(shape) + 1, "unsqueeze")
    shape.insert(d, 1)
    return named(apply(M.RESHAPE, input, shape=tuple(shape)), "UnsqueezeBackward0")


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
    sizes = infer_shape(tuple(sizes), shape[d], "unflatten")
    return reshape(input, shape[:d] + sizes + shape[d + 1:])


def ravel(input):
    return reshape(input, -1)


def _key_for(ndim, dim, item):
    return (slice(None),) * dim + (item,)


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
    return apply(M.SLICE, input, key=_key_for(input._data.ndim, d, slice(start, start + length)))


def select(input, dim, index):
    d = wrap_dim(dim, input._data.ndim, "select")
    size = input._data.shape[d]
    index = operator.index(index)
    if not -size <= index < size:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(input.shape)} at dimension "
                         f"{d}")
    return named(apply(M.SLICE, input, key=_key_for(input._data.ndim, d, index % size)), "SelectBackward0")


def split(tensor, split_size_or_sections, dim=0):
    d = wrap_dim(dim, tensor._data.ndim, "split")
    size = tensor._data.shape[d]
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
    out, start = [], 0
    name = "SplitBackward0" if isinstance(split_size_or_sections, int) else "SplitWithSizesBackward0"
    for s in sizes:
        out.append(named(narrow(tensor, d, start, s), name))
        start += s
    return tuple(out)


def chunk(input, chunks, dim=0):
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    d = wrap_dim(dim, input._data.ndim, "chunk")
    size = input._data.shape[d]
    if size == 0:  # PyTorch returns ``chunks`` empty pieces of an empty dim
        return tuple(narrow(input, d, 0, 0) for _ in range(chunks))
    step = -(-size // chunks)
    return split(input, step, d)


def tensor_split(input, indices_or_sections=None, dim=0, *, sections=None, indices=None):
    # NOTE: torch's overloads name the second argument ``sections``, ``indices`` or ``tensor_indices_or_sections``.
    given = [v for v in (indices_or_sections, sections, indices) if v is not None]
    if len(given) != 1:
        raise TypeError("tensor_split() expects exactly one of sections, indices or tensor_indices_or_sections")
    indices_or_sections = given[0]
    if isinstance(indices_or_sections, Tensor):
        indices_or_sections = indices_or_sections.tolist()
    d = wrap_dim(dim, input._data.ndim, "tensor_split")
    size = input._data.shape[d]
    if isinstance(indices_or_sections, int):
        n = indices_or_sections
        bounds = [i * (size // n) + min(i, size % n) for i in range(n + 1)]
    else:
        bounds = [0] + [min(int(i), size) for i in indices_or_sections] + [size]
    return tuple(narrow(input, d, a, max(0, b - a)) for a, b in zip(bounds, bounds[1:]))


def unbind(input, dim=0):
    d = wrap_dim(dim, input._data.ndim, "unbind")
    return tuple(named(select(input, d, i), "UnbindBackward0") for i in range(input._data.shape[d]))


def movedim(input, source, destination):
    nd = input._data.ndim
    src = wrap_dims(source if isinstance(source, (tuple, list)) else [source], nd, "movedim")
    dst = wrap_dims(destination if isinstance(destination, (tuple, list)) else [destination], nd, "movedim")
    order = [d for d in range(nd) if d not in src]
    for s, d in sorted(zip(dst, src)):
        order.insert(s, d)
    return apply(M.PERMUTE, input, dims=tuple(order))


moveaxis = movedim


def flip(input, *order, dims=None):
    dims = normalize_shape(sizes_or_keyword(order, dims, "flip", "dims"), "flip")
    return apply(M.FLIP, input, dims=wrap_dims(dims, input._data.ndim, "flip"))


def fliplr(input):
    return flip(input, 1)


def flipud(input):
    return flip(input, 0)


def roll(input, shifts, dims=None):
    if dims is None:
        return roll(input.flatten(), shifts, 0).view(input.shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    out = input
    for s, d in zip(shifts, dims):
        n = out._data.shape[wrap_dim(d, out._data.ndim, "roll")]
        if n == 0:
            continue
        s %= n
        if s:
            out = cat([narrow(out, d, n - s, s), narrow(out, d, 0, n - s)], d)
    return out if out is not input else clone(input)


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


def cat(tensors, dim=0, *, out=None):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if t._data.ndim == 0:
            raise RuntimeError(f"cat(): zero-dimensional tensor (at position {i}) cannot be concatenated; use "
                               "torch.stack, or reshape it to (1,) first")
    # PyTorch skips legacy 1-D empty tensors, whatever the other shapes.
    kept = [t for t in tensors if not (t._data.ndim == 1 and t._data.shape[0] == 0)] or tensors[:1]
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
    result = apply(M.CAT, *kept, dim=d)
    if out is not None:
        from ._pointwise import _write_out

        if result.dtype.category > out.dtype.category:  # torch's cat says so with a TypeError of its own
            raise TypeError(f"cat(): input types can't be cast to the desired output type "
                            f"{TORCH_TYPE_NAMES[out.dtype.name]}; pass an out tensor of dtype {result.dtype}")
        return _write_out(result, out, "cat")
    return result


concat = concatenate = cat


def stack(tensors, dim=0, *, out=None):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    shape = tensors[0]._data.shape
    for i, x in enumerate(tensors):
        if x._data.shape != shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(shape)} at entry 0 and "
                               f"{list(x.shape)} at entry {i}")
    d = wrap_dim(dim, len(shape) + 1, "stack")
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


def _flat(tensors):
    return list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)


def hstack(tensors):
    tensors = atleast_1d(*tensors)
    tensors = [tensors] if isinstance(tensors, Tensor) else tensors
    return cat(tensors, 0 if tensors[0]._data.ndim == 1 else 1)


def vstack(tensors):
    t2 = atleast_2d(*tensors)
    return cat([t2] if isinstance(t2, Tensor) else t2, 0)


def dstack(tensors):
    t3 = atleast_3d(*tensors)
    return cat([t3] if isinstance(t3, Tensor) else t3, 2)


def column_stack(tensors):
    return hstack([x.reshape(-1, 1) if x._data.ndim <= 1 else x for x in tensors])


def expand(self, *sizes, size=None):
    sizes = normalize_shape(sizes_or_keyword(sizes, size, "expand"), "expand")
    shape = self._data.shape
    if len(sizes) < len(shape):
        raise RuntimeError(f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal to the "
                           f"number of dimensions in the tensor ({len(shape)})")
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
        return apply(M.RESHAPE, self, shape=shape)
    return apply(M.EXPAND, self, shape=out)


def broadcast_to(input, size):
    return expand(input, tuple(size))


def broadcast_shapes(*shapes):
    from ._shape import broadcast_shapes as _bs
    from ._tensor import Size

    return Size(_bs(*[(s,) if isinstance(s, int) else tuple(s) for s in shapes]))


def broadcast_tensors(*tensors):
    tensors = _flat(tensors)
    shape = broadcast_shapes(*[x.shape for x in tensors])
    return tuple(expand(x, shape) for x in tensors)


def as_strided(input, size, stride, storage_offset=None):
    rel = 0 if storage_offset is None else storage_offset - input.storage_offset()
    return apply(M.AS_STRIDED, input, size=tuple(size), stride=tuple(stride), offset=rel, in_stride=input.stride())


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
    # Interleave a broadcast axis before each dim, then merge: one expand and one copy.
    shape = x._data.shape
    expanded_shape, unsq = [], []
    for s, r in zip(shape, sizes):
        unsq += [1, s]
        expanded_shape += [r, s]
    out = x.reshape(unsq).expand(expanded_shape)
    return out.reshape(tuple(s * r for s, r in zip(shape, sizes)))


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


def _copy_(self, src, non_blocking=False):
    if isinstance(src, (bool, int, float)):  # PyTorch copies a number like a 0-d tensor: a fill
        return _fill_(self, src)
    if not isinstance(src, Tensor):
        raise TypeError(f"copy_(): argument 'src' must be Tensor, not {type(src).__name__}")
    if src.device != self.device:
        src = src.to(self.device)
    return apply_inplace(M.COPY, self, src, cast_check=False)


def _fill_(self, value):
    if isinstance(value, Tensor) and value._data.ndim:
        raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with {value._data.ndim} "
                           "dimensions.")
    if isinstance(value, Tensor) and not value._requires_grad:
        value = value.item()
    if not isinstance(value, Tensor):
        value = checked_scalar(value, self.dtype)
    return apply_inplace(M.FILL, self, value, cast_check=False)


def _zero_(self):
    return apply_inplace(M.FILL, self, 0, cast_check=False)


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
    squeeze_=lambda self, dim=None: _set_geometry(self, squeeze(self, dim)),
    unsqueeze_=lambda self, dim: _set_geometry(self, unsqueeze(self, dim)),
    t_=lambda self: _set_geometry(self, t(self)),
    transpose_=lambda self, dim0, dim1: _set_geometry(self, transpose(self, dim0, dim1)),
    tril_=lambda self, diagonal=0: self.copy_(tril(self, diagonal)),
    triu_=lambda self, diagonal=0: self.copy_(triu(self, diagonal)),
)


def _set_geometry(self, new):
    # In-place shape changes swap the array view; history follows the new view.
    self._data = new._data
    if new.grad_fn is not None:
        self.grad_fn = new.grad_fn
    return self


for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
