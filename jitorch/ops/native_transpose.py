"""Eager CPU transposing copies (``x.t().contiguous()``, a head merge's ``transpose(1, 2).reshape(...)``, ``copy_``
from a transposed source) as one generated copy kernel walking tiles (`codegen.llvm_tiled`).

NumPy copies such a view in the result's order, each element a load from a far address: a 1024x1024 float32
transpose took 3.3 ms (torch: 0.6). The copy here is the IR kernel ``out = in`` over the view's collapsed dims,
elements moved as integers of their width (float32 as i32, float64 and complex64 as i64: a copy, bit for bit), its
sizes and strides run-time arguments (`codegen.ir_params`): one compile per layout pattern and width, disk-cached.
Views whose contiguous runs of at least 16 elements are permuted (a head merge, ``permute(0, 2, 1, 3)``) take
the same kernel untiled (2-3x faster than NumPy's copy), as do views with a reversed last dim (``flip``); views that
keep the memory order (slices) or have short trailing runs keep NumPy's copy.

>>> import numpy as np
>>> a = np.arange(128 * 96, dtype=np.float32).reshape(128, 96)
>>> out = transposed_copy(a.T)
>>> out.flags.c_contiguous, bool((out == a.T).all())
(True, True)
>>> transposed_copy(a[::2]) is None  # no transposed dims: NumPy's copy
True
"""
from __future__ import annotations

import numpy as np

from ..codegen.ir import Buffer, Kernel, Store, load, merged_dims
from ..codegen.ir_params import INNER_LITERAL_STRIDES, arguments
from ..codegen.llvm_compile import compile_kernel
from ..codegen.llvm_objcache import default_cache
from ..codegen.llvm_pool import shared_pool, worth_splitting
from ..codegen.llvm_tiled import TILE, transposed_dims
from ..runtime import host_cache
from ..runtime.host_pointer import data_address
from ..runtime.threads import get_num_threads
from .native_eager import _GRAIN, PARALLEL_MIN

__all__ = ["transposed_copy", "MIN_SIZE"]

# Below this many elements NumPy's copy is as fast as the kernel's call (float32 at 1 thread, NumPy against this:
# 32x32 0.75 us against 2.6, 96x96 3.2 against 3.7, 128x128 10.4 against 4.7).
MIN_SIZE = 12288
# The transposed dims' least sizes: a full micro tile (`llvm_tiled.MICRO`) each way; shorter ones (pixel shuffle's
# factors) keep `movement`'s NumPy loops.
_MIN_SIDE = 16
_WIDTHS = {4: "i32", 8: "i64"}
_kernels: dict = {}  # layout key (`_key`) -> (compiled kernel, argument types)
_dims: dict = {}  # layout key -> `llvm_tiled.transposed_dims` of its kernels
# (dtype, shape, strides) of a view -> (compiled kernel, argument types, run-time values, outer size, split grain),
# or None where NumPy copies it: a repeated view (every training step's) skips the layout work (5 us of Python).
_plans: dict = {}
_PLANS_MAX = 1024  # views kept; a full table starts over


def _literal(stride, innermost):
    """A stride as `ir_params.parametrize` keeps it: itself where code branches on it, else None (an argument)."""
    return stride if stride in (0, 1, -1) or innermost and stride in INNER_LITERAL_STRIDES else None


def _copy(dtype, shape, out_strides, in_strides):
    return Kernel(tuple(shape), (Buffer(dtype, tuple(out_strides)), Buffer(dtype, tuple(in_strides))),
                  (Store(0, load(1, dtype)),))


def _key(dtype, out_strides, in_strides):
    """What the template of a copy depends on: the IR dtype and which strides are literal (the sizes are all >= 2
    once collapsed)."""
    last = len(out_strides) - 1
    return (dtype, tuple(_literal(s, d == last) for d, s in enumerate(out_strides)),
            tuple(_literal(s, d == last) for d, s in enumerate(in_strides)))


def _kernel(key, dtype, shape, out_strides, in_strides):
    """The compiled copy of this layout's template (its first sizes and strides compiled, any others passed)."""
    hit = _kernels.get(key)
    if hit is None:
        compiled = compile_kernel(_copy(dtype, shape, out_strides, in_strides), cache=default_cache())
        if tuple(compiled.values) != tuple(_values(shape, out_strides, in_strides)):
            raise AssertionError(f"transposed_copy: run-time values {_values(shape, out_strides, in_strides)} are "
                                 f"not the template's {compiled.values}")
        hit = _kernels[key] = (compiled, ("ptr", "ptr") + tuple(arguments(compiled.kernel)))
    return hit


def _values(shape, out_strides, in_strides):
    """The template's run-time arguments in `ir_params.parametrize`'s order: sizes, then each buffer's strides
    that are not literal (offsets are 0: the addresses passed are the views' first elements)."""
    last = len(shape) - 1
    return [n for n in shape if n >= 2] + [s for strides in (out_strides, in_strides)
                                           for d, s in enumerate(strides) if _literal(s, d == last) is None]


def transposed_copy(a):
    """A row-major copy of NumPy array ``a`` through the tiled copy kernel, or None where it does not apply
    (other types or widths, small arrays, no pair of long transposed dims): the caller copies it its own way."""
    if type(a) is not np.ndarray or a.size < MIN_SIZE or a.flags.c_contiguous:
        return None
    view = (a.dtype, a.shape, a.strides)
    plan = _plans.get(view, False)
    if plan is False:
        if len(_plans) >= _PLANS_MAX:
            _plans.clear()
        plan = _plans[view] = _plan(a)
    if plan is None:
        return None
    compiled, types, values, rows, grain = plan
    out = host_cache.empty(a.shape, a.dtype) if a.nbytes >= host_cache.THRESHOLD else np.empty(a.shape, a.dtype)
    threads = get_num_threads()
    if threads > 1 and rows > 1 and a.size >= PARALLEL_MIN and worth_splitting(compiled, a.size):
        pool = shared_pool(threads)
        if pool is not None:
            pool.run_function(compiled.address, types, [data_address(out), data_address(a), *values], rows, grain)
            return out
    compiled._fn(0, rows, data_address(out), data_address(a), *values)
    return out


def _plan(a):
    """`_plans`' entry for view ``a`` (compiling its layout's kernel on first use)."""
    itemsize = a.dtype.itemsize
    dtype = "bool" if a.dtype == np.bool_ else _WIDTHS.get(itemsize) if a.dtype.kind in "iufc" else None
    if dtype is None or any(s % itemsize for s in a.strides):
        return None
    out_strides, n = [], 1
    for size in reversed(a.shape):
        out_strides.append(n)
        n *= size
    shape, (so, si) = merged_dims(a.shape, [out_strides[::-1], [s // itemsize for s in a.strides]])
    key = _key(dtype, so, si)
    dims = _dims.get(key, False)
    if dims is False:  # literal strides alone decide (`transposed_dims`): one answer per key
        dims = _dims[key] = transposed_dims(_copy(dtype, shape, so, si))
    permuted_runs = si[-1] == 1 and shape[-1] >= _MIN_SIDE and any(abs(si[d]) < abs(si[d + 1])
                                                                    for d in range(len(si) - 1))
    # A reversed last dim (``flip``): NumPy copies it an element at a time (1000x1000: 0.29 ms, this 0.09).
    reversed_runs = si[-1] == -1 and shape[-1] >= _MIN_SIDE
    if dims is None and not permuted_runs and not reversed_runs:
        return None  # the memory order kept (a slice: NumPy copies it well), or short runs
    if dims is not None and min(shape[dims[0]], shape[dims[1]]) < _MIN_SIDE:
        return None
    compiled, types = _kernel(key, dtype, shape, so, si)
    grain = max(1, _GRAIN // (a.size // shape[0]))
    if dims is not None and dims[0] == 0:  # whole tiles per chunk
        grain = -(-grain // TILE) * TILE
    return compiled, types, _values(shape, so, si), shape[0], grain
