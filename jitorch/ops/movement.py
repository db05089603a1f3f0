"""Shape and view primitives. View rows return array views: the output shares memory with the input.

>>> import jitorch
>>> x = jitorch.zeros(2, 3)
>>> v = x.t()
>>> v[0, 1] = 5.0
>>> x
tensor([[0., 0., 0.],
        [5., 0., 0.]])
"""
from __future__ import annotations

import numpy as np

from ..runtime import memory_owner, move_array, strided_view
from ..runtime.host_pointer import data_address
from ..runtime.meta import MetaArray
from .inplace_views import view_backward
from . import half_cast, native_transpose
from .native_transpose import transposed_copy
from .._memory_format import empty_in, in_format, preserve_copy
from .table import NOT_DIFFERENTIABLE, Opaque, Pointwise, View, defop
from .triangle_masks import triangle


def _reshape_backward(ctx, g):
    return g.reshape(ctx.in_meta[0][0])


RESHAPE = defop("view", lambda xp, a, shape: a.reshape(shape), _reshape_backward, View(), view=True, meta=True,
                grad_name="ViewBackward0")


def _unsqueeze_kernel(xp, a, dim):
    """``a`` with a size-1 dim inserted at ``dim``, strided as ATen's: the new dim's stride is the size times the
    stride of the dim it precedes (1 at the end), every other stride kept. NumPy's reshape gives a trailing 1 its
    left neighbour's stride and recomputes the strides of size-1 dims: layouts cat/stack then read differently."""
    shape = a.shape
    out = a.reshape(shape[:dim] + (1,) + shape[dim:])
    # Without size-1 dims NumPy's strides are ATen's but for a trailing 1 after a dim of stride other than 1.
    if 1 not in shape and (dim < len(shape) or not dim or a.strides[-1] == a.itemsize):
        return out
    if not a.size or type(a) is not np.ndarray and type(a) is not MetaArray:  # (empty arrays' strides are zeroed)
        return out
    st = a.strides
    end = dim == len(shape)
    want = st[:dim] + (a.itemsize if end else shape[dim] * st[dim],) + st[dim:]
    if out.strides == want:  # (batch-size-1 and keepdim shapes mostly: NumPy's strides were ATen's already)
        return out
    if end:  # every stride kept and one element's appended: a view as a one-element subarray dtype
        sub = _ONE_ELEMENT.get(a.dtype)
        if sub is None:
            sub = _ONE_ELEMENT[a.dtype] = np.dtype((a.dtype, (1,)))
        return a.view(sub)
    return _restrided(a, out.shape, want)


_ONE_ELEMENT = {}  # dtype -> the subarray dtype of one such element


def _restrided(a, shape, strides):
    """A view of ``a``'s memory with byte ``strides`` whose ``.base`` chain reaches ``a``'s owner (as_strided's
    stops at a wrapper object, which would hide the sharing from the owner lookups); read-only if ``a`` is."""
    root = memory_owner(a)
    if type(root) is np.ndarray and not root.flags.forc:  # a dense block in permuted order (a channels-last result)
        dense = root.transpose(sorted(range(root.ndim), key=lambda d: -root.strides[d]))
        root = dense if dense.flags.c_contiguous else None
    if type(root) is not np.ndarray:  # no dense owner to view (ravel would copy it)
        return np.lib.stride_tricks.as_strided(a, shape, strides, subok=True)
    out = np.ndarray(shape, a.dtype, buffer=root.ravel(order="K").view(np.uint8),
                     offset=data_address(a) - data_address(root), strides=strides)
    if not a.flags.writeable:
        out.flags.writeable = False
    return out if type(a) is np.ndarray else out.view(type(a))  # a meta array stays one


def _unsqueeze_backward(ctx, g):
    return g.squeeze(ctx.attrs["dim"])


UNSQUEEZE = defop("unsqueeze", _unsqueeze_kernel, _unsqueeze_backward, View(), view=True, meta=True,
                  grad_name="UnsqueezeBackward0")


def _inverse_permutation(dims):
    inv = [0] * len(dims)
    for i, d in enumerate(dims):
        inv[d] = i
    return tuple(inv)


PERMUTE = defop("permute", lambda xp, a, dims: a.transpose(dims),
                lambda ctx, g: g.permute(_inverse_permutation(ctx.attrs["dims"])), View(), view=True)

def _expand_kernel(xp, a, shape):
    """``broadcast_to(a, shape)``. For a contiguous NumPy array the read-only view is built directly from the
    strides (stride 0 on the broadcast dims): ``np.broadcast_to`` sets up an iterator and costs several times more,
    and every backward of a sum or mean expands its gradient here."""
    lead = len(shape) - a.ndim
    if type(a) is not np.ndarray or lead < 0 or not a.size:
        return xp.broadcast_to(a, shape)
    strides = (0,) * lead
    for n, s, st in zip(a.shape, shape[lead:], a.strides):
        if n == s:
            strides += (st,)
        elif n == 1 and s >= 0:
            strides += (0,)
        else:
            return xp.broadcast_to(a, shape)  # not broadcastable: NumPy's error
    if a.flags.c_contiguous:
        out = np.ndarray(shape, a.dtype, a, 0, strides)
        out.setflags(write=False)  # as broadcast_to's: in-place writes to an expanded tensor are refused
        return out
    out = xp.broadcast_to(a, shape)
    if out.strides != strides:  # broadcast_to zeroes a kept size-1 dim's stride, which torch keeps
        out = strided_view(np, a, shape, [st // a.itemsize for st in strides])
        out.setflags(write=False)  # (a view of a's memory that fill_ can make writable again, as_strided's is not)
    return out


EXPAND = defop("expand", _expand_kernel, lambda ctx, g: g.sum_to_size(ctx.in_meta[0][0]), View(), view=True,
               meta=True)


def _slice_kernel(xp, a, key):
    # A trailing Ellipsis makes NumPy return a 0-d view instead of a scalar copy when every dim is indexed.
    out = a[key + (Ellipsis,)]
    if None in key:
        # NumPy gives a None-inserted dim stride 0; torch gives it the stride an unsqueeze would (size * stride of
        # the next dim). Re-inserting the size-1 dims by reshape (never a copy) yields torch's strides.
        shape = out.shape
        out = out.reshape(tuple(n for n in shape if n != 1)).reshape(shape)
    return out


SLICE = defop("slice", _slice_kernel, view_backward, View(), view=True, meta=True, grad_name="SliceBackward0")


def _as_strided_kernel(xp, a, size, stride, offset, in_stride=None):
    return strided_view(xp, a, size, stride, offset)


def _storage_positions(size, stride, offset):
    """Flat storage offsets (relative to the input's first element) of every element of a strided geometry."""
    pos = np.full(tuple(size), offset, dtype=np.int64)
    for d, (n, st) in enumerate(zip(size, stride)):
        pos = pos + (np.arange(n, dtype=np.int64) * st).reshape([n if i == d else 1 for i in range(len(size))])
    return pos.reshape(-1)


def _as_strided_backward(ctx, g):
    # Scatter-add the gradient into the storage positions the view reads (overlapping windows accumulate), then
    # gather the positions the input's own elements occupy: a transposed or sliced input is not laid out as arange.
    from .. import _creation

    shape = ctx.in_meta[0][0]
    attrs = ctx.attrs
    in_stride = attrs.get("in_stride")
    if in_stride is None:
        in_stride = [int(np.prod(shape[d + 1:])) for d in range(len(shape))]
    out_pos = _storage_positions(attrs["size"], attrs["stride"], attrs["offset"])
    in_pos = _storage_positions(shape, in_stride, 0)
    lo = min(out_pos.min(initial=0), in_pos.min(initial=0))
    span = max(out_pos.max(initial=0), in_pos.max(initial=0)) - lo + 1
    scatter = _creation.tensor(out_pos - lo, device=g.device)
    gather = _creation.tensor(in_pos - lo, device=g.device)
    storage = g.new_zeros(int(span)).index_add(0, scatter, g.reshape(-1))
    return storage.index_select(0, gather).reshape(shape)


AS_STRIDED = defop("as_strided", _as_strided_kernel, _as_strided_backward, View(), view=True, meta=True)


def _diagonal_kernel(xp, a, offset, dim1, dim2):
    # NumPy's diagonal views are read-only; PyTorch's are writable, so build the same view from strides.
    n1, n2 = a.shape[dim1], a.shape[dim2]
    length = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    item = a.itemsize
    s1, s2 = a.strides[dim1] // item, a.strides[dim2] // item
    start = (offset * s2 if offset >= 0 else -offset * s1) if length else 0
    rest = [d for d in range(a.ndim) if d not in (dim1, dim2)]
    shape = tuple(a.shape[d] for d in rest) + (length,)
    strides = tuple(a.strides[d] // item for d in rest) + (s1 + s2,)
    return strided_view(xp, a, shape, strides, start)


DIAGONAL = defop("diagonal", _diagonal_kernel, view_backward, View(), view=True, meta=True)


def _unfold_kernel(xp, a, dimension, size, step):
    count = (a.shape[dimension] - size) // step + 1
    st = [s // a.itemsize for s in a.strides]
    shape = a.shape[:dimension] + (count,) + a.shape[dimension + 1:] + (size,)
    strides = st[:dimension] + [st[dimension] * step] + st[dimension + 1:] + [st[dimension]]
    return strided_view(xp, a, shape, strides, 0)


def _unfold_backward(ctx, g):
    # Windows may overlap: accumulate each window's gradient through an index map of the input.
    from .. import _creation

    shape = ctx.in_meta[0][0]
    n = 1
    for s in shape:
        n *= s
    index = _creation.arange(n, device=g.device).reshape(shape).unfold(
        ctx.attrs["dimension"], ctx.attrs["size"], ctx.attrs["step"]).reshape(-1)
    return g.new_zeros(n).index_add(0, index, g.reshape(-1)).reshape(shape)


UNFOLD = defop("unfold", _unfold_kernel, _unfold_backward, View(), view=True, meta=True)

def _flip_kernel(xp, a, dims):
    # The reversed copy keeps the input's layout, as ATen's flip (so rot90 of a transposed tensor is row-major, as
    # torch's). A row-major input's reversed view is copied by `native_transpose`'s kernel where NumPy's copy is
    # slow (a reversed last dim). Slicing costs a microsecond less than ``xp.flip``.
    view = a[tuple(slice(None, None, -1) if d in dims else slice(None) for d in range(a.ndim))] if a.ndim else a
    if xp is np and a.flags.c_contiguous:
        out = transposed_copy(view)
        if out is not None:
            return out
    return preserve_copy(xp, view)


FLIP = defop("flip", _flip_kernel, lambda ctx, g: g.flip(ctx.attrs["dims"]), Opaque("reversed copy"))


def _cat_backward(ctx, *grads):
    (g,) = grads
    dim = ctx.attrs["dim"]
    out, start = [], 0
    for meta in ctx.in_meta:
        size = meta[0][dim] if len(meta[0]) else 0
        out.append(g.narrow(dim, start, size) if len(meta[0]) else None)
        start += size
    return tuple(out)


def _cat_kernel(xp, *arrays, dim, fmt=None):
    if fmt is None:
        return xp.concatenate(arrays, axis=dim)
    shape = list(arrays[0].shape)
    shape[dim] = sum(a.shape[dim] for a in arrays)
    return xp.concatenate(arrays, axis=dim, out=empty_in(xp, tuple(shape), xp.result_type(*arrays), fmt))


# ``fmt``: a memory format to write the result in (ATen's cat rule, or a padding kernel's layout, decided by the
# caller); without it the array module's concatenate follows its inputs' strides.
CAT = defop("cat", _cat_kernel, _cat_backward, Opaque("concatenation"), promotion="promote", meta=True)

def _stack_backward(ctx, g):
    dim = ctx.attrs["dim"]
    return tuple(g.select(dim, i) for i in range(len(ctx.in_meta)))


# ``torch.stack`` in one call: as a ``cat`` of unsqueezed inputs it cost a dispatch per input (100 tensors of
# 100x100: 423 us, torch 108).
def _stack_kernel(xp, *arrays, dim):
    first = arrays[0]
    shape = first.shape[:dim] + (len(arrays),) + first.shape[dim:]
    if dim < first.ndim and first.flags.c_contiguous:
        # Row-major inputs: their concatenate along ``dim`` is the stack with the new dim merged into ``dim``
        # (no views, no ``out``: 1.7 us for two 32x32, the general form 2.5).
        out = xp.concatenate(arrays, axis=dim).reshape(shape)
        if out.flags.c_contiguous:
            return out
    # Row-major whatever the inputs' strides, as torch's (NumPy's stack would follow a transposed input's); NumPy's
    # stack is this concatenate of views after checks of its own (1.5 of a small stack's 2.8 us).
    key = (slice(None),) * dim + (None,)
    return xp.concatenate([a[key] for a in arrays], axis=dim, out=xp.empty(shape, xp.result_type(*arrays)))


STACK = defop("stack", _stack_kernel, _stack_backward, Opaque("stacking"), promotion="promote", meta=True,
              grad_name="StackBackward0")

# A copy with a zero (broadcast) stride takes preserve_copy's dense order; any other is order="K" (the same layout),
# tested inline: preserve_copy's call was about 0.1 us of a small clone's 1 us kernel (the cast row's does the same).
CLONE = defop("clone", lambda xp, a: a.copy(order="K") if 0 not in a.strides else preserve_copy(xp, a),
              lambda ctx, g: g, Pointwise("{0}"))


def _contiguous_kernel(xp, a, fmt=None):
    return _row_major_copy(xp, a) if fmt is None else in_format(xp, a, fmt)


def _row_major_copy(xp, a):
    """``a`` copied row-major. NumPy copies in the result's order, its innermost loop along the last dim: where the
    trailing dims are short and strided in ``a`` and the dim before them is a long contiguous run (pixel shuffle
    factors), the copy runs one index of the short dims at a time, reading those runs (3x faster for a 32x64x32x32
    pixel shuffle, or unshuffle of a channels-last input). A transpose of long dims (``x.t()``, a head merge) runs
    as one tiled kernel (`native_transpose`: 1024x1024 float32 in 0.4 ms against NumPy's 3.3)."""
    if xp is not np or a.size < native_transpose.MIN_SIZE or a.flags.c_contiguous:
        return a.copy(order="C")
    out = transposed_copy(a)
    if out is not None:
        return out
    if a.size < 65536 or a.strides[-1] == a.itemsize:
        return a.copy(order="C")
    k, n = 0, 1
    while k < a.ndim - 1 and n * a.shape[-1 - k] <= 16:
        n *= a.shape[-1 - k]
        k += 1
    if not k or a.shape[-1 - k] < 16 or a.strides[-1 - k] != a.itemsize:
        return a.copy(order="C")
    out = np.empty(a.shape, a.dtype)
    for index in np.ndindex(a.shape[a.ndim - k:]):
        out[(Ellipsis,) + index] = a[(Ellipsis,) + index]
    return out


# ``fmt``: a channels-last memory format to lay the copy out in (None: C order).
CONTIGUOUS = defop("contiguous", _contiguous_kernel, lambda ctx, g: g, Pointwise("{0}"), grad_name="CloneBackward0")


def _cast_kernel(xp, a, dtype):
    if a.dtype.kind == "c" and np.dtype(dtype).kind != "c":
        # PyTorch drops the imaginary part (NumPy would too, with a ComplexWarning), except into bool: nonzero
        a = a != 0 if np.dtype(dtype) == np.bool_ else a.real
    if 0 in a.strides:
        return preserve_copy(xp, a, dtype)
    out = half_cast.astype(a, dtype) if xp is np else None
    return a.astype(dtype, order="K") if out is None else out


def _cast_backward(ctx, g):
    # A real -> complex cast's gradient is the real part of the complex gradient (the cast kernel takes it).
    return g.to(ctx.in_meta[0][1])


CAST = defop("to_copy", _cast_kernel, _cast_backward, Pointwise("({dtype}){0}"),
             meta=True, grad_name="ToCopyBackward0")


def _copy_kernel(xp, dst, src):
    if src.shape != dst.shape or src.dtype != dst.dtype:
        out = half_cast.astype(src, dst.dtype) if src.shape == dst.shape and xp is np else None
        return xp.broadcast_to(src, dst.shape).astype(dst.dtype, copy=True) if out is None else out
    # Into a row-major ``dst``, a transposed ``src`` is copied row-major here (one tiled kernel), so the write into
    # ``dst`` that follows is a plain copy, not NumPy's element-by-element transpose.
    out = transposed_copy(src) if dst.flags.c_contiguous else None
    return src.copy() if out is None else out


def _copy_backward(ctx, g):
    meta = ctx.in_meta  # None when src already had dst's shape and dtype
    gsrc = None
    if ctx.needs_grad(1):
        gsrc = g if meta is None else g.sum_to_size(meta[1][0]).to(meta[1][1])
    return (g * 0 if ctx.needs_grad(0) else None), gsrc


COPY = defop("copy", _copy_kernel, _copy_backward, Pointwise("{1}"), grad_name="CopyBackwards", meta=True)


def _fill_kernel(xp, dst, value):
    return xp.full(dst.shape, value, dtype=dst.dtype)


FILL = defop("fill", _fill_kernel, lambda ctx, g: (g * 0, g.sum() if ctx.needs_grad(1) else None),
             Pointwise("{1}"))

# Row-major whatever the input's layout, as ATen's tril/triu.
TRIL = defop("tril", lambda xp, a, diagonal: triangle(xp, a, diagonal, upper=False),
             lambda ctx, g: g.tril(ctx.attrs["diagonal"]), Opaque("masked copy"), row_major_out=True)
TRIU = defop("triu", lambda xp, a, diagonal: triangle(xp, a, diagonal, upper=True),
             lambda ctx, g: g.triu(ctx.attrs["diagonal"]), Opaque("masked copy"), row_major_out=True)

NONZERO = defop("nonzero", lambda xp, a: xp.argwhere(a), NOT_DIFFERENTIABLE, Opaque("data-dependent shape"))


def _to_device_kernel(xp, a, device_type, index, source):
    return move_array(a, device_type, index)


def _to_device_backward(ctx, g):
    from .._device import device

    kind, index = ctx.attrs["source"]
    return g.to(device(kind, index))


TO_DEVICE = defop("to_device", _to_device_kernel, _to_device_backward, Opaque("host/device copy"),
                  grad_name="ToCopyBackward0")
