"""Reduction primitives. Each takes ``dims`` (a tuple of wrapped dims) and ``keepdim``. The scans (``cumsum``,
``cumprod``) are in ``reduction_scan.py``, re-exported here.

>>> import jitorch
>>> x = jitorch.tensor([[1.0, 5.0], [3.0, 5.0]], requires_grad=True)
>>> x.amax(1).backward(jitorch.ones(2))
>>> x.grad   # ties share the gradient, as in PyTorch
tensor([[0., 1.],
        [0., 1.]])
"""
from __future__ import annotations

import math

import ml_dtypes as _ml_dtypes
import numpy as np

from .._dispatch import TENSOR_TYPES, apply
from .._dispatch_fast import nothing_records, plain_tensor
from ..autograd.graph import Node
from . import half_cast
from .cascade_sum import NAIVE_ROWS, cascade_sum
from .native_outer_sum import outer_sum
from .native_row_extreme import row_extreme
from .native_sum import MIN_SIZE as SUM_MIN_SIZE, trailing_sum
from .movement import EXPAND, RESHAPE
from .sorting import take_along, take_checked
from .table import NOT_DIFFERENTIABLE, Opaque, Reduction, defop as _defop

_HALF = {np.dtype(np.float16), np.dtype(_ml_dtypes.bfloat16)}
_F16, _F32 = np.dtype(np.float16), np.dtype(np.float32)
_FILL_MAX = 32 << 20  # bytes: see _plain_filled


def defop(name, kernel, *args, ordered=False, **kw):
    """A reduction row whose outputs are row-major whatever the input's layout, as PyTorch's (NumPy's follow the
    input's stride order: a channels-last input would give channels-last sums). ``ordered``: the kernel makes them
    so itself (`_row_major`), sparing the hot rows this wrapper's frame (half a microsecond of a small sum)."""
    if ordered:
        return _defop(name, kernel, *args, row_major_out=True, **kw)

    def row_major(xp, a, *rest, **attrs):
        return _row_major(xp, a, kernel(xp, a, *rest, **attrs))
    row_major.__name__ = getattr(kernel, "__name__", name)
    return _defop(name, row_major, *args, row_major_out=True, **kw)


def _row_major(xp, a, out):
    """``out`` (a kernel's array or tuple of arrays for ``a``) row-major."""
    if a.flags.c_contiguous:
        return out
    if isinstance(out, tuple):
        return tuple(o.copy(order="C") for o in out)
    return xp.asarray(out).copy(order="C")


def _keep(g, in_shape, dims, keepdim):
    """Re-insert reduced dims of size 1 so ``g`` broadcasts against the input."""
    if keepdim or not in_shape:
        return g
    shape = list(g._data.shape)
    for d in sorted(dims):
        shape.insert(d, 1)
    # The view row itself: inserting size-1 dims is a view of any layout, so Tensor.reshape's checks have no work.
    return apply(RESHAPE, g, shape=tuple(shape))


def _cascaded(a, dims, keepdim, dtype):
    """The sum of a NumPy array over outer axes as a tree (ATen's cascade sum), or None where NumPy's own order is
    pairwise already. Halves accumulate in float32, as PyTorch's."""
    if type(a) is not np.ndarray or a.size <= NAIVE_ROWS or not dims:
        return None
    dtype = np.dtype(dtype)
    if dtype.kind not in "fc" and dtype not in _HALF:  # integer sums are exact in any order
        return None
    if a.flags.c_contiguous and dims[0] == a.ndim - len(dims) and dims[-1] == a.ndim - 1:
        return None  # trailing axes of a contiguous array: one pairwise inner loop (sum(), sum(-1))
    acc = np.dtype(np.float32) if dtype in _HALF else dtype
    out = cascade_sum(a, dims, keepdim, acc)
    return out if out is None or out.dtype == dtype else out.astype(dtype)


def _sum_kernel(xp, a, dims, keepdim, dtype):
    if a.dtype in _HALF and (dtype == a.dtype or dtype == _F32):  # widened natively once (NumPy's casting sum widens
        if (out := trailing_sum(a, dims, keepdim)) is not None:  # widened as the kernel loads (no float32 copy)
            return half_cast.converted(out, dtype)
        if (out := outer_sum(a, dims, keepdim, dtype)) is not None:  # an outer axis: ATen's order, widened alike
            return half_cast.converted(out, dtype)
        wide = half_cast.astype(a, _F32)  # in software; summing float32 copies gives torch's bits)
        if wide is not None:
            return half_cast.converted(_sum_kernel(xp, wide, dims, keepdim, _F32), dtype)
    out = _cascaded(a, dims, keepdim, dtype)
    if out is not None:
        return out
    if a.size >= SUM_MIN_SIZE and dtype == a.dtype == _F32:  # float32 over trailing axes: one generated row reduction
        out = trailing_sum(a, dims, keepdim)  # (NumPy's float32 sum is 4x slower)
        if out is not None:
            return out
    if a.dtype in _HALF and dtype == a.dtype:  # accumulate halves in float32, as PyTorch does
        return a.sum(axis=dims, keepdims=keepdim, dtype=np.float32).astype(dtype)
    if type(a) is np.ndarray:  # ndarray.sum is this call behind a Python frame of NumPy's
        return np.add.reduce(a, axis=dims, dtype=dtype, keepdims=keepdim)
    return a.sum(axis=dims, keepdims=keepdim, dtype=dtype)


def _input_row_major(ctx):
    """Whether the summed input is known to be a row-major array: a contiguous leaf, or the output of a row that
    always makes one. Elsewhere its layout is unknown, and torch's expanded gradient lets the ops of the backward
    give their results the layout of their other operands (a permuted input's gradient is permuted)."""
    src = ctx.next[0][0]
    if type(src) in TENSOR_TYPES:
        return type(src._data) is np.ndarray and src._data.flags.c_contiguous
    return isinstance(src, Node) and src.op is not None and src.op.row_major_out


def _plain_filled(ctx, g, shape, dims, keepdim):
    """``g`` broadcast over ``shape`` as a fresh row-major tensor, or None. Only in a first-order backward with no
    mode (nothing would record an expand, so none is owed), for a host float gradient of under 32 MiB of a row-major
    input: the expand row's dispatch (4 us) and the leaf's copy of its view cost more than the whole small ``sum()``
    in torch; one assignment is well under a microsecond. A larger gradient stays a view, whose memory is one
    element."""
    if not nothing_records() or type(g) not in TENSOR_TYPES:
        return None
    if not _input_row_major(ctx):
        return None
    a = g._data
    if type(a) is not np.ndarray or a.dtype.kind != "f" or math.prod(shape) * a.itemsize >= _FILL_MAX:
        return None
    if not keepdim and a.ndim and dims != tuple(range(len(dims))):
        kept = list(a.shape)
        for d in sorted(dims):
            kept.insert(d, 1)
        a = a.reshape(kept)
    out = np.empty(shape, a.dtype)
    out[...] = a  # (faster than np.full or fill for a few hundred elements)
    return plain_tensor(out)


def _sum_backward(ctx, g):
    shape = ctx.in_meta[0][0]
    dims, keepdim = ctx.attrs["dims"], ctx.attrs["keepdim"]
    filled = _plain_filled(ctx, g, shape, dims, keepdim)
    if filled is not None:
        return filled
    if not keepdim and dims != tuple(range(len(dims))):
        g = _keep(g, shape, dims, keepdim)
    # (Reduced leading dims need no size-1 dims: broadcasting prepends them.) The rows themselves, as in _keep:
    # ``Tensor.expand``'s argument checks are for user sizes, and this runs once per sum in every backward.
    return apply(EXPAND, g, shape=shape) if g._data.shape != shape else apply(RESHAPE, g, shape=shape)


def _sum_row(xp, a, dims, keepdim, dtype):
    if type(a) is np.ndarray and a.size < SUM_MIN_SIZE and a.flags.c_contiguous and a.dtype not in _HALF and (
            not dims or a.size <= NAIVE_ROWS or dims[-1] == a.ndim - 1 and dims[0] == a.ndim - len(dims)):
        # What _sum_kernel comes to for a small row-major array that is not a cascade's (its checks and the layout's
        # cost as much as this sum: 32x32: 1.2 us of 2.5)
        return np.add.reduce(a, axis=dims, dtype=dtype, keepdims=keepdim)
    out = _sum_kernel(xp, a, dims, keepdim, dtype)
    return out if a.flags.c_contiguous else _row_major(xp, a, out)


SUM = defop("sum", _sum_row, _sum_backward, Reduction("sum"), meta=True, ordered=True)


def _nansum_kernel(xp, a, dims, keepdim, dtype):
    if type(a) is np.ndarray:  # NumPy's nansum is this zero-filled copy's sum, whose outer axes want the tree
        a = a.copy()
        a[np.isnan(a)] = 0
        return _sum_kernel(xp, a, dims, keepdim, dtype)
    if a.dtype in _HALF and dtype == a.dtype:
        return xp.nansum(a, axis=dims, keepdims=keepdim, dtype=np.float32).astype(dtype)
    return xp.nansum(a, axis=dims, keepdims=keepdim, dtype=dtype)


def _nansum_backward(ctx, g):
    # ATen's nansum_backward multiplies by the not-NaN mask rather than selecting: a non-finite upstream gradient
    # (nanmean's 1/0 over an all-NaN slice) gives NaN at the NaN positions, not 0.
    (x,) = ctx.inputs
    return _keep(g, x.shape, ctx.attrs["dims"], ctx.attrs["keepdim"]).expand(x.shape) * ~x.isnan()


# Opaque to the fusers: their sum reductions would propagate the NaNs this row skips.
NANSUM = defop("nansum", _nansum_kernel, _nansum_backward, Opaque("nansum"), saves="inputs", meta=True)


def _prod_kernel(xp, a, dims, keepdim, dtype):
    return a.prod(axis=dims, keepdims=keepdim, dtype=dtype)


def _prod_backward(ctx, g):
    (x,) = ctx.inputs
    dims, keepdim = ctx.attrs["dims"], ctx.attrs["keepdim"]
    g = _keep(g, x.shape, dims, keepdim)
    out = ctx.out
    if x.is_complex():  # the conjugate Wirtinger gradient: g times the conjugate of each partial product
        x, out = x.conj(), out.conj()
    if not bool((x == 0).any()):
        return g * _keep(out, x.shape, dims, keepdim) / x
    # With zeros, each element's gradient is the product of the others: exclusive cumulative products from both
    # sides along the flattened reduced axes.
    from .. import _movement as mv

    keep_dims = [d for d in range(x.dim()) if d not in dims]
    moved = x.permute(keep_dims + list(dims))
    lead = moved.shape[:len(keep_dims)]
    flat = moved.reshape(tuple(lead) + (-1,))
    ones = flat.new_ones(tuple(lead) + (1,))
    left = mv.cat([ones, flat[..., :-1]], -1).cumprod(-1)
    right = mv.cat([ones, flat.flip(-1)[..., :-1]], -1).cumprod(-1).flip(-1)
    others = (left * right).reshape(moved.shape)
    inverse = [0] * x.dim()
    for i, d in enumerate(keep_dims + list(dims)):
        inverse[d] = i
    return g * others.permute(inverse)


PROD = defop("prod", _prod_kernel, _prod_backward, Reduction("prod"), saves="both")


def _extreme_kernel(name):
    def kernel(xp, a, dims, keepdim):
        if a.size == 0 and any(a.shape[d] == 0 for d in dims):
            raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                             "reduction dim with the 'dim' argument.")
        if type(a) is np.ndarray:  # (ndarray.max is this ufunc's reduce behind a Python frame of NumPy's)
            if len(dims) == 1 and dims[0] == a.ndim - 1 and (out := row_extreme(a, reduce)) is not None:
                # a small float32 array's rows: NumPy's reduce runs a short last axis a row at a time
                return out.reshape(out.shape + (1,)) if keepdim else out
            out = ufunc.reduce(a, axis=dims, keepdims=keepdim)
        else:
            out = getattr(a, method)(axis=dims, keepdims=keepdim)
        return out if a.flags.c_contiguous else _row_major(xp, a, out)
    method = reduce = {"amax": "max", "amin": "min"}[name]
    ufunc = {"amax": np.maximum, "amin": np.minimum}[name]
    return kernel


def _extreme_backward(ctx, g):
    (x,) = ctx.inputs
    dims, keepdim = ctx.attrs["dims"], ctx.attrs["keepdim"]
    out = _keep(ctx.out, x.shape, dims, keepdim)
    mask = x == out
    count = mask.sum(dims, keepdim=True)
    return _keep(g, x.shape, dims, keepdim) * mask / count


AMAX = defop("amax", _extreme_kernel("amax"), _extreme_backward, Reduction("max"), saves="both", ordered=True)
AMIN = defop("amin", _extreme_kernel("amin"), _extreme_backward, Reduction("min"), saves="both", ordered=True)


def _arg_kernel(name):
    def kernel(xp, a, dim, keepdim):
        if dim is None:
            if a.size == 0:
                raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
            return xp.asarray(getattr(xp, name)(a)).reshape((1,) * a.ndim if keepdim else ())
        if a.ndim == 0:
            return xp.zeros((), dtype=np.int64)
        if a.shape[dim] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {dim} to have non-zero size.")
        if type(a) is np.ndarray:  # (the method: np.argmax is a Python wrapper around it)
            out = getattr(a, name)(axis=dim, keepdims=keepdim)
        else:
            out = getattr(xp, name)(a, axis=dim, keepdims=keepdim)
        return out if a.flags.c_contiguous else _row_major(xp, a, out)
    return kernel


ARGMAX = defop("argmax", _arg_kernel("argmax"), NOT_DIFFERENTIABLE, Reduction("argmax"), ordered=True)
ARGMIN = defop("argmin", _arg_kernel("argmin"), NOT_DIFFERENTIABLE, Reduction("argmin"), ordered=True)


def _dim_extreme_kernel(arg, name):
    def kernel(xp, a, dim, keepdim):
        if a.ndim == 0:
            return a.copy(), xp.zeros((), dtype=np.int64)
        if a.shape[dim] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {dim} to have non-zero size.")
        idx = getattr(a, arg)(axis=dim, keepdims=True) if type(a) is np.ndarray else getattr(xp, arg)(
            a, axis=dim, keepdims=True)
        # (argmax's int64 positions in a's shape but along dim: `take_along`'s checks hold for a host row-major a)
        values = take_checked(a, idx, dim % a.ndim) if type(a) is np.ndarray and a.flags.c_contiguous and \
            a.size and idx.dtype is _INT64 else take_along(xp, a, idx, dim)
        if not keepdim:
            values, idx = values.squeeze(dim), idx.squeeze(dim)
        return (values, idx) if a.flags.c_contiguous else _row_major(xp, a, (values, idx))
    return kernel


def _dim_extreme_backward(ctx, g, g_idx):
    shape = ctx.in_meta[0][0]
    dim, keepdim = ctx.attrs["dim"], ctx.attrs["keepdim"]
    idx = ctx.output(1)  # the values may since have been changed in place (torch saves only the indices)
    if not shape:  # a 0-d input is its own maximum; dim 0/-1 has no extent to index
        return g
    plain = _plain_picked(g, idx, shape, dim, keepdim)
    if plain is not None:
        return plain
    from .. import _creation

    positions = _creation.arange(shape[dim], device=g.device).reshape([-1] + [1] * (len(shape) - dim - 1))
    mask = positions == _keep(idx, shape, (dim,), keepdim)
    return _keep(g, shape, (dim,), keepdim) * mask


def _plain_picked(g, idx, shape, dim, keepdim):
    """The formula below on the arrays (one comparison, one product: the same bits) in a first-order backward of a
    host float32/float64 gradient, else None: its five dispatched ops cost more than a small ``max(dim)`` itself."""
    if not nothing_records() or type(g) not in TENSOR_TYPES or type(idx) not in TENSOR_TYPES:
        return None
    ga, ia = g._data, idx._data
    if (type(ga) is not np.ndarray or type(ia) is not np.ndarray or ga.dtype not in _WIDE_FLOATS
            or not ga.flags.c_contiguous):
        return None
    if not keepdim:
        ga, ia = np.expand_dims(ga, dim), np.expand_dims(ia, dim)
    positions = np.arange(shape[dim]).reshape((-1,) + (1,) * (len(shape) - dim - 1))
    return plain_tensor(np.multiply(ga, positions == ia))


_INT64 = np.dtype(np.int64)
_WIDE_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
MAX_DIM = defop("max_dim", _dim_extreme_kernel("argmax", "max"), _dim_extreme_backward, Reduction("max"), nout=2,
                saves="outputs", meta=True, nondiff_outputs=(1,), grad_name="MaxBackward0", ordered=True)
MIN_DIM = defop("min_dim", _dim_extreme_kernel("argmin", "min"), _dim_extreme_backward, Reduction("min"), nout=2,
                saves="outputs", meta=True, nondiff_outputs=(1,), grad_name="MinBackward0", ordered=True)

def _logical_kernel(name):
    def kernel(xp, a, dims, keepdim):
        if type(a) is np.ndarray:  # what np.all/np.any run, less their Python frames
            out = ufunc.reduce(a, axis=dims, dtype=np.bool_, keepdims=keepdim)
        else:
            out = getattr(xp, name)(a, axis=dims, keepdims=keepdim)
        # PyTorch keeps uint8 for all/any of uint8 tensors (a legacy of byte masks); every other dtype gives bool.
        if a.dtype == _U8:
            out = out.astype(np.uint8)
        return out if a.flags.c_contiguous else _row_major(xp, a, out)
    ufunc = {"all": np.logical_and, "any": np.logical_or}[name]
    return kernel


_U8 = np.dtype(np.uint8)


ALL = defop("all", _logical_kernel("all"), NOT_DIFFERENTIABLE, Reduction("all"), ordered=True)
ANY = defop("any", _logical_kernel("any"), NOT_DIFFERENTIABLE, Reduction("any"), ordered=True)


from .reduction_scan import CUMPROD, CUMSUM  # noqa: E402,F401 - split for size; re-exported here
from .variance import VAR, _var_kernel, var_backward_of  # noqa: E402,F401 - split for size; re-exported here
