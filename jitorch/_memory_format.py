"""Memory formats: ``contiguous_format``, ``channels_last`` (NHWC memory for an NCHW tensor), ``channels_last_3d``
(NDHWC) and ``preserve_format``, as layouts of the array a tensor holds (a NumPy/CuPy array with any strides).

A channels-last tensor keeps its logical ``(N, C, H, W)`` shape; its array is an NHWC-contiguous array transposed
back, so ``stride()`` is PyTorch's ``(H*W*C, 1, W*C, C)``. Elementwise kernels follow their inputs' layout (the
array modules' ``order="K"``), as PyTorch's TensorIterator does.

>>> import jitorch
>>> x = jitorch.zeros(2, 3, 4, 5).to(memory_format=jitorch.channels_last)
>>> x.stride(), x.is_contiguous(), x.is_contiguous(memory_format=jitorch.channels_last)
((60, 1, 15, 3), False, True)
"""
from __future__ import annotations

import numpy as np

__all__ = ["memory_format", "contiguous_format", "channels_last", "channels_last_3d", "preserve_format",
           "is_contiguous_as", "in_format", "empty_in", "dim_order", "suggest_memory_format", "plainly_row_major",
           "suggested_format", "dense_order", "exactly_row_major", "dense_like", "like_layout", "row_major",
           "preserve_copy", "to_strides_of", "written_in"]


class memory_format:  # noqa: N801 - torch.memory_format
    """One of PyTorch's memory formats (compare by identity, as torch's are singletons)."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"jitorch.{self.name}"

    def __reduce__(self):
        return (_by_name, (self.name,))


contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
preserve_format = memory_format("preserve_format")
# Physical dim order (outermost first) of each channels-last format and the rank it needs.
_ORDER = {channels_last: (0, 2, 3, 1), channels_last_3d: (0, 2, 3, 4, 1)}
_INVERSE = {channels_last: (0, 3, 1, 2), channels_last_3d: (0, 4, 1, 2, 3)}  # each order's inverse permutation


def _by_name(name):
    return {f.name: f for f in (contiguous_format, channels_last, channels_last_3d, preserve_format)}[name]


def _element_strides(arr):
    return tuple(s // arr.itemsize for s in arr.strides)


def is_contiguous_as(arr, fmt):
    """PyTorch's ``is_contiguous(memory_format=fmt)``: strides of that layout, size-1 dims ignored (``preserve_format``
    asks for the default layout, as ATen's is_contiguous_default)."""
    order = _ORDER.get(fmt)
    if order is None:
        return bool(arr.flags.c_contiguous)
    if arr.ndim != len(order):
        return False
    expected, strides = 1, _element_strides(arr)
    for d in reversed(order):
        if arr.shape[d] != 1:
            if strides[d] != expected:
                return False
            expected *= arr.shape[d]
    return True


def has_strides_of(arr, fmt):
    """Whether ``arr``'s strides are exactly those of a new tensor in ``fmt``, size-1 dims included."""
    order = _ORDER.get(fmt, tuple(range(arr.ndim)))
    expected, step = [0] * arr.ndim, 1
    for d in reversed(order):
        expected[d] = step
        step *= arr.shape[d]
    return not arr.size or _element_strides(arr) == tuple(expected)


def check_rank(fmt, ndim):
    order = _ORDER.get(fmt)
    if order is not None and ndim != len(order):
        raise RuntimeError(f"required rank {len(order)} tensor to use {fmt.name} format")


def dim_order(fmt, ndim):
    """The physical order (outermost first) of the dims of a new ``ndim``-dim tensor in ``fmt``."""
    return _ORDER.get(fmt) or tuple(range(ndim))


def empty_in(xp, shape, dtype, fmt):
    """An uninitialized array of ``shape`` laid out as ``fmt`` (contiguous or channels-last; the caller checks the
    rank), with PyTorch's strides for every dim: ``(3, 1, 3, 3)`` for a channels-last ``(2, 3, 1, 1)`` tensor."""
    order = _ORDER.get(fmt)
    if order is None:
        return xp.empty(shape, dtype)
    return xp.empty(tuple(shape[d] for d in order), dtype).transpose(_INVERSE[fmt])


def in_format(xp, arr, fmt):
    """A copy of ``arr`` laid out as ``fmt`` (contiguous or channels-last); the caller checks the rank."""
    if fmt not in _ORDER:
        return arr.copy(order="C")
    # A new array (not ascontiguousarray, which keeps an already-contiguous array's size-1 strides).
    out = empty_in(xp, arr.shape, arr.dtype, fmt)
    out[...] = arr
    return out


def _strides_like(arr, order):
    """PyTorch's is_channels_last_strides_2d/3d: ``arr``'s strides rank its dims as ``order`` (ties resolved toward
    the contiguous layout, as ATen does for size-1 dims)."""
    strides, least = _element_strides(arr), 0
    if strides[1] == 0:
        return False
    for d in reversed(order):
        if arr.shape[d] == 0 or strides[d] < least:
            return False
        if d == 0 and least == strides[1]:
            return False
        least = strides[d] * (arr.shape[d] if arr.shape[d] > 1 else 1)
    return True


def suggest_memory_format(t):
    """PyTorch's ``suggest_memory_format``: channels_last(_3d) when the strides are those of that layout."""
    arr = t._data if hasattr(t, "_data") else t
    if arr.ndim not in (4, 5) or (arr.shape[1] > 1 and arr.shape[-1] > 1 and arr.strides[-1] == arr.itemsize):
        return contiguous_format  # the common case, decided early: several channels, not the innermost dim
    for fmt, order in _ORDER.items():
        if arr.ndim == len(order) and _strides_like(arr, order):
            return fmt
    return contiguous_format


def plainly_row_major(arr):
    """Whether ``arr`` suggests ``contiguous_format`` at a glance: not 4-D or 5-D, or C-contiguous with several
    channels and columns. A narrow of such an array suggests it too (its last dim's unit stride stays below the
    channels' stride). With one channel or column a C-contiguous array may still have channels-last strides, NumPy
    ignoring the strides of size-1 dims: those take the stride walk."""
    shape = arr.shape
    return len(shape) not in (4, 5) or (arr.flags.c_contiguous and shape[1] > 1 and shape[-1] > 1)


def suggested_format(t):
    """The memory format in which ATen's kernels that follow their input write: tensor ``t``'s
    ``suggest_memory_format``, without the stride walk for the common row-major tensor (`plainly_row_major`)."""
    arr = t._data
    return contiguous_format if plainly_row_major(arr) else suggest_memory_format(arr)


def dense_order(shape, strides):
    """Dims from outermost to innermost as ATen's ``infer_dense_strides`` ranks them: by stride, an equal stride
    putting the larger size outside, and a broadcast (zero-stride) dim ambiguous, so it keeps its logical place (an
    expanded ``(2, 6, 4)`` of strides ``(4, 0, 1)`` is copied row-major, not with the expanded dim innermost)."""
    ndim = len(shape)
    perm = list(range(ndim - 1, -1, -1))  # innermost first
    for i in range(1, ndim):  # ATen's insertion sort, where an ambiguous pair stops neither swap nor search
        d1 = i
        for d0 in range(i - 1, -1, -1):
            a, b = perm[d0], perm[d1]
            s0, s1 = abs(strides[a]), abs(strides[b])
            if s0 == 0 or s1 == 0:
                continue
            if s0 > s1 or (s0 == s1 and shape[a] > shape[b]):
                perm[d0], perm[d1] = b, a
                d1 = d0
            elif s0 < s1:
                break
    return perm[::-1]


def _non_overlapping_dense(arr):
    expected = arr.itemsize
    for d in reversed(dense_order(arr.shape, arr.strides)):
        if arr.shape[d] != 1:
            if arr.strides[d] != expected:
                return False
            expected *= arr.shape[d]
    return True


def exactly_row_major(arr):
    """Whether ``arr``'s strides are a new row-major array's, size-1 dims included. NumPy's ``c_contiguous`` flag
    ignores the strides of size-1 dims: a channels-last ``(N, 1, H, W)`` array has it, and its strides
    ``(H*W, 1, W, 1)`` are what ``preserve_format`` keeps in PyTorch."""
    if not arr.flags.c_contiguous:
        return False
    if 1 not in arr.shape or not arr.size:
        return True
    expected = arr.itemsize
    for n, st in zip(reversed(arr.shape), reversed(arr.strides)):
        if st != expected:
            return False
        expected *= n
    return True


def dense_like(xp, arr, dtype=None, fmt=None):
    """An uninitialized array shaped as ``arr`` in ``fmt``: ``preserve_format`` (or None) keeps ``arr``'s strides when
    it is non-overlapping and dense, else a dense layout with its dims in the same stride order (PyTorch's
    ``empty_like``)."""
    dtype = arr.dtype if dtype is None else np.dtype(dtype)
    if fmt is not None and fmt is not preserve_format:
        return empty_in(xp, arr.shape, dtype, fmt)
    if arr.ndim < 2 or exactly_row_major(arr):
        return xp.empty(arr.shape, dtype)
    if _non_overlapping_dense(arr) and min(arr.strides) >= 0:
        flat = xp.empty(arr.size, dtype)
        strides = tuple(s // arr.itemsize * dtype.itemsize for s in arr.strides)
        return xp.lib.stride_tricks.as_strided(flat, arr.shape, strides) if xp is np else \
            xp.ndarray(arr.shape, dtype, flat.data, strides)
    order = dense_order(arr.shape, arr.strides)
    inverse = tuple(int(i) for i in np.argsort(order))
    return xp.empty(tuple(arr.shape[d] for d in order), dtype).transpose(inverse)


def like_layout(xp, data, like, fmt=None):
    """``data`` (row-major, ``like``'s shape) in the layout a ``*_like(like, memory_format=fmt)`` result has, its
    values placed in memory order (as PyTorch fills a new tensor); ``data`` itself when that layout is row-major."""
    if data.ndim < 2 or (fmt in (None, preserve_format) and exactly_row_major(like)) or fmt is contiguous_format:
        return data
    check_rank(fmt, data.ndim)
    out = dense_like(xp, like, data.dtype, fmt)
    if exactly_row_major(out):
        return data
    order = dense_order(out.shape, out.strides)
    out.transpose(order)[...] = data.reshape(tuple(data.shape[d] for d in order))
    return out


def row_major(arr):
    """``arr`` itself when it is C-contiguous, else a C-contiguous copy: the layout of the ops whose PyTorch kernel
    computes on ``input.contiguous()`` into a new row-major tensor (softmax, tril, cumulative extremes...)."""
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def preserve_copy(xp, arr, dtype=None):
    """A copy of ``arr`` (cast to ``dtype``) in PyTorch's ``preserve_format`` layout (``clone``, ``to``): a dense
    layout in ``arr``'s stride order. The array modules' ``order="K"`` copies give it, with two differences from ATen:
    ATen keeps a dense input's strides exactly, odd ones of size-1 dims included, where ``order="K"`` gives a size-1
    dim the stride its place implies (ATen's ``(20, 5, 7, 1)`` is ``(20, 5, 5, 1)`` here); and ``order="K"`` makes
    broadcast dims innermost, where ATen leaves them in place (`dense_order`, which this follows for them)."""
    if 0 not in arr.strides or arr.size <= 1:
        return arr.copy(order="K") if dtype is None else arr.astype(dtype, order="K")
    out = dense_like(xp, arr, dtype)
    out[...] = arr
    return out


def to_strides_of(xp, data, like):
    """``data`` copied into ``like``'s layout (PyTorch's gradient layout contract), or ``data`` when it has it."""
    if data.strides == like.strides or data.shape != like.shape:
        return data
    out = dense_like(xp, like, data.dtype)
    out[...] = data
    return out


def written_in(out, fmt):
    """``out`` with the strides of a new tensor in ``fmt``, size-1 dims included: ATen's kernels allocate their
    outputs so, and a channels-last ``(N, C, 1, 1)`` result has strides ``(C, 1, C, C)``, not the row-major ones that
    ``contiguous(memory_format=fmt)`` keeps (both are contiguous in either format).

    >>> import jitorch
    >>> written_in(jitorch.zeros(2, 3, 1, 1), jitorch.channels_last).stride()
    (3, 1, 3, 3)
    """
    arr = out._data
    if fmt is contiguous_format and arr.flags.c_contiguous and 1 not in arr.shape:
        return out  # the common case, decided without the stride walk
    return out if has_strides_of(arr, fmt) else out.clone(memory_format=fmt)
