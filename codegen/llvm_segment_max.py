"""Running maxima of runs of rows as one LLVM function: ATen's ``embedding_bag(mode="max")`` loop.

``best[bag[i], c]`` and ``pos[bag[i], c]`` take row ``i``'s value and position when ``i`` starts its run (the first
row, or a bag id other than the previous row's) or when its value is strictly greater (``fcmp ogt``: a NaN never
replaces, and a NaN first row stays), so the first maximum wins, as ATen's. The column loop is branch-free (selects),
so LLVM vectorizes it; NumPy needs a ``reduceat`` that pays per run, or masked copies.

>>> import numpy as np
>>> fn = SegmentMax("f32")
>>> best, pos = np.empty((2, 1), np.float32), np.full((2, 1), -1)
>>> fn(np.array([[1.0], [3.0], [2.0]], np.float32), np.array([0, 0, 1]), best, pos)
>>> best.ravel().tolist(), pos.ravel().tolist()
([3.0, 2.0], [1, 2])
"""
from __future__ import annotations

import ctypes

from .codeblock import LLVM_TYPES
from .ir import FLOATS
from .llvm_compile import compile_hashed

__all__ = ["SegmentMax", "emit_segment_max"]


def emit_segment_max(name, ty):
    """LLVM IR of ``void @name(i64 n, i64 width, ptr rows, ptr bag, ptr best, ptr pos)`` for element type ``ty``."""
    return f"""define void @{name}(i64 %n, i64 %width, ptr noalias %rows, ptr noalias %bag, ptr noalias %best,
                 ptr noalias %pos) {{
entry:
  br label %row.head
row.head:
  %i = phi i64 [0, %entry], [%i.next, %row.latch]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %row.body, label %exit
row.body:
  %bag.p = getelementptr i64, ptr %bag, i64 %i
  %b = load i64, ptr %bag.p, align 8
  %is.first = icmp eq i64 %i, 0
  %i.prev = sub i64 %i, 1
  %i.prev.safe = select i1 %is.first, i64 0, i64 %i.prev
  %bag.prev.p = getelementptr i64, ptr %bag, i64 %i.prev.safe
  %b.prev = load i64, ptr %bag.prev.p, align 8
  %new.bag = icmp ne i64 %b.prev, %b
  %fresh = or i1 %is.first, %new.bag
  %row.off = mul i64 %i, %width
  %out.off = mul i64 %b, %width
  %row.p = getelementptr {ty}, ptr %rows, i64 %row.off
  %best.p = getelementptr {ty}, ptr %best, i64 %out.off
  %pos.p = getelementptr i64, ptr %pos, i64 %out.off
  br label %col.head
col.head:
  %c = phi i64 [0, %row.body], [%c.next, %col.body]
  %cols = icmp slt i64 %c, %width
  br i1 %cols, label %col.body, label %row.latch
col.body:
  %w.p = getelementptr {ty}, ptr %row.p, i64 %c
  %w = load {ty}, ptr %w.p
  %cur.p = getelementptr {ty}, ptr %best.p, i64 %c
  %cur = load {ty}, ptr %cur.p
  %greater = fcmp ogt {ty} %w, %cur
  %take = or i1 %fresh, %greater
  %new = select i1 %take, {ty} %w, {ty} %cur
  store {ty} %new, ptr %cur.p
  %at.p = getelementptr i64, ptr %pos.p, i64 %c
  %at = load i64, ptr %at.p, align 8
  %new.at = select i1 %take, i64 %i, i64 %at
  store i64 %new.at, ptr %at.p, align 8
  %c.next = add i64 %c, 1
  br label %col.head
row.latch:
  %i.next = add i64 %i, 1
  br label %row.head
exit:
  ret void
}}
"""


class SegmentMax:
    """The compiled loop for ``dtype`` (``f32``/``f64``). ``fn(rows, bag, best, pos)``: ``rows`` (n, width)
    C-contiguous, ``bag`` (n,) int64 nondecreasing ids in ``[0, len(best))``, ``best``/``pos`` (bags, width)
    C-contiguous of ``rows``' dtype and int64, updated in place (bags with no rows keep their contents)."""

    def __init__(self, dtype, cache=None):
        if dtype not in FLOATS:
            raise ValueError(f"SegmentMax: dtype must be one of {FLOATS}, got {dtype!r}")
        text = emit_segment_max("jitorch_segment_max", LLVM_TYPES[dtype])
        self.name, self.llvm_ir, address = compile_hashed(text, "jitorch_segment_max", cache)
        self._fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, *[ctypes.c_void_p] * 4)(address)

    def __call__(self, rows, bag, best, pos):
        n, width = rows.shape
        self._fn(n, width, *(a.__array_interface__["data"][0] for a in (rows, bag, best, pos)))
