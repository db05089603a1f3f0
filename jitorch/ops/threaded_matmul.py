"""Eager float32 products split over jitorch's threads as items (`codegen.llvm_gemm_items`): through the generated
register tiles (`codegen.llvm_gemm_tiled`) where they pay, else one small BLAS call per item.

Why not NumPy's OpenBLAS on two threads:

- OpenBLAS threads one product by a fixed split whose threads meet at every block of ``k``: when another process
  holds one of two cores, the half waiting for it waits a time slice. Measured on a 2-core EPYC under load, a
  linear layer's weight gradient ``g.T @ x`` (128 x 1024 by 1024 x 128) took 0.34 ms at one thread and 2.7 ms
  (best of 25; median 48 ms) at two; a transformer block's training step 100 ms against torch's 42. Here the items
  are claimed from a shared counter (`llvm_pool`): the calling thread takes every item a late worker has not, so
  a busy core costs a product that core's share of the work, not a time slice (the same step: 36 ms).
- A batched product (attention's ``q @ k.T`` over 16 x 4 heads, 64 x 32 by 32 x 64 each) is one BLAS call per
  matrix in NumPy, each too small for OpenBLAS to thread: the second core sat idle. Here the matrices are the items.

Tiles take a ``b`` with a unit stride and pay where `llvm_gemm_tiled.tiled_pays` says (the rule of compiled steps:
compiled and eager products give the same bits), at every thread count. Each element of ``c`` is summed over all of
``k`` by one item, in the tiles' fixed order, so a tiled answer is the same at every thread count and on every run.
BLAS items exist only at two threads or more (one thread keeps NumPy's one call); their rows depend on the shape
alone, so their answer is the same on every run and at every thread count above one.

>>> import numpy as np
>>> a, b = np.random.rand(64, 128).astype(np.float32), np.random.rand(256, 128).astype(np.float32)
>>> bool(np.allclose(threaded_matmul(a, b.T), a @ b.T, rtol=1e-5))
True
>>> threaded_matmul(a[:2], b.T) is None  # two rows, one thread's worth: NumPy's
True
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..codegen.llvm_gemm import blas_operands
from ..codegen.llvm_gemm_items import BLAS_ITEMS_TYPES, ITEM_FIELDS, ITEMS_TYPES, blas_items_address, \
    items_address, items_ints
from ..codegen.llvm_gemm_tiled import TRANSPOSED_MIN_FLOPS, tiled_address, tiled_geometry, tiled_pays, tiled_panels
from ..codegen.llvm_pool import available, shared_pool
from ..runtime.host_blas import gemm_function
from ..runtime.threads import get_num_threads

__all__ = ["THREADED_MIN", "threaded_matmul"]

_F32 = np.dtype(np.float32)
ROW_BLOCK = 64  # rows a tiled item of a 2-D product takes at least: each item packs its panels of b once
# OpenBLAS threads a product of more multiply-adds than this (SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD): a
# BLAS item stays below it, so OpenBLAS runs each on the pool thread that calls it.
BLAS_ITEM_MAX = 1 << 18
# A 2-D product's BLAS items: at least this many (two threads share 3 items as 2 + 1), of at least as many rows.
BLAS_MIN_ITEMS, BLAS_MIN_ROWS = 8, 16
# Fewer multiply-adds than this in a 2-D product: neither the tiles (`llvm_gemm_tiled.TRANSPOSED_MIN_FLOPS`) nor
# BLAS items take it, and callers skip the call (small layers' products are a few microseconds).
THREADED_MIN = TRANSPOSED_MIN_FLOPS
# A batch of small products splits from this many multiply-adds (~25 us on one core; a hand-off costs 5-15).
BLAS_SPLIT_MIN = 1 << 20


class _Shape(NamedTuple):
    """What `llvm_gemm_tiled.tiled_pays` and `llvm_gemm.blas_operands` read of a product (a `llvm_program.Gemm`
    without its operands)."""

    dtype: str
    m: int
    n: int
    k: int
    a_strides: tuple
    b_strides: tuple
    c_strides: tuple


def threaded_matmul(a, b):
    """``a @ b`` for NumPy float32 ``a`` (``(..., m, k)``) and ``b`` (``(..., k, n)``, batch dims broadcast) as items
    over jitorch's threads, row-major; None where neither tiles nor BLAS items pay (the caller runs NumPy's)."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.dtype != _F32 or b.dtype != _F32 or \
            a.ndim < 2 or b.ndim < 2:
        return None  # (a subclass, such as the meta device's data-less arrays, answers its own product)
    if b.ndim == 2 and a.ndim > 2 and a.size:
        # A batch times one matrix is one product of the batch's rows, as ATen's matmul folds it: its rows split
        # over the threads (one item per matrix would leave threads idle for a short batch of long matrices).
        c = threaded_matmul(a.reshape(-1, a.shape[-1]), b)
        return None if c is None else c.reshape(*a.shape[:-1], b.shape[-1])
    threads = get_num_threads()
    key = (a.shape, a.strides, b.shape, b.strides, threads)
    plan = _PLANS.get(key, _MISSING)
    if plan is _MISSING:
        plan = _plan(a, b, threads)
        if plan is None or len(plan[3]) <= _CACHED_ITEMS:  # (a large table is built again: its product is large)
            if len(_PLANS) >= _PLANS_MAX:  # a training step repeats a few dozen products: keep the recent ones
                _PLANS.clear()
            _PLANS[key] = plan
    if plan is None:
        return None
    loop, types, ints, items, c_shape, split = plan
    c = np.empty(c_shape, _F32)
    args = [a.ctypes.data, b.ctypes.data, c.ctypes.data, items.ctypes.data, *ints]
    pool = shared_pool(threads) if split else None  # looked up per call: a forked child starts its own pool
    if pool is None:
        _call(loop, types)(0, len(items), *args)
    else:
        pool.run_function(loop, types, args, len(items))
    return c


_PLANS: dict = {}
_PLANS_MAX = 512
_CACHED_ITEMS = 1024  # items of a table kept with its plan (48 KiB)
MAX_ITEMS = 1 << 16  # more items (a batch of 100,000 tiny matrices, a million rows of BLAS items): NumPy's product
_MISSING = object()


def _plan(a, b, threads):
    """How `threaded_matmul` runs a product of these operand layouts at ``threads`` threads: ``(loop address, its
    argument types, its integers, the item table, c's shape, whether to split it)``, or None for NumPy's product."""
    (m, k), n = a.shape[-2:], b.shape[-1]
    if (m == 0 or n == 0 or k == 0 or k != b.shape[-2] or any(s % 4 for s in a.strides + b.strides)
            or not available()):
        return None
    shape = _Shape("f32", m, n, k, (a.strides[-2] // 4, a.strides[-1] // 4), (b.strides[-2] // 4, b.strides[-1] // 4),
                   (n, 1))
    try:
        batch = () if a.ndim == 2 and b.ndim == 2 else np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:  # NumPy's product raises its own error
        return None
    count = int(np.prod(batch))
    if count == 0:
        return None
    work = count * m * n * k
    if tiled_pays(shape):
        tiled, loop, types = True, items_address(), ITEMS_TYPES
        ints = (tiled_address(tiled_geometry(n)), *items_ints(n, k, shape.a_strides, shape.b_strides, n))
    elif threads > 1 and _blas_pays(shape, count, work):
        blas = gemm_function("f32")
        transb, transa, ldb, lda, _ = blas_operands(shape)
        tiled, loop, types = False, blas_items_address("f32", transb, transa, blas.int_bits), BLAS_ITEMS_TYPES
        ints = (blas.address, n, k, ldb, lda, n)
    else:
        return None
    if (count if batch else 1 if tiled else _blas_blocks(m, n, k)) > MAX_ITEMS:
        return None
    items = _items(a, b, batch, count, shape, threads, tiled)
    split = threads > 1 and len(items) > 1 and work >= BLAS_SPLIT_MIN
    return loop, types, ints, items, batch + (m, n), split


def _blas_pays(shape, count, work):
    """Whether BLAS items beat NumPy's call at two threads or more: BLAS takes the layout, and OpenBLAS would thread
    the product itself (a 2-D one past `BLAS_ITEM_MAX`, whose rows then fit items under it) or would not thread a
    batch of small matrices worth splitting."""
    if blas_operands(shape) is None or gemm_function("f32") is None:
        return False
    per_matrix = shape.m * shape.n * shape.k
    if count == 1:
        return per_matrix > BLAS_ITEM_MAX and shape.n * shape.k <= BLAS_ITEM_MAX
    return per_matrix <= BLAS_ITEM_MAX and work >= BLAS_SPLIT_MIN


def _items(a, b, batch, count, shape, threads, tiled):
    """The item table (`codegen.llvm_gemm_items`): for a 2-D product, blocks of rows (by groups of panels when
    tiled: enough items for each thread to take a few); for a batched one, one item per matrix."""
    m, n, k = shape.m, shape.n, shape.k
    panels = tiled_panels(n) if tiled else 1
    if not batch:
        if tiled:
            want = 4 * threads if threads > 1 else 1
            groups = min(panels, want)
            blocks = max(1, min(-(-want // groups), m // ROW_BLOCK))
        else:
            groups, blocks = 1, _blas_blocks(m, n, k)
        rows = np.array([m * i // blocks for i in range(blocks + 1)], np.int64)
        cuts = np.array([panels * j // groups for j in range(groups + 1)], np.int64)
        items = np.empty((blocks * groups, ITEM_FIELDS), np.int64)
        first = np.repeat(rows[:-1], groups)
        items[:, 0] = first * shape.a_strides[0]
        items[:, 1] = 0
        items[:, 2] = first * n
        items[:, 3] = np.repeat(np.diff(rows), groups)
        items[:, 4] = np.tile(cuts[:-1], blocks)
        items[:, 5] = np.tile(cuts[1:], blocks)
        return items
    items = np.empty((count, ITEM_FIELDS), np.int64)
    for col, x in enumerate((a, b)):
        items[:, col] = _batch_offsets(np.broadcast_to(x, batch + x.shape[-2:])).ravel()
    items[:, 2] = np.arange(count, dtype=np.int64) * (m * n)
    items[:, 3], items[:, 4], items[:, 5] = m, 0, panels
    return items


def _blas_blocks(m, n, k):
    """Row blocks of a 2-D product's BLAS items: each under OpenBLAS's threading threshold, a few at least; the shape
    alone decides them (so does the answer)."""
    return max(-(-m // max(1, BLAS_ITEM_MAX // (n * k))), min(BLAS_MIN_ITEMS, m // BLAS_MIN_ROWS))


def _batch_offsets(x):
    """Element offset of each matrix of ``x`` (batch dims leading, broadcast dims stride 0), in batch order."""
    offsets = np.zeros((), np.int64)
    for size, stride in zip(x.shape[:-2], x.strides[:-2]):
        offsets = offsets[..., None] + np.arange(size, dtype=np.int64) * (stride // 4)
    return offsets


_CALLS: dict = {}


def _call(address, types):
    """A ctypes callable of the item loop at ``address`` (its range, then ``types``), for the one-thread case."""
    import ctypes

    found = _CALLS.get(address)
    if found is None:
        c_types = [ctypes.c_void_p if t == "ptr" else ctypes.c_int64 for t in types]
        found = _CALLS[address] = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, *c_types)(address)
    return found
