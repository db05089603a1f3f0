"""Advanced-indexing primitives: read positions picked by index arrays, write or accumulate into them.

A ``key`` describes the indexed dims of input 0, left to right: ``slice(None)`` keeps a dim, an int ``i`` stands for
the i-th index input (an integer array indexing one dim, or a bool mask covering as many dims as it has). Trailing
dims not named by the key are kept; ``negative=False`` rejects negative indices instead of wrapping them. NumPy's
placement rule for the indexed dims (together in place when the index arrays are adjacent, else first) is PyTorch's
rule once integers and slices were applied as views beforehand.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> from jitorch.ops.indexing import INDEX, INDEX_PUT
>>> x = jitorch.arange(6.0).reshape(2, 3)
>>> apply(INDEX, x, jitorch.tensor([2, 2]), key=(slice(None), 0))
tensor([[2., 2.],
        [5., 5.]])
>>> apply(INDEX_PUT, jitorch.zeros(3), jitorch.tensor(1.0), jitorch.tensor([1, 1]), key=(0,), accumulate=True)
tensor([0., 2., 0.])
"""
from __future__ import annotations

import math

import numpy as np

from .._shape import broadcast_shapes
from ..runtime import scatter_add
from ..runtime.host_scatter import _MIN_UPDATE
from . import native_indexed
from .table import Opaque, defop

__all__ = ["INDEX", "INDEX_PUT", "SCATTER_REDUCE", "IndexOutOfBounds", "check_bounds", "expand_key", "grid",
           "largest_unsigned", "reduce_at", "reduce_in_rounds"]


class IndexOutOfBounds(IndexError):
    """An index outside ``[-size, size)``; carries the value and size so callers can word PyTorch's message."""

    def __init__(self, value, dim, size):
        super().__init__(f"index {value} is out of bounds for dimension {dim} with size {size}")
        self.value, self.dim, self.size = value, dim, size


def check_bounds(arr, size, dim, negative=True):
    """Raise ``IndexOutOfBounds`` when an entry of the integer array ``arr`` is outside ``[-size, size)`` (or
    ``[0, size)`` when ``negative`` is False: gather, scatter and index_select/add/copy do not wrap)."""
    low = -size if negative else 0
    if arr.size and (int(arr.min()) < low or int(arr.max()) >= size):
        bad = arr[(arr < low) | (arr >= size)].reshape(-1)[0]
        raise IndexOutOfBounds(int(bad), dim, size)


_UINT64 = np.dtype(np.uint64)


def largest_unsigned(index):
    """The largest value of a non-empty int64 NumPy array read as unsigned (a negative index is a huge one), so one
    comparison with a size checks ``[0, size)`` (gather's, nll_loss's targets). Through ``argmax``, which NumPy runs
    without a ufunc reduction's set-up: ``np.maximum.reduce`` took 1 us on 32 indices, this 0.3.

    >>> largest_unsigned(np.array([[3, 1], [2, 0]])), largest_unsigned(np.array([3, -1])) >= 4
    (3, True)
    """
    as_unsigned = index.view(_UINT64)
    return as_unsigned.item(as_unsigned.argmax())


def expand_key(xp, key, indices, shape, negative=True):
    """The array-module key for ``key``: masks become their ``nonzero()`` arrays, integer arrays are bounds-checked.

    As in PyTorch, index arrays must broadcast together, bounds are checked only when the result has elements, and a
    bounds error names the ordinal of the index array among the index arrays.
    """
    out, checks, _ = _expand(xp, key, indices, shape)
    for arr, size, ordinal in checks:
        check_bounds(arr, size, ordinal, negative)
    return out


def _expand(xp, key, indices, shape):
    """(array-module key, the bounds checks ``(array, size, ordinal)`` it still needs, the elements it picks):
    `expand_key` unchecked."""
    out, checks, dim, slices = [], [], 0, 0
    for entry in key:
        if type(entry) is slice:
            out.append(entry)
            dim += 1
            slices += 1
            continue
        arr = indices[entry]
        if arr.dtype == np.bool_:
            out.extend(xp.nonzero(arr))
            dim += arr.ndim
            continue
        checks.append((arr, shape[dim], len(out) - slices))
        out.append(arr)
        dim += 1
    shapes = [k.shape for k in out if type(k) is not slice]
    if len(shapes) == 1:
        picked = shapes[0]
    else:
        try:
            picked = broadcast_shapes(*shapes)
        except RuntimeError:
            raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes "
                             + ", ".join(str(list(s)) for s in shapes)) from None
    size = math.prod(picked) * math.prod(shape[len(out):])
    for k, n in zip(out, shape):
        if type(k) is slice:
            size *= n
    if size:
        return tuple(out), checks, size
    # An empty result reads nothing, so PyTorch accepts any index values; the array module would still check them.
    return tuple(k if type(k) is slice or not k.size else xp.zeros(k.shape, dtype=k.dtype) for k in out), [], 0


def _host_checked(a, checks, negative):
    """Whether NumPy's own bounds check of ``a[key]`` can stand in for ``checks``: ``a`` and the index arrays are
    NumPy arrays; without ``negative`` the arrays' minimums are checked here (NumPy would wrap negatives). Runs the
    checks (raising PyTorch's error) when one fails."""
    if type(a) is not np.ndarray or any(type(arr) is not np.ndarray for arr, _, _ in checks):
        return False
    if not negative and any(id(arr) not in _GRID_IDS and int(_MIN(arr, axis=None)) < 0 for arr, _, _ in checks):
        _run_checks(checks, negative)
    return True


def _run_checks(checks, negative):
    for arr, size, ordinal in checks:
        check_bounds(arr, size, ordinal, negative)


_MIN = np.minimum.reduce
# Both native forms take only keys picking this many elements or more: smaller calls skip their inspection.
_NATIVE_MIN = native_indexed._MIN_ELEMENTS


def grid(n, d, nd):
    """``arange(n)`` laid along dim ``d`` of ``nd`` as a read-only NumPy array, made once per shape: the position
    arrays of gather/scatter keys (never negative, so `_host_checked` skips their check).

    >>> grid(3, 0, 2).tolist()
    [[0], [1], [2]]
    """
    arr = _GRIDS.get((n, d, nd))
    if arr is None:
        if len(_GRIDS) > 256:
            _GRIDS.clear()
            _GRID_IDS.clear()
        shape = [1] * nd
        shape[d] = n
        arr = np.arange(n, dtype=np.int64).reshape(shape)
        arr.flags.writeable = False
        _GRIDS[n, d, nd] = arr
        _GRID_IDS.add(id(arr))  # the cache keeps arr alive, so its id stays its own until both are cleared
    return arr


_GRIDS: dict = {}
_GRID_IDS: set = set()


def _saved_indices(ctx, start):
    """The saved index inputs from position ``start`` on.

    Only the index inputs are read back: checking the version of input 0 too (as ``ctx.inputs`` does) would make
    ``y = x[i]; x[j] = 0; y.backward()`` fail, which PyTorch allows since it saves only the indices.
    """
    from ..autograd.graph import PackedInputs, _version_error

    saved = ctx._saved_in
    if saved is None or type(saved) is PackedInputs:  # hook-packed inputs: ctx.inputs unpacks them
        return tuple(ctx.inputs[start:])

    for a, version in zip(saved[start:], ctx._saved_in_versions[start:]):
        if version is not None and a._version != version:
            raise _version_error(a, version, ctx.name())
    return tuple(saved[start:])


# -- gathering: out = a[key] -------------------------------------------------------------------------------------------
def _index_kernel(xp, a, *indices, key, negative=True):
    if len(indices) == 1 and xp is np and type(a) is np.ndarray and a.size:
        out = _one_index(a, indices[0], key, negative)
        if out is not None:
            return out
    k, checks, size = _expand(xp, key, indices, a.shape)
    if xp is np and size >= _NATIVE_MIN:
        out = native_indexed.gather(indices, a, key, negative)
        if out is not None:
            return out
    if not (checks and _host_checked(a, checks, negative)):
        _run_checks(checks, negative)
        checks = None
    try:
        d = _rows_dim(k) if xp is np else None
        # (an index into an empty dim raises even for an empty result, as torch's: np.take would not check it)
        if d is not None and (a.shape[d] or not k[d].size):
            return np.take(a, k[d], axis=d)  # the rows in order, contiguous: 4x faster than a[:, idx] and its copy
        # NumPy lays out an index on an inner dim with transposed strides; torch's result is contiguous.
        out = a[k]
    except IndexError:
        if checks:  # NumPy's bounds check failed: PyTorch's error
            _run_checks(checks, negative)
        raise
    return out if out.flags.c_contiguous else out.copy()


def _one_index(a, index, key, negative):
    """``a[key]`` for a key of full slices and one index array (``x[idx]``, ``x[:, mask]``) of a non-empty NumPy
    ``a`` when NumPy's own indexing gives it: ``take`` for integers, NumPy's mask indexing for a bool array of the
    dims' shape. None (the general path then runs, and raises PyTorch's error) for other keys, an index out of
    bounds, or an integer index picking enough elements for the native gather. `_expand` and its checks were 5 us
    of a 32x32 ``x[idx]``'s 9."""
    d = len(key) - 1
    if key[d] != 0 or type(index) is not np.ndarray or any(entry != _ALL for entry in key[:d]):
        return None
    kind = index.dtype.kind
    if kind == "b":
        if not index.ndim or a.shape[d:d + index.ndim] != index.shape:
            return None
        out = a[key[:d] + (index,)]
        return out if out.flags.c_contiguous else out.copy()
    if kind not in "iu" or index.size * (a.size // a.shape[d]) >= _NATIVE_MIN:
        return None
    if not negative and index.size and int(_MIN(index, axis=None)) < 0:
        return None
    try:
        return a.take(index, axis=d)  # the rows in order, contiguous, bounds checked (negatives wrap)
    except IndexError:
        return None


_ALL = slice(None)


def _rows_dim(k):
    """The dim of the one integer index array of an expanded key whose other entries are full slices, else None."""
    arrays = [e for e, entry in enumerate(k) if type(entry) is not slice]
    if len(arrays) != 1 or any(entry != slice(None) for entry in k if type(entry) is slice):
        return None
    d = arrays[0]
    return d if k[d].dtype.kind in "iu" else None


def _apply(op, *args, **attrs):
    """The dispatcher's ``apply`` (imported on first use: the dispatcher imports these rows)."""
    global _apply
    from .._dispatch import apply

    _apply = apply  # later calls skip this function's import
    return apply(op, *args, **attrs)


def _index_backward(ctx, g):
    indices = _saved_indices(ctx, 1)
    shape = ctx.in_meta[0][0]
    # Accumulating put: an element picked several times receives the sum of its gradients. Into a broadcast zero,
    # which the row's copy writes out once (a zeroed array copied was two passes over the weight of an embedding).
    grad = _apply(INDEX_PUT, g.new_zeros(()).expand(shape), g, *indices, key=ctx.attrs["key"], accumulate=True)
    return (grad,) + (None,) * len(indices)


INDEX = defop("index", _index_kernel, _index_backward, Opaque("gather by index arrays"), saves="inputs", meta=True)


# -- writing: out = a.copy(); out[key] = values (or += with accumulate) ------------------------------------------------
def _index_put_kernel(xp, a, values, *indices, key, accumulate, negative=True):
    out = a.copy()
    k, checks, size = _expand(xp, key, indices, a.shape)
    if accumulate and xp is np and size >= _NATIVE_MIN:
        try:
            if native_indexed.scatter_add(out, values, indices, key, negative):
                return out
        except native_indexed.IndexedOutOfBounds:
            out = a.copy()  # the updates before the bad index are undone; the checks below raise PyTorch's error
    if not (checks and _host_checked(a, checks, negative)):
        _run_checks(checks, negative)
        checks = None
    try:
        if accumulate:
            if type(out) is np.ndarray and size < _MIN_UPDATE:
                # what host_scatter's add_at does for small updates, bounds checked
                flat = _flat_positions(out, k, values) if size else None
                if flat is not None:
                    np.add.at(out.reshape(-1), flat, values.reshape(-1))
                else:
                    np.add.at(out, k, values)
            else:
                if checks:  # add_at's whole-array forms wrap any index
                    _run_checks(checks, negative)
                scatter_add(xp, out, k, values)
        else:
            out[k] = values
    except IndexError:
        if checks:  # NumPy's bounds check failed: PyTorch's error
            _run_checks(checks, negative)
        raise
    except ValueError:  # torch checks the value's shape before the bounds, as NumPy does
        zeros = tuple(e if type(e) is slice or not n else xp.zeros(e.shape, e.dtype) for e, n in zip(k, out.shape))
        picked = out[zeros].shape  # the shape alone: the indices may be out of bounds
        try:
            broadcast_shapes(tuple(values.shape), picked)
        except RuntimeError:  # torch names both shapes; the dispatcher's message would list the index arrays too
            raise RuntimeError(f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to "
                               f"indexing result of shape {list(picked)}") from None
        raise
    return out


def _flat_positions(out, k, values):
    """The positions in ``out.reshape(-1)`` that ``out[k]`` picks, flat, for a small C-contiguous ``out``, an expanded
    key ``k`` of full slices and one integer array, and ``values`` of the picked shape; None otherwise. NumPy's
    ``add.at`` takes its 1-d fast path on them: a 32x32 rows update took 10 us in the rows form, 5 flat. Each element
    receives its updates in the same order either way, so the sums are the same bits. Raises NumPy's IndexError for
    an index out of bounds; negatives wrap, as in ``out[k]``."""
    if out.size > _TABLE_MAX or not out.flags.c_contiguous:
        return None
    d = _rows_dim(k)
    if d is None or getattr(values, "shape", None) != out.shape[:d] + k[d].shape + out.shape[d + 1:]:
        return None
    table = _TABLES.get(out.shape)
    if table is None:
        if len(_TABLES) > 64:
            _TABLES.clear()
        table = _TABLES[out.shape] = np.arange(out.size).reshape(out.shape)
        table.flags.writeable = False
    return table.take(k[d], axis=d).reshape(-1)


_TABLE_MAX = 1 << 14  # elements of the largest position table cached (128 KiB)
_TABLES: dict = {}


def _index_put_backward(ctx, g):
    indices = _saved_indices(ctx, 2)
    key, accumulate = ctx.attrs["key"], ctx.attrs["accumulate"]
    g_self = g_values = None
    if ctx.needs_grad(0):
        # Overwritten positions no longer depend on the old values.
        g_self = g if accumulate else _apply(INDEX_PUT, g, 0, *indices, key=key, accumulate=False)
    if ctx.needs_grad(1):
        g_values = _apply(INDEX, g, *indices, key=key)  # the engine sums it to the (broadcast) values' shape
    return (g_self, g_values) + (None,) * len(indices)


INDEX_PUT = defop("index_put", _index_put_kernel, _index_put_backward, Opaque("scatter into indexed positions"),
                  saves="inputs", meta=True)


# the reducing scatter lives in indexing_reduce.py (it uses check_bounds above)
from .indexing_reduce import SCATTER_REDUCE, reduce_at, reduce_in_rounds  # noqa: E402
