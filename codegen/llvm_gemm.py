"""Matrix products as LLVM functions of a native program (`llvm_program`): the register loop and the BLAS call.

Both are size-generic: sizes and strides are arguments of the function, so the same code serves a product at any
size (the program reads the integers from its integer array). A product that fits neither is an IR reduction
(`gemm_reduction_kernel`), parametrized like any kernel.
"""
from __future__ import annotations

from .codeblock import LLVM_TYPES, vector_mask, vector_splat
from .ir import Buffer, Kernel, Store, load, op
from .llvm_emit import _metadata_base

__all__ = ["VECTOR_BYTES", "VECTOR_CHUNK", "gemm_reduction_kernel", "vector_fits", "vector_chunk", "vector_gemm",
           "vector_ints", "blas_operands", "blas_gemm", "blas_ints", "uses_blas"]

# A product whose output rows fit in this many bytes accumulates each row in registers, VECTOR_CHUNK bytes at a time
# (half that for narrow rows).
VECTOR_BYTES = 512
VECTOR_CHUNK = 128
_ITEM = {"f32": 4, "f64": 8}


def gemm_reduction_kernel(g):
    """The generic product as an IR reduction over ``(m, n, k)``: any strides (the emitter's reduction loop).

    >>> from jitorch.codegen.llvm_program import Gemm, Ref
    >>> print(gemm_reduction_kernel(Gemm("f32", 2, 3, 4, Ref(0), (4, 1), Ref(1), (3, 1), Ref(2), (3, 1))))
    kernel (2, 3, 4) reduce=1
      buf0 f32 strides=(4, 0, 1) offset=0
      buf1 f32 strides=(0, 1, 3) offset=0
      buf2 f32 strides=(3, 1, 0) offset=0
      %0 = load buf0
      %1 = load buf1
      %2 = mul %0 %1
      store buf2 sum %2
    """
    a = load(0, g.dtype)
    b = load(1, g.dtype)
    (a0, a1), (b0, b1), (c0, c1) = g.a_strides, g.b_strides, g.c_strides
    buffers = (Buffer(g.dtype, (a0, 0, a1)), Buffer(g.dtype, (0, b1, b0)), Buffer(g.dtype, (c0, c1, 0)))
    return Kernel((g.m, g.n, g.k), buffers, (Store(2, op("mul", a, b), "sum"),), 1)


def gemm_outer_kernel(g):
    """A product over one term (``k == 1``, an outer product) as the elementwise kernel it is: BLAS is slow there
    (NumPy's OpenBLAS takes 5x the multiply's time for a (1024, 1) by (1, 256) product) and the loop vectorizes.

    >>> from jitorch.codegen.llvm_program import Gemm, Ref
    >>> print(gemm_outer_kernel(Gemm("f32", 2, 3, 1, Ref(0), (1, 1), Ref(1), (3, 1), Ref(2), (3, 1))))
    kernel (2, 3) reduce=0
      buf0 f32 strides=(1, 0) offset=0
      buf1 f32 strides=(0, 1) offset=0
      buf2 f32 strides=(3, 1) offset=0
      %0 = load buf0
      %1 = load buf1
      %2 = mul %0 %1
      store buf2 %2
    """
    buffers = (Buffer(g.dtype, (g.a_strides[0], 0)), Buffer(g.dtype, (0, g.b_strides[1])),
               Buffer(g.dtype, tuple(g.c_strides)))
    return Kernel((g.m, g.n), buffers, (Store(2, op("mul", load(0, g.dtype), load(1, g.dtype))),))


def vector_chunk(g):
    """Lanes per register chunk: a narrow product (``n`` within half a chunk) gets half chunks, wasting no lanes."""
    item = _ITEM[g.dtype]
    return VECTOR_CHUNK // 2 // item if g.n * item <= VECTOR_CHUNK // 2 else VECTOR_CHUNK // item


# One chunk of V columns of row i at column %j: the k loop, the store, then %j += V. {mask} makes %{t}.mask and
# {splat} %{t}.a.splat, a[i, k] in every lane.
_CHUNK = """{t}.pre:
{mask}  br label %{t}.head
{t}.head:
  %{t}.kk = phi i64 [ 0, %{t}.pre ], [ %{t}.kk.next, %{t}.body ]
  %{t}.acc = phi {vt} [ zeroinitializer, %{t}.pre ], [ %{t}.acc.next, %{t}.body ]
  %{t}.ok = icmp slt i64 %{t}.kk, %k
  br i1 %{t}.ok, label %{t}.body, label %{t}.exit
{t}.body:
  %{t}.ac = mul nsw i64 %{t}.kk, %a1
  %{t}.ao = add nsw i64 %a.row, %{t}.ac
  %{t}.ap = getelementptr {ty}, ptr %a, i64 %{t}.ao
  %{t}.a = load {ty}, ptr %{t}.ap
{splat}
  %{t}.br = mul nsw i64 %{t}.kk, %b0
  %{t}.bo = add nsw i64 %{t}.br, %j
  %{t}.bp = getelementptr {ty}, ptr %b, i64 %{t}.bo
  {load}
  %{t}.acc.next = call {vt} @llvm.fmuladd.v{v}{s}({vt} %{t}.a.splat, {vt} %{t}.b, {vt} %{t}.acc)
  %{t}.kk.next = add nsw i64 %{t}.kk, 1
  br label %{t}.head, !llvm.loop !{loop}
{t}.exit:
  %{t}.co = add nsw i64 %c.row, %j
  %{t}.cp = getelementptr {ty}, ptr %c, i64 %{t}.co
  {store}
  %{t}.j = add nsw i64 %j, {v}
  br label %j.head"""

_ROWS = """define internal void @{name}(ptr noalias %a, ptr noalias %b, ptr noalias %c, i64 %m, i64 %n, i64 %k, \
i64 %a0, i64 %a1, i64 %b0, i64 %c0) noinline nounwind {{
entry:
  br label %i.head
i.head:
  %i = phi i64 [ 0, %entry ], [ %i.next, %j.exit ]
  %i.ok = icmp slt i64 %i, %m
  br i1 %i.ok, label %i.body, label %exit
i.body:
  %a.row = mul nsw i64 %i, %a0
  %c.row = mul nsw i64 %i, %c0
  br label %j.head
j.head:
  %j = phi i64 [ 0, %i.body ], [ %w.j, %w.exit ], [ %p.j, %p.exit ], [ %t.j, %t.exit ]
  %left = sub nsw i64 %n, %j
  %wide = icmp sge i64 %left, {w2}
  br i1 %wide, label %w.pre, label %one
one:
  %plain = icmp sge i64 %left, {w}
  br i1 %plain, label %p.pre, label %rest
rest:
  %some = icmp sgt i64 %left, 0
  br i1 %some, label %t.pre, label %j.exit
{chunks}
j.exit:
  %i.next = add nsw i64 %i, 1
  br label %i.head
exit:
  ret void
}}
!{hint} = !{{!"llvm.loop.unroll.count", i32 4}}
!{w_loop} = distinct !{{!{w_loop}, !{hint}}}
!{p_loop} = distinct !{{!{p_loop}, !{hint}}}
!{t_loop} = distinct !{{!{t_loop}, !{hint}}}"""


def vector_gemm(g, name):
    """Rows of ``c`` in chunks accumulated in registers: ``acc = fmuladd(splat(a[i, k]), b[k, j:j + V], acc)``.

    With ``W`` = `vector_chunk` lanes, a row goes in plain ``<2W x T>`` chunks while ``2W`` columns are left (a
    64-wide float32 row in one pass), then one plain ``<W x T>`` chunk if ``W`` are left, then one masked ``<W x T>``
    chunk for the rest. Needs unit column strides in ``b`` and ``c``. Every size and stride is an argument (only
    ``W`` is code), so one function serves every size; the k loops are unrolled by 4, as a known ``k`` would be.
    For float32 the wide chunk's inner block reads::

        %w.b = load <64 x float>, ptr %w.bp, align 4
        %w.acc.next = call <64 x float> @llvm.fmuladd.v64f32(<64 x float> %w.a.splat, <64 x float> %w.b, ...)
    """
    ty, item, s = LLVM_TYPES[g.dtype], _ITEM[g.dtype], g.dtype
    w = vector_chunk(g)
    hint = _metadata_base(name)  # then one loop id per chunk's k loop: each loop needs its own
    decls, chunks = set(), []
    for t, v, masked in (("w", 2 * w, False), ("p", w, False), ("t", w, True)):
        vt, mt = f"<{v} x {ty}>", f"<{v} x i1>"
        decls.add(f"declare {vt} @llvm.fmuladd.v{v}{s}({vt}, {vt}, {vt})")
        if masked:
            decls |= {f"declare {vt} @llvm.masked.load.v{v}{s}.p0(ptr, i32, {mt}, {vt})",
                      f"declare void @llvm.masked.store.v{v}{s}.p0({vt}, ptr, i32, {mt})"}
            load = f"%{t}.b = call {vt} @llvm.masked.load.v{v}{s}.p0(ptr %{t}.bp, i32 {item}, {mt} %{t}.mask, " \
                   f"{vt} zeroinitializer)"
            store = f"call void @llvm.masked.store.v{v}{s}.p0({vt} %{t}.acc, ptr %{t}.cp, i32 {item}, {mt} %{t}.mask)"
            mask = _indented(vector_mask(f"%{t}.mask", v, "%left")) + "\n"
        else:
            load = f"%{t}.b = load {vt}, ptr %{t}.bp, align {item}"
            store, mask = f"store {vt} %{t}.acc, ptr %{t}.cp, align {item}", ""
        loop = hint + 1 + "wpt".index(t)
        splat = _indented(vector_splat(f"%{t}.a.splat", ty, v, f"%{t}.a"))
        chunks.append(_CHUNK.format(t=t, v=v, vt=vt, ty=ty, s=s, load=load, store=store, mask=mask, loop=loop,
                                    splat=splat))
    text = _ROWS.format(name=name, w=w, w2=2 * w, chunks="\n".join(chunks), hint=hint, w_loop=hint + 1,
                        p_loop=hint + 2, t_loop=hint + 3)
    return decls, text


def _indented(lines):
    return "\n".join(f"  {text}" for text in lines)


def vector_ints(g):
    """`vector_gemm` 's integer arguments after its pointers."""
    return (g.m, g.n, g.k, g.a_strides[0], g.a_strides[1], g.b_strides[0], g.c_strides[0])


def blas_operands(g):
    """The Fortran ``?gemm`` arguments for row-major ``c = a @ b``, or None when the strides do not fit BLAS.

    Row-major ``c`` is column-major ``c^T = b^T a^T``, so BLAS sees ``(n, m, k)`` with ``b`` first.
    Returns ``(transb, transa, ldb, lda, ldc)``.
    """
    def layout(rows, cols, strides):
        r, c = (strides[0] if rows > 1 else max(cols, 1)), (strides[1] if cols > 1 else 1)
        if c == 1 and r >= max(cols, 1):
            return "N", r
        if r == 1 and c >= max(rows, 1) and cols > 1:
            return "T", c
        return None

    c_layout = layout(g.m, g.n, g.c_strides)
    la, lb = layout(g.m, g.k, g.a_strides), layout(g.k, g.n, g.b_strides)
    if c_layout is None or c_layout[0] != "N" or la is None or lb is None:
        return None
    return lb[0], la[0], lb[1], la[1], c_layout[1]


def blas_gemm(g, name):
    """A call of ``?gemm_`` through the pointer ``%fn``; Fortran takes every argument by reference (allocas). The
    sizes and leading dimensions are arguments (`blas_ints`); the transposes are part of the code::

        %n.v = alloca i64                ; i32 for an LP64 BLAS (``blas_int_bits``)
        store i64 %n, ptr %n.v
        ...
        call void %fn(ptr %ta, ptr %tb, ptr %n.v, ptr %m.v, ptr %k.v, ptr %alpha, ptr %b, ptr %ldb.v, ptr %a, ...)
    """
    ty = LLVM_TYPES[g.dtype]
    transb, transa = blas_operands(g)[:2]
    names = ("n", "m", "k", "ldb", "lda", "ldc")
    it = f"i{g.blas_int_bits}"
    lines = [f"define internal void @{name}(ptr %a, ptr %b, ptr %c, ptr %fn, "
             f"{', '.join(f'i64 %{key}' for key in names)}) noinline nounwind {{", "entry:"]
    for key in names:
        value = f"%{key}"
        if it != "i64":
            lines.append(f"  %{key}.t = trunc i64 %{key} to {it}")
            value = f"%{key}.t"
        lines += [f"  %{key}.v = alloca {it}", f"  store {it} {value}, ptr %{key}.v"]
    for key, value in (("ta", transb), ("tb", transa)):
        lines += [f"  %{key} = alloca i8", f"  store i8 {ord(value)}, ptr %{key}"]
    lines += [f"  %alpha = alloca {ty}", f"  store {ty} 1.0, ptr %alpha",
              f"  %beta = alloca {ty}", f"  store {ty} 0.0, ptr %beta",
              "  call void %fn(ptr %ta, ptr %tb, ptr %n.v, ptr %m.v, ptr %k.v, ptr %alpha, ptr %b, ptr %ldb.v, "
              "ptr %a, ptr %lda.v, ptr %beta, ptr %c, ptr %ldc.v)",
              "  ret void", "}"]
    return set(), "\n".join(lines)


def blas_ints(g):
    _, _, ldb, lda, ldc = blas_operands(g)
    return (g.n, g.m, g.k, ldb, lda, ldc)


def uses_blas(g):
    return g.m > 0 and g.n > 0 and g.blas is not None and g.k > 0 and blas_operands(g) is not None


def vector_fits(g):
    """Whether `_vector_gemm` applies: unit column strides in ``b`` and ``c``, a row of ``c`` in `VECTOR_BYTES`."""
    return ((g.b_strides[1] == 1 or g.n == 1) and (g.c_strides[1] == 1 or g.n == 1)
            and 0 < g.n * _ITEM[g.dtype] <= VECTOR_BYTES)


