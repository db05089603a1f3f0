"""Indexed copies and accumulations as LLVM functions: gather (``out = src[..., idx, ...]``) and scatter-add
(``out[..., idx, ...] += src``) along one dimension of a 3-D view ``(outer, dim, inner)``.

NumPy has no fast form of either for a multi-dimensional array: fancy indexing with broadcast index arrays builds
and walks an index per dimension (a 1000x1000 float32 ``gather`` along dim 1 took 6 ms, torch 1 ms), and
``np.add.at`` takes 50-80 ns an element. These functions walk ``(o, i, j)`` over the index's ``(outer, n, inner)``
range with every stride an argument, and read each index once:

- gather: ``out[o, i, j] = src[o, idx[o, i, j], j]``;
- scatter-add: ``out[o, idx[o, i, j], j] += src[o, i, j]``, in ``(o, i, j)`` order (the running sum of torch's CPU
  kernel, so repeated positions give its rounding).

A *rows* variant serves an index constant along ``inner`` with unit inner strides (``index_select``, embeddings and
their gradients, ``x[idx]``): one index per row and a contiguous, vectorized row copy or add. Every index is checked
(``wrap``: negatives count from the end first); the first bad one stops the call and its position ``(o * n + i) *
inner + j`` comes back (``-1``: all done), so the caller raises without a single out-of-bounds access.

>>> import numpy as np
>>> fn = IndexedAlongDim("gather", "f32", "i64", "points", wrap=False)
>>> src = np.arange(12, dtype=np.float32).reshape(3, 4)
>>> idx = np.array([[3, 0], [1, 1], [0, 2]])
>>> fn(src.reshape(3, 4, 1), idx.reshape(3, 2, 1)).reshape(3, 2).tolist()
[[3.0, 0.0], [5.0, 5.0], [8.0, 10.0]]
"""
from __future__ import annotations

import ctypes

import numpy as np

from .codeblock import LLVM_TYPES, CodeBlock
from .llvm_compile import compile_hashed

__all__ = ["IndexedAlongDim", "IndexedOutOfBounds", "emit_indexed"]

_ARGS = ("n", "r", "d", "os0", "os1", "os2", "ss0", "ss1", "ss2", "is0", "is1", "is2")
# Copies only move bits: any element of 1, 2, 4 or 8 bytes goes through the integer type of its width.
COPY_TYPES = {1: "i8", 2: "i16", 4: "i32", 8: "i64"}
VARIANTS = ("rows", "points", "scalar")


class IndexedOutOfBounds(IndexError):
    """An index outside its dimension; ``position`` is its flat position in the ``(outer, n, inner)`` range."""

    def __init__(self, position):
        super().__init__(f"index at position {position} is out of bounds")
        self.position = position


def emit_indexed(name, kind, ty, index_ty, variant, wrap):
    """The LLVM IR of one function ``i64 @name(i64 start, i64 stop, ptr out, ptr src, ptr idx, i64 n, ...)``.

    ``ty``: the LLVM element type (``float``, ``i32``...); ``index_ty``: ``i32`` or ``i64``. The rows variant of a
    float32 scatter-add emits, per ``(o, i)`` (abridged)::

        %p.raw = load i64, ptr %p.ip, align 8
        %p.bad = or i1 %p.low, %p.high
        br i1 %p.bad, label %fail, label %i.valid
      i.valid:
        %to = add nsw i64 %o.out, %p.out
        ...
        %a = load float, ptr %a.p, align 4
        %v = fadd float %a, %b
        store float %v, ptr %a.p, align 4
    """
    if variant not in VARIANTS:
        raise ValueError(f"emit_indexed: variant must be one of {VARIANTS}, got {variant!r}")
    rows = variant == "rows"
    cb = CodeBlock()
    line = cb.line
    args = ", ".join(f"i64 %{a}" for a in _ARGS)
    line(f"define i64 @{name}(i64 %start, i64 %stop, ptr noalias %out, ptr noalias %src, ptr noalias %idx, {args}) {{")
    if variant == "scalar":
        _scalar_body(cb, kind, ty, index_ty, wrap)
        return str(cb)
    _outer_open(cb)
    _loop_head(cb, "i", "0", "o.body", "%n", "j.exit" if not rows else "row.exit")
    with cb.indented():
        line("%i.idx = mul nsw i64 %i, %is1")
        line("%i.at = add nsw i64 %o.idx, %i.idx")
    if rows:
        with cb.indented():
            line("%pos = mul nsw i64 %i, %r")  # reported as (o * n + i) * inner
        _index(cb, index_ty, wrap, "%i.at", "i.valid")
        line("i.valid:")
        with cb.indented():
            _bases(cb, kind)
            line("br label %row.head")
        _loop_head(cb, "row", "0", "i.valid", "%r", "row.body")
        with cb.indented():
            line("%to.j = add nsw i64 %to, %row")
            line("%from.j = add nsw i64 %from, %row")
            _move(cb, kind, ty)
            line("br label %row.head")
        line("row.exit:")
        with cb.indented():
            line("br label %i.head")
    else:
        with cb.indented():
            line("br label %j.head")
        _loop_head(cb, "j", "0", "i.body", "%r", "j.valid")
        with cb.indented():
            line("%j.idx = mul nsw i64 %j, %is2")
            line("%j.at = add nsw i64 %i.at, %j.idx")
            line("%pos.i = mul nsw i64 %i, %r")
            line("%pos = add nsw i64 %pos.i, %j")
        _index(cb, index_ty, wrap, "%j.at", "j.valid")
        line("j.valid:")
        with cb.indented():
            _bases(cb, kind)
            line("%jo = mul nsw i64 %j, %os2")
            line("%js = mul nsw i64 %j, %ss2")
            line("%to.j = add nsw i64 %to, %jo")
            line("%from.j = add nsw i64 %from, %js")
            _move(cb, kind, ty)
            line("br label %j.head")
        line("j.exit:")
        with cb.indented():
            line("br label %i.head")
    _outer_close(cb, ("%pos.o = mul nsw i64 %o, %n", "%pos.or = mul nsw i64 %pos.o, %r",
                      "%bad = add nsw i64 %pos.or, %pos", "ret i64 %bad"))
    return str(cb)


def _scalar_body(cb, kind, ty, index_ty, wrap):
    """The ``scalar`` variant (one element per index, ``inner == 1``). A row's indices are checked first, in a loop of
    their own (a bad one ends the call with the row's first position, nothing of the row written); an index shared
    by every row (``is0 == 0``: ``index_select``, ``index_add_`` along the last dim) only in the first row. The copy
    loop then runs unchecked and scalar: a check per element (a compare, a flag, a select) took 600 us where the
    plain loop takes 200 (1000 rows by 500 indices), and LLVM's vector gathers were slower than scalar loads (250
    us). Unit strides along the dim (C-contiguous rows) get a loop of their own, the strides constant. Emits
    (abridged)::

        %first = icmp eq i64 %o, %start
        %check = or i1 %first, %varies
        br i1 %check, label %k.head, label %copy
        ...
        br label %u.head, !llvm.loop !0
    """
    line = cb.line
    _outer_open(cb)
    line("i.head:")
    with cb.indented():
        line("%first = icmp eq i64 %o, %start")
        line("%varies = icmp ne i64 %is0, 0")
        line("%check = or i1 %first, %varies")
        line("br i1 %check, label %k.head, label %copy")
    line("k.head:")
    with cb.indented():
        line("%k = phi i64 [ 0, %i.head ], [ %k.next, %k.body ]")
        line("%bad = phi i1 [ false, %i.head ], [ %bad.next, %k.body ]")
        line("%k.next = add nsw i64 %k, 1")
        line("%k.ok = icmp slt i64 %k, %n")
        line("br i1 %k.ok, label %k.body, label %k.end")
    line("k.body:")
    with cb.indented():
        line("%k.idx = mul nsw i64 %k, %is1")
        line("%k.at = add nsw i64 %o.idx, %k.idx")
        _load_index(cb, index_ty, wrap, "%k.at", "kp")
        line("%bad.next = or i1 %bad, %kp.bad")
        line("br label %k.head")
    line("k.end:")
    with cb.indented():
        line("br i1 %bad, label %fail, label %copy")
    line("copy:")
    with cb.indented():
        line("%os1.unit = icmp eq i64 %os1, 1")
        line("%ss1.unit = icmp eq i64 %ss1, 1")
        line("%unit = and i1 %os1.unit, %ss1.unit")
        line("br i1 %unit, label %u.head, label %c.head")
    for v, strides, loop_id in (("u", ("1", "1"), "!0"), ("c", ("%os1", "%ss1"), "!2")):
        _loop_head(cb, v, "0", "copy", "%n", f"{v}.body")
        with cb.indented():
            line(f"%{v}.idx = mul nsw i64 %{v}, %is1")
            line(f"%{v}.at = add nsw i64 %o.idx, %{v}.idx")
            _load_index(cb, index_ty, wrap, f"%{v}.at", f"{v}p")
            _bases(cb, kind, f"%{v}p", f"%{v}.to", f"%{v}.from", f"%{v}", strides, v)
            _move(cb, kind, ty, v)
            line(f"br label %{v}.head, !llvm.loop {loop_id}")
        line(f"{v}.exit:")
        with cb.indented():
            line("br label %i.exit")
    _outer_close(cb, ("%row = mul nsw i64 %o, %n", "ret i64 %row"))
    line("!0 = distinct !{!0, !1}")
    line('!1 = !{!"llvm.loop.vectorize.enable", i1 false}')
    line("!2 = distinct !{!2, !1}")


def _outer_open(cb):
    """The entry and the loop over ``o`` in ``[start, stop)`` (latch ``i.exit``), with each operand's offset of ``o``,
    branching to ``i.head``."""
    cb.line("entry:")
    with cb.indented():
        cb.line("br label %o.head")
    _loop_head(cb, "o", "%start", "entry", "%stop", "i.exit")
    with cb.indented():
        cb.line("%o.out = mul nsw i64 %o, %os0")
        cb.line("%o.src = mul nsw i64 %o, %ss0")
        cb.line("%o.idx = mul nsw i64 %o, %is0")
        cb.line("br label %i.head")


def _outer_close(cb, fail):
    """``i.exit`` back to the ``o`` loop, the ``fail`` block's lines (which return the bad position), ``ret -1``."""
    cb.line("i.exit:")
    with cb.indented():
        cb.line("br label %o.head")
    cb.line("fail:")
    with cb.indented():
        for text in fail:
            cb.line(text)
    cb.line("o.exit:")
    with cb.indented():
        cb.line("ret i64 -1")
    cb.line("}")


def _loop_head(cb, v, first, entry, bound, latch):
    """``v`` from ``first`` (reached from block ``entry``) while ``v < bound``, incremented by the block ``latch``
    that branches back; the body block is ``{v}.body`` and the exit ``{v}.exit``."""
    cb.line(f"{v}.head:")
    with cb.indented():
        cb.line(f"%{v} = phi i64 [ {first}, %{entry} ], [ %{v}.next, %{latch} ]")
        cb.line(f"%{v}.next = add nsw i64 %{v}, 1")
        cb.line(f"%{v}.ok = icmp slt i64 %{v}, {bound}")
        cb.line(f"br i1 %{v}.ok, label %{v}.body, label %{v}.exit")
    cb.line(f"{v}.body:")


def _index(cb, index_ty, wrap, at, ok):
    """``%p``: the index at element offset ``at`` (sign-extended, wrapped when ``wrap``); out of ``[0, d)`` jumps
    to ``fail``."""
    with cb.indented():
        _load_index(cb, index_ty, wrap, at)
        cb.line(f"br i1 %p.bad, label %fail, label %{ok}")


def _load_index(cb, index_ty, wrap, at, v="p"):
    """``%p`` (the index at element offset ``at``, sign-extended, wrapped when ``wrap``) and ``%p.bad`` (outside
    ``[0, d)``); ``v`` names them in place of ``p``."""
    cb.line(f"%{v}.ip = getelementptr {index_ty}, ptr %idx, i64 {at}")
    raw = f"%{v}.raw"
    cb.line(f"{raw} = load {index_ty}, ptr %{v}.ip, align {4 if index_ty == 'i32' else 8}")
    if index_ty != "i64":
        cb.line(f"%{v}.wide = sext {index_ty} {raw} to i64")
        raw = f"%{v}.wide"
    if wrap:
        cb.line(f"%{v}.neg = icmp slt i64 {raw}, 0")
        cb.line(f"%{v}.up = add nsw i64 {raw}, %d")
        cb.line(f"%{v} = select i1 %{v}.neg, i64 %{v}.up, i64 {raw}")
    else:
        cb.line(f"%{v} = add nsw i64 {raw}, 0")
    cb.line(f"%{v}.low = icmp slt i64 %{v}, 0")
    cb.line(f"%{v}.high = icmp sge i64 %{v}, %d")
    cb.line(f"%{v}.bad = or i1 %{v}.low, %{v}.high")


def _bases(cb, kind, p="%p", to="%to", frm="%from", i="%i", strides=("%os1", "%ss1"), v="i"):
    """``to``/``frm``: the row starts written and read; gather writes at ``i`` and reads at index ``p``, scatter the
    other way round (``strides``: the dim's, out and src; ``v`` prefixes the names)."""
    out_dim, src_dim = (i, p) if kind == "gather" else (p, i)
    cb.line(f"%{v}.out = mul nsw i64 {out_dim}, {strides[0]}")
    cb.line(f"%{v}.src = mul nsw i64 {src_dim}, {strides[1]}")
    cb.line(f"{to} = add nsw i64 %o.out, %{v}.out")
    cb.line(f"{frm} = add nsw i64 %o.src, %{v}.src")


def _move(cb, kind, ty, v=None):
    """The element read from ``%from.j`` and written (or added) at ``%to.j`` (``v``: the loop's own names)."""
    size = {"i8": 1, "i16": 2, "i32": 4, "i64": 8, "float": 4, "double": 8}[ty]
    s, frm, to = ("", "%from.j", "%to.j") if v is None else (f".{v}", f"%{v}.from", f"%{v}.to")
    cb.line(f"%b.p{s} = getelementptr {ty}, ptr %src, i64 {frm}")
    cb.line(f"%b{s} = load {ty}, ptr %b.p{s}, align {size}")
    cb.line(f"%a.p{s} = getelementptr {ty}, ptr %out, i64 {to}")
    if kind == "gather":
        cb.line(f"store {ty} %b{s}, ptr %a.p{s}, align {size}")
        return
    cb.line(f"%a{s} = load {ty}, ptr %a.p{s}, align {size}")
    cb.line(f"%v{s} = {'fadd' if ty in ('float', 'double') else 'add'} {ty} %a{s}, %b{s}")
    cb.line(f"store {ty} %v{s}, ptr %a.p{s}, align {size}")


class IndexedAlongDim:
    """One compiled gather or scatter-add for an element type (``f32``... or, for gather, the element width as
    ``b1``/``b2``/``b4``/``b8``), index type, variant (`VARIANTS`: ``rows`` for an index constant along ``inner``
    with unit inner strides, ``scalar`` for ``inner == 1``, ``points`` for any strides) and negative-index rule
    (``wrap``).

    ``fn(src, idx, out=None)`` on 3-D views ``(outer, dim, inner)``: gather returns ``out`` of ``idx``'s shape (made
    when None); scatter-add adds into ``out`` (3-D, ``(outer, dim, inner)``) and returns it. Raises
    `IndexedOutOfBounds` for an index outside the dimension (``out`` then holds the updates made before it).
    """

    def __init__(self, kind, dtype, index_dtype, variant, wrap, cache=None):
        if kind not in ("gather", "scatter_add"):
            raise ValueError(f"IndexedAlongDim: kind must be 'gather' or 'scatter_add', got {kind!r}")
        self.kind, self.variant = kind, variant
        ty = COPY_TYPES[int(dtype[1:])] if dtype.startswith("b") else LLVM_TYPES[dtype]
        text = emit_indexed("jitorch_indexed", kind, ty, LLVM_TYPES[index_dtype], variant, wrap)
        self.name, self.llvm_ir, self.address = compile_hashed(text, "jitorch_indexed", cache)
        self._fn = ctypes.CFUNCTYPE(ctypes.c_int64, *([ctypes.c_int64] * 2 + [ctypes.c_void_p] * 3 +
                                                      [ctypes.c_int64] * len(_ARGS)))(self.address)

    def __call__(self, src, idx, out=None):
        outer, n, inner = idx.shape
        if self.kind == "gather":
            if out is None:
                out = np.empty(idx.shape, src.dtype)
            dim = src.shape[1]
        else:
            dim = out.shape[1]
        if self.variant == "scalar" and inner != 1:
            raise ValueError(f"IndexedAlongDim: the scalar variant takes inner == 1, got index shape {idx.shape}")
        if dim == 0 and idx.size:
            raise IndexedOutOfBounds(0)  # (the scalar variant would read element 0 of an empty dim)
        item, index_item = src.itemsize, idx.itemsize
        strides = [s // item for s in out.strides] + [s // item for s in src.strides] + \
            [s // index_item for s in idx.strides]
        self.run(src, idx, out, idx.shape, strides, dim)
        return out

    def run(self, src, idx, out, shape, strides, dim):
        """The call on arrays of any shape whose 3-D geometry is given: ``shape`` the index's ``(outer, n, inner)``,
        ``strides`` nine element strides (out's, src's, idx's), ``dim`` the indexed dim's size; no checks (the
        caller's), no views made (`as_strided` costs 5 us an array)."""
        ptrs = [a.__array_interface__["data"][0] for a in (out, src, idx)]
        bad = self._fn(0, shape[0], *ptrs, shape[1], shape[2], dim, *strides)
        if bad >= 0:
            raise IndexedOutOfBounds(bad)
