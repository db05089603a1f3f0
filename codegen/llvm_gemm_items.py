"""A product as a table of items and one native loop over a range of them: how eager float32 products split over the
native pool (`llvm_pool`), whose jobs are ranges.

`llvm_gemm_tiled.tiled_gemm` computes the columns of some panels of ``c = a @ b``; a pool splits one range, so
an eager product is written as a table of items, each a tiled call of its own: a block of rows by a group of
panels of a 2-D product, or one matrix of a batched one (attention's 64 products of 64 x 32 by 32 x 64, each too
small for BLAS to thread). An item is six ``i64``: the element offsets of its ``a``, ``b`` and ``c``, its row count
and its panel range. Every element of ``c`` belongs to exactly one item and is summed over all of ``k`` in the tiled
function's fixed order, so a tiled answer does not depend on the items, the thread count or which thread ran which.

The tiled function is called through its address (an argument), so one compiled loop serves every geometry::

    define void @jitorch_gemm_items(i64 %s0, i64 %s1, ptr %a, ptr %b, ptr %c, ptr %items, ptr %fn, i64 %n, ...
    body:
      %base = mul nsw i64 %i, 6
      ...
      call void %fn(i64 %p0, i64 %p1, ptr %ap, ptr %bp, ptr %cp, i64 %rows, i64 %n, i64 %k, ...

>>> import numpy as np
>>> from .llvm_gemm_tiled import tiled_address, tiled_geometry
>>> a, b = np.random.rand(40, 30).astype(np.float32), np.random.rand(30, 70).astype(np.float32)
>>> c = np.empty((40, 70), np.float32)
>>> items = np.array([[0, 0, 0, 16, 0, 2], [16 * 30, 0, 16 * 70, 24, 0, 2]], np.int64)
>>> run_items(0, 2, a, b, c, items, tiled_address(tiled_geometry(70)))
>>> bool(np.allclose(c, a @ b, rtol=1e-5))
True

Products the tiles do not pay for (few columns, a batch of 64 x 64 by 64 x 32) go through the same table to BLAS:
`blas_items_source` calls a Fortran ``sgemm`` per item (a block of rows, or one matrix), each small enough that
OpenBLAS runs it on the calling thread, so the pool's threads share the product and OpenBLAS's own threads (which
wait a time slice for a busy core) stay out of it. A BLAS item's sums may depend on its row count (OpenBLAS picks
kernels by size), so callers cut the rows by the shape alone: the same answer on every run.
"""
from __future__ import annotations

import ctypes

from .llvm_compile import compile_function
from .llvm_objcache import default_cache

__all__ = ["ITEM_FIELDS", "ITEMS_TYPES", "BLAS_ITEMS_TYPES", "items_address", "items_ints", "run_items",
           "blas_items_source", "blas_items_address"]

ITEM_FIELDS = 6  # a, b, c element offsets, rows, first panel, end panel
# The loop's arguments after its item range: a, b, c, the item table, the tiled function, then `items_ints`.
ITEMS_TYPES = ("ptr",) * 5 + ("i64",) * 7
_NAME = "jitorch_gemm_items"
# The BLAS loop's arguments after its item range: a, b, c, the item table, ``?gemm_``, then n, k, ldb, lda, ldc.
BLAS_ITEMS_TYPES = ("ptr",) * 5 + ("i64",) * 5


def _source():
    fields = ("oa", "ob", "oc", "rows", "p0", "p1")
    s = [f"define void @{_NAME}(i64 %s0, i64 %s1, ptr noalias %a, ptr noalias %b, ptr noalias %c, ptr %items, "
         "ptr %fn, i64 %n, i64 %k, i64 %ars, i64 %acs, i64 %brs, i64 %bcs, i64 %ldc) nounwind {",
         "entry:", "  br label %head", "head:", "  %i = phi i64 [%s0, %entry], [%i.next, %body]",
         "  %ok = icmp slt i64 %i, %s1", "  br i1 %ok, label %body, label %done", "body:",
         f"  %base = mul nsw i64 %i, {ITEM_FIELDS}"]
    for f, name in enumerate(fields):
        s += [f"  %{name}.i = add nsw i64 %base, {f}", f"  %{name}.p = getelementptr i64, ptr %items, i64 %{name}.i",
              f"  %{name} = load i64, ptr %{name}.p, align 8"]
    s += [f"  %{x}p = getelementptr float, ptr %{x}, i64 %o{x}" for x in "abc"]
    s += ["  call void %fn(i64 %p0, i64 %p1, ptr %ap, ptr %bp, ptr %cp, i64 %rows, i64 %n, i64 %k, i64 %ars, "
          "i64 %acs, i64 %brs, i64 %bcs, i64 %ldc)",
          "  %i.next = add nsw i64 %i, 1", "  br label %head", "done:", "  ret void", "}"]
    return "\n".join(s)


_STATE: dict = {}


def items_address(cache=None):
    """The address of the item loop ``@jitorch_gemm_items(i64 s0, i64 s1, ptr a, ptr b, ptr c, ptr items, ptr fn,
    i64 n, k, ars, acs, brs, bcs, ldc)``, compiled once per process (its object cached in ``cache``, by default the
    kernels' disk cache)."""
    found = _STATE.get("address")
    if found is None:
        found = _STATE["address"] = compile_function(_source(), _NAME, default_cache() if cache is None else cache)
    return found


def items_ints(n, k, a_strides, b_strides, ldc):
    """The loop's integer arguments: sizes and element strides shared by every item."""
    return (n, k, *a_strides, *b_strides, ldc)


def run_items(start, stop, a, b, c, items, fn, a_strides=None, b_strides=None):
    """Items ``[start, stop)`` of ``items`` (an ``(count, 6)`` int64 array) on the calling thread, for NumPy
    float32 ``a``, ``b``, ``c`` (2-D; strides from the arrays unless given) and tiled function address ``fn``: the
    loop from Python, for tests and measurements."""
    if "call" not in _STATE:
        _STATE["call"] = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64,
                                          *([ctypes.c_void_p] * 5 + [ctypes.c_int64] * 7))(items_address())
    a_strides = a_strides or tuple(s // 4 for s in a.strides[-2:])
    b_strides = b_strides or tuple(s // 4 for s in b.strides[-2:])
    _STATE["call"](start, stop, a.ctypes.data, b.ctypes.data, c.ctypes.data, items.ctypes.data, fn,
                   *items_ints(b.shape[-1], a.shape[-1], a_strides, b_strides, c.strides[-2] // 4))


def blas_items_source(name, dtype, transb, transa, int_bits):
    """``void @name(i64 s0, i64 s1, ptr a, ptr b, ptr c, ptr items, ptr fn, i64 n, k, ldb, lda, ldc)``: for each item,
    Fortran ``fn`` (``sgemm_``/``dgemm_``, integers of ``int_bits``) on its rows, row-major ``c = a @ b`` seen as the
    column-major ``c.T = b.T @ a.T`` (so ``b`` first; ``transb``/``transa`` "N" or "T", as
    `llvm_gemm.blas_operands` gives them). Only the row count changes between items::

        %rows.v = trunc i64 %rows to i32     ; for an LP64 BLAS
        store i32 %rows.v, ptr %m.v
        call void %fn(ptr %ta, ptr %tb, ptr %n.v, ptr %m.v, ptr %k.v, ptr %alpha, ptr %bp, ptr %ldb.v, ptr %ap, ...
    """
    ty, it = {"f32": "float", "f64": "double"}[dtype], f"i{int_bits}"

    def narrow(value, out):
        return [f"  {out} = trunc i64 {value} to {it}"] if it != "i64" else [f"  {out} = add i64 {value}, 0"]

    s = [f"define void @{name}(i64 %s0, i64 %s1, ptr noalias %a, ptr noalias %b, ptr noalias %c, ptr %items, "
         "ptr %fn, i64 %n, i64 %k, i64 %ldb, i64 %lda, i64 %ldc) nounwind {", "entry:"]
    for key in ("n", "m", "k", "ldb", "lda", "ldc"):
        s.append(f"  %{key}.v = alloca {it}")
    for key in ("n", "k", "ldb", "lda", "ldc"):
        s += narrow(f"%{key}", f"%{key}.t") + [f"  store {it} %{key}.t, ptr %{key}.v"]
    for key, value in (("ta", transb), ("tb", transa)):
        s += [f"  %{key} = alloca i8", f"  store i8 {ord(value)}, ptr %{key}"]
    s += [f"  %alpha = alloca {ty}", f"  store {ty} 1.0, ptr %alpha", f"  %beta = alloca {ty}",
          f"  store {ty} 0.0, ptr %beta", "  br label %head", "head:",
          "  %i = phi i64 [%s0, %entry], [%i.next, %body]", "  %ok = icmp slt i64 %i, %s1",
          "  br i1 %ok, label %body, label %done", "body:", f"  %base = mul nsw i64 %i, {ITEM_FIELDS}"]
    for f, field in enumerate(("oa", "ob", "oc", "rows")):
        s += [f"  %{field}.i = add nsw i64 %base, {f}",
              f"  %{field}.p = getelementptr i64, ptr %items, i64 %{field}.i",
              f"  %{field} = load i64, ptr %{field}.p, align 8"]
    s += [f"  %{x}p = getelementptr {ty}, ptr %{x}, i64 %o{x}" for x in "abc"]
    s += narrow("%rows", "%rows.t") + [f"  store {it} %rows.t, ptr %m.v",
                                       "  call void %fn(ptr %ta, ptr %tb, ptr %n.v, ptr %m.v, ptr %k.v, ptr %alpha, "
                                       "ptr %bp, ptr %ldb.v, ptr %ap, ptr %lda.v, ptr %beta, ptr %cp, ptr %ldc.v)",
                                       "  %i.next = add nsw i64 %i, 1", "  br label %head", "done:", "  ret void", "}"]
    return "\n".join(s)


def blas_items_address(dtype, transb, transa, int_bits, cache=None):
    """The address of `blas_items_source` for these transposes and integer width, compiled once per process."""
    key = ("blas", dtype, transb, transa, int_bits)
    found = _STATE.get(key)
    if found is None:
        name = f"jitorch_blas_items_{dtype}_{transb}{transa}_{int_bits}"
        source = blas_items_source(name, dtype, transb, transa, int_bits)
        found = _STATE[key] = compile_function(source, name, default_cache() if cache is None else cache)
    return found
