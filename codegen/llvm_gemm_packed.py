"""A product by a panel-packed right operand as one LLVM function of a native program (`llvm_program.PackedGemm`):
the recurrent product of an RNN step, ``(batch, K) @ W (K, N)`` with a few rows and a weight reused every step.

NumPy's OpenBLAS packs both operands on every call; for 20 rows by a 256 x 1024 weight that packing is most of the
call (0.21 ms where torch's MKL takes 0.10). Here ``W`` is packed ONCE per sequence into column panels of `panel`
columns, each ``(K, panel)`` contiguous and zero-padded (`pack_panels`), and the function sweeps each panel with
register tiles of up to `rows_max` rows by ``panel / lanes`` vectors: per term ``k``, one load per vector of the
panel row and one broadcast of ``a[i, k]`` per row, then a fused multiply-add per accumulator. A tile of ``R`` rows
is its own function (R = 1 .. `rows_max`); the row blocks of a panel are as even as the maximum allows (20 rows by
at most 6: four tiles of 5). The terms go in passes of `DEPTH` (a later pass adds to ``c``), so the block of the
panel that every row tile reads stays in L1 (a pass over all of K=256 read each tile's block from L2: 10% slower).
The last panel's columns are stored through a mask. Measured on an Emerald Rapids
core: 20 x 256 @ 256 x 1024 in 0.10-0.12 ms, 20 x 1024 @ 1024 x 256 in 0.07-0.14 (OpenBLAS 0.13-0.20, 0.15-0.21).

Sizes and leading dimensions are arguments; the code depends only on the host's vector width. A tile of 2 rows
by 4 AVX-512 vectors reads, per term::

    %b0 = load <16 x float>, ptr %bp0, align 4
    ...
    %a1 = load float, ptr %ap1, align 4
    %as1 = shufflevector <16 x float> %as1.i, <16 x float> poison, <16 x i32> zeroinitializer
    %nacc1_3 = call <16 x float> @llvm.fmuladd.v16f32(<16 x float> %as1, <16 x float> %b3, <16 x float> %acc1_3)

>>> import numpy as np
>>> a, b = np.random.rand(7, 5).astype(np.float32), np.random.rand(5, 70).astype(np.float32)
>>> bool(np.allclose(packed_matmul(a, pack_panels(b)[0], 70), a @ b, rtol=1e-5))
True
"""
from __future__ import annotations

import ctypes

import numpy as np

from .codeblock import vector_mask, vector_splat
from .llvm_host import has_avx512

__all__ = ["DEPTH", "geometry", "panel", "rows_max", "pack_panels", "register_tile", "row_tiles", "packed_gemm",
           "packed_ints", "packed_matmul"]


DEPTH = 128  # terms per pass: a panel's 128 x 64 float32 block (32 KiB) stays in L1 for every row tile


def geometry():
    """``(lanes, vectors per panel, rows_max)`` of the host: the accumulators (rows x vectors), the panel's vectors
    and one broadcast fit in its vector registers (32 with AVX-512, 16 otherwise)."""
    return (16, 4, 6) if has_avx512() else (8, 3, 4)


def panel():
    """Columns per packed panel."""
    lanes, vectors, _ = geometry()
    return lanes * vectors


def rows_max():
    return geometry()[2]


def pack_panels(b):
    """``b`` ``(K, N)`` as float32 panels ``(ceil(N / panel), K, panel)``, zero-padded; returns ``(panels, N)``."""
    k, n = b.shape
    width = panel()
    count = -(-n // width)
    if n % width:
        padded = np.zeros((k, count * width), np.float32)
        padded[:, :n] = b
        b = padded
    # One strided copy (a weight's packing is paid once per sequence, so it must not cost a step's product).
    out = np.empty((count, k, width), np.float32)
    out[...] = b.reshape(k, count, width).transpose(1, 0, 2)
    return out, n


def register_tile(name, rows, vectors, lanes):
    """``void @name(a, lda, acs, bp, k, c, ldc, ncols, add)``: ``c[:rows, :ncols] (+)= a[:rows, :k] @ panel``, the
    panel ``k`` rows of ``vectors * lanes`` packed columns at ``bp``; ``a``'s element strides are ``(lda, acs)``
    (one broadcast per row and term, so a transposed ``a`` costs nothing more); ``add`` adds to ``c``. Per term::

        %kka = mul nsw i64 %kk, %acs
        %ap0 = getelementptr float, ptr %ar0, i64 %kka
        %a0 = load float, ptr %ap0, align 4
        %nacc0_0 = call <16 x float> @llvm.fmuladd.v16f32(<16 x float> %as0, <16 x float> %b0, <16 x float> %acc0_0)
    """
    vt = f"<{lanes} x float>"
    s = [f"define internal void @{name}(ptr noalias %a, i64 %lda, i64 %acs, ptr noalias %bp, i64 %k, "
         "ptr noalias %c, i64 %ldc, i64 %ncols, i1 %add) nounwind {", "entry:"]
    s += [line for r in range(rows) for line in (f"  %ao{r} = mul nsw i64 %lda, {r}",
                                                 f"  %ar{r} = getelementptr float, ptr %a, i64 %ao{r}")]
    s += ["  br label %head", "head:", "  %kk = phi i64 [0, %entry], [%kk.next, %body]"]
    s += [f"  %acc{r}_{v} = phi {vt} [zeroinitializer, %entry], [%nacc{r}_{v}, %body]"
          for r in range(rows) for v in range(vectors)]
    s += ["  %ok = icmp slt i64 %kk, %k", "  br i1 %ok, label %body, label %exit", "body:",
          f"  %bo = mul nsw i64 %kk, {vectors * lanes}", "  %kka = mul nsw i64 %kk, %acs"]
    for v in range(vectors):
        s += [f"  %bo{v} = add nsw i64 %bo, {v * lanes}", f"  %bp{v} = getelementptr float, ptr %bp, i64 %bo{v}",
              f"  %b{v} = load {vt}, ptr %bp{v}, align 4"]
    for r in range(rows):
        s += [f"  %ap{r} = getelementptr float, ptr %ar{r}, i64 %kka", f"  %a{r} = load float, ptr %ap{r}, align 4",
              *(f"  {text}" for text in vector_splat(f"%as{r}", "float", lanes, f"%a{r}"))]
        s += [f"  %nacc{r}_{v} = call {vt} @llvm.fmuladd.v{lanes}f32({vt} %as{r}, {vt} %b{v}, {vt} %acc{r}_{v})"
              for v in range(vectors)]
    s += ["  %kk.next = add nsw i64 %kk, 1", "  br label %head", "exit:"]
    s += [f"  {text}" for v in range(vectors) for text in vector_mask(f"%m{v}", lanes, "%ncols", first=v * lanes)]
    for r in range(rows):
        s += [f"  %co{r} = mul nsw i64 %ldc, {r}", f"  %cr{r} = getelementptr float, ptr %c, i64 %co{r}"]
        for v in range(vectors):
            s += [f"  %cp{r}_{v} = getelementptr float, ptr %cr{r}, i64 {v * lanes}",
                  f"  %old{r}_{v} = call {vt} @llvm.masked.load.v{lanes}f32.p0(ptr %cp{r}_{v}, i32 4, "
                  f"<{lanes} x i1> %m{v}, {vt} zeroinitializer)",
                  f"  %sum{r}_{v} = fadd {vt} %old{r}_{v}, %acc{r}_{v}",
                  f"  %out{r}_{v} = select i1 %add, {vt} %sum{r}_{v}, {vt} %acc{r}_{v}",
                  f"  call void @llvm.masked.store.v{lanes}f32.p0({vt} %out{r}_{v}, ptr %cp{r}_{v}, i32 4, "
                  f"<{lanes} x i1> %m{v})"]
    return "\n".join(s + ["  ret void", "}"])


def row_tiles(name, most, entry, ars, acs, panel):
    """The loop over ``%m`` rows of ``%aq`` (strides ``ars``, ``acs``) that calls the tiles ``name.t1`` ..
    ``name.t<most>`` on ``panel`` (``%kq`` terms) into ``%cp`` (``%ldc``, ``%cols``, ``%add``), entered from block
    ``entry`` and leaving to ``i.exit``; the tiles of a panel are as even as ``most`` rows allow (20 rows by at most
    6: four of 5)::

        i.body:
          %rest = sub nsw i64 %m, %i
          ...
          switch i64 %rows, label %r6 [i64 1, label %r1 ... i64 5, label %r5]
    """
    s = ["  br label %i.head", "i.head:",
         f"  %i = phi i64 [0, %{entry}], " + ", ".join(f"[%i.n{r}, %r{r}]" for r in range(1, most + 1)),
         "  %i.ok = icmp slt i64 %i, %m", "  br i1 %i.ok, label %i.body, label %i.exit", "i.body:",
         # rows per tile: ceil(rest / ceil(rest / most))
         "  %rest = sub nsw i64 %m, %i", f"  %rest1 = add nsw i64 %rest, {most - 1}",
         f"  %blocks = udiv i64 %rest1, {most}", "  %rest2 = add nsw i64 %rest, %blocks",
         "  %rest3 = sub nsw i64 %rest2, 1", "  %rows = udiv i64 %rest3, %blocks",
         f"  %aoff = mul nsw i64 %i, {ars}", "  %ai = getelementptr float, ptr %aq, i64 %aoff",
         "  %coff = mul nsw i64 %i, %ldc", "  %ci = getelementptr float, ptr %cp, i64 %coff",
         f"  switch i64 %rows, label %r{most} [" + " ".join(f"i64 {r}, label %r{r}" for r in range(1, most)) + "]"]
    for r in range(1, most + 1):
        s += [f"r{r}:", f"  call void @{name}.t{r}(ptr %ai, i64 {ars}, i64 {acs}, ptr {panel}, i64 %kq, ptr %ci, "
              "i64 %ldc, i64 %cols, i1 %add)", f"  %i.n{r} = add nsw i64 %i, {r}", "  br label %i.head"]
    return s


def packed_gemm(name):
    """``(declarations, text)`` of ``void @name(ptr a, ptr panels, ptr c, i64 m, i64 n, i64 k, i64 lda, i64 ldc)``:
    ``c[:m, :n] = a[:m, :k] @ b`` for ``panels`` = `pack_panels` ``(b)[0]``, row-major ``a`` and ``c``."""
    lanes, vectors, most = geometry()
    width, vt, depth = lanes * vectors, f"<{lanes} x float>", DEPTH
    decls = {f"declare {vt} @llvm.fmuladd.v{lanes}f32({vt}, {vt}, {vt})",
             f"declare void @llvm.masked.store.v{lanes}f32.p0({vt}, ptr, i32, <{lanes} x i1>)",
             f"declare {vt} @llvm.masked.load.v{lanes}f32.p0(ptr, i32, <{lanes} x i1>, {vt})"}
    tiles = [register_tile(f"{name}.t{r}", r, vectors, lanes) for r in range(1, most + 1)]
    s = [f"define internal void @{name}(ptr noalias %a, ptr noalias %bp, ptr noalias %c, i64 %m, i64 %n, i64 %k, "
         "i64 %lda, i64 %ldc) noinline nounwind {", "entry:", "  br label %p.head", "p.head:",
         "  %j = phi i64 [0, %entry], [%j.next, %q.exit]", "  %p.ok = icmp slt i64 %j, %n",
         "  br i1 %p.ok, label %p.body, label %done", "p.body:", f"  %pan = udiv i64 %j, {width}",
         "  %bo = mul nsw i64 %pan, %k", f"  %bo2 = mul nsw i64 %bo, {width}",
         "  %bpp = getelementptr float, ptr %bp, i64 %bo2", "  %cols = sub nsw i64 %n, %j",
         "  %cp = getelementptr float, ptr %c, i64 %j", "  br label %q.head", "q.head:",
         "  %q = phi i64 [0, %p.body], [%q.next, %i.exit]", "  %q.in = icmp slt i64 %q, %k",
         "  %q.first = icmp eq i64 %q, 0", "  %q.ok = or i1 %q.in, %q.first",
         "  br i1 %q.ok, label %q.body, label %q.exit", "q.body:", "  %q.left = sub nsw i64 %k, %q",
         f"  %q.short = icmp slt i64 %q.left, {depth}", f"  %kq = select i1 %q.short, i64 %q.left, i64 {depth}",
         "  %add = icmp sgt i64 %q, 0", f"  %qo = mul nsw i64 %q, {width}",
         "  %bpq = getelementptr float, ptr %bpp, i64 %qo", "  %aq = getelementptr float, ptr %a, i64 %q",
         *row_tiles(name, most, "q.body", "%lda", "1", "%bpq")]
    s += ["i.exit:", f"  %q.next = add nsw i64 %q, {depth}", "  br label %q.head",
          "q.exit:", f"  %j.next = add nsw i64 %j, {width}", "  br label %p.head", "done:", "  ret void", "}"]
    return decls, "\n".join(tiles + ["\n".join(s)])


def packed_ints(g):
    """`packed_gemm`'s integer arguments after its pointers, for a `llvm_program.PackedGemm`."""
    return (g.m, g.n, g.k, g.lda, g.ldc)


_FN: dict = {}


def packed_matmul(a, panels, n):
    """``a @ b`` through `packed_gemm` from Python (tests and measurements), ``panels`` from `pack_panels` ``(b)``."""
    from .llvm_compile import compile_function

    if "fn" not in _FN:
        decls, text = packed_gemm("jitorch_packed_gemm")
        source = "\n".join([*sorted(decls), text.replace("define internal void @jitorch_packed_gemm(",
                                                         "define void @jitorch_packed_gemm(")])
        address = compile_function(source, "jitorch_packed_gemm")
        _FN["fn"] = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 3 + [ctypes.c_int64] * 5))(address)
    a = np.ascontiguousarray(a, np.float32)
    m, k = a.shape
    c = np.empty((m, n), np.float32)
    _FN["fn"](a.ctypes.data, panels.ctypes.data, c.ctypes.data, m, n, k, k, n)
    return c
