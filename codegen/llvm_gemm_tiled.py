"""A float32 product as generated register tiles over a right operand packed on the fly (`llvm_program.Gemm` with
``tiled`` set): the large products of a captured training step.

NumPy's OpenBLAS (SkylakeX kernels on this Zen 4) runs ``x @ W.T``, a linear layer's forward, at 80-85 GFLOP/s and
``h @ W`` at 94-96 on one core; the register tiles of `llvm_gemm_packed` reach 105-107 on both once the right
operand is in panels. So the product packs as it goes: for each panel of `panel` columns and each block of `DEPTH`
terms, the ``(DEPTH, panel)`` block of ``b`` is copied (zero-padded past ``n``) into a 32 KiB buffer on the stack,
which stays in L1 while every row tile of ``a`` runs over it (`register_tile`). A block of a ``b`` with unit column
stride is four masked vector loads per term; a ``b`` with unit ROW stride (``W.T``) is read a column at a time and
turned by register transposes (`_transposed_pack`); a ``b`` with neither is refused (`tiled_fits`; `tiled_matmul`
copies it). Each element of ``b`` is packed once per call: one pass over ``b`` against ``m`` rows of work.

The function's first two arguments are a range of panels, the signature of the native pool's kernels
(`llvm_pool`): a program splits the panels over its threads. Panels are independent (each owns its columns of
``c``), so the answer does not depend on the split. Per term of a panel block (AVX-512, unit column stride)::

    %bv0 = call <16 x float> @llvm.masked.load.v16f32.p0(ptr %bq0, i32 4, <16 x i1> %m0, <16 x float> zeroinitializer)
    ...
    store <16 x float> %bv0, ptr %sq0, align 4

>>> import numpy as np
>>> a, b = np.random.rand(9, 300).astype(np.float32), np.random.rand(70, 300).astype(np.float32)
>>> bool(np.allclose(tiled_matmul(a, b.T), a @ b.T, rtol=1e-5))
True
"""
from __future__ import annotations

import ctypes

import numpy as np

from .codeblock import vector_mask
from .llvm_compile import compile_function
from .llvm_gemm_packed import DEPTH, geometry, register_tile, row_tiles

__all__ = ["TILED_MIN_FLOPS", "TILED_SPLIT_FLOPS", "TILED_TYPES", "TRANSPOSED_MIN_FLOPS", "tiled_fits", "tiled_pays",
           "tiled_geometry", "tiled_gemm", "tiled_address", "tiled_ints", "tiled_panels", "tiled_matmul"]

# When the tiles pay (one core, Zen 4, NumPy's OpenBLAS 0.3.31 with SkylakeX kernels, operands hot in cache):
# - ``b`` with unit ROW stride (``x @ W.T``, ``q @ k.T``): OpenBLAS packs it slowly: 128x784 @ 784x512 80-85 GFLOP/s
#   against 95-97 tiled, 64x32 @ 32x64 per head 50-63 against 92. Tiled from TRANSPOSED_MIN_FLOPS up.
# - otherwise the tiles win only on large products (1024x128 @ 128x512: 101-105 against 94-100); on small ones
#   BLAS is as fast or faster (64x64 @ 64x64: 111 against 95). Tiled from TILED_MIN_FLOPS up.
# - few rows or a narrow ``c`` leave the tiles idle (10 rows: 63 against 99; 10 columns of a 32-wide panel: 25
#   against 59): at least MIN_ROWS rows, and panels at least three quarters full.
TILED_MIN_FLOPS = 1 << 21
TRANSPOSED_MIN_FLOPS = 1 << 16
MIN_ROWS = 32
# A split over the pool's threads pays above this many multiply-adds (a hand-off costs ~5-15 us).
TILED_SPLIT_FLOPS = 1 << 22
TILED_TYPES = ("ptr",) * 3 + ("i64",) * 8  # after the panel range: a, b, c, then `tiled_ints`
PREFETCH = 8  # rows ahead of the pack's reads


def tiled_fits(g):
    """Whether `Gemm` ``g`` can run tiled: float32, ``c`` with unit column stride, ``b`` with a unit stride."""
    return (g.dtype == "f32" and g.m > 0 and g.n > 0 and g.k > 0 and (g.c_strides[1] == 1 or g.n == 1)
            and 1 in g.b_strides)


def tiled_pays(g):
    """Whether `Gemm` ``g`` runs faster tiled than through BLAS (see the measurements above)."""
    if not tiled_fits(g) or g.m < MIN_ROWS:
        return False
    lanes, vectors, _ = tiled_geometry(g.n)
    if 4 * g.n < 3 * tiled_panels(g.n) * lanes * vectors:
        return False
    transposed = g.b_strides[0] == 1 and g.b_strides[1] != 1 and g.k > 1
    return g.m * g.n * g.k >= (TRANSPOSED_MIN_FLOPS if transposed else TILED_MIN_FLOPS)


def tiled_geometry(n):
    """``(lanes, vectors, rows)`` of the tiles of a product ``n`` columns wide: `llvm_gemm_packed.geometry`, or two
    vectors by more rows when at most two vectors wide (attention's 32-wide heads would leave half of a four-vector
    tile idle)."""
    lanes, vectors, rows = geometry()
    if vectors > 2 and n <= 2 * lanes:
        return lanes, 2, 12 if lanes == 16 else 6
    return lanes, vectors, rows


def tiled_panels(n):
    """The number of panels of a product ``n`` columns wide (the range its function splits)."""
    lanes, vectors, _ = tiled_geometry(n)
    return -(-n // (lanes * vectors))


def tiled_ints(g):
    """`tiled_gemm`'s integer arguments after its pointers."""
    return (g.m, g.n, g.k, *g.a_strides, *g.b_strides, g.c_strides[0])


def tiled_gemm(shape, name):
    """``(declarations, text)`` of ``void @name(i64 p0, i64 p1, ptr a, ptr b, ptr c, i64 m, n, k, ars, acs, brs,
    bcs, ldc)``: columns ``[p0 * panel, p1 * panel)`` of ``c = a @ b`` (element strides; ``c``'s column stride 1;
    ``b`` with a unit stride) by tiles of `tiled_geometry` ``shape``; sizes and strides are arguments. Its head::

        define internal void @g0(i64 %p0, i64 %p1, ptr noalias %a, ptr noalias %b, ptr noalias %c, i64 %m, ...
        entry:
          %buf = alloca [8192 x float], align 64
    """
    lanes, vectors, most = shape
    width, vt = lanes * vectors, f"<{lanes} x float>"
    decls = {f"declare {vt} @llvm.fmuladd.v{lanes}f32({vt}, {vt}, {vt})",
             f"declare void @llvm.masked.store.v{lanes}f32.p0({vt}, ptr, i32, <{lanes} x i1>)",
             f"declare {vt} @llvm.masked.load.v{lanes}f32.p0(ptr, i32, <{lanes} x i1>, {vt})",
             "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)"}
    tiles = [register_tile(f"{name}.t{r}", r, vectors, lanes) for r in range(1, most + 1)]
    s = [f"define internal void @{name}(i64 %p0, i64 %p1, ptr noalias %a, ptr noalias %b, ptr noalias %c, i64 %m, "
         "i64 %n, i64 %k, i64 %ars, i64 %acs, i64 %brs, i64 %bcs, i64 %ldc) noinline nounwind {", "entry:",
         f"  %buf = alloca [{DEPTH * width} x float], align 64", "  %rowunit = icmp eq i64 %brs, 1",
         "  %colunit = icmp eq i64 %bcs, 1", "  %notcol = xor i1 %colunit, true",
         "  %trans = and i1 %rowunit, %notcol", "  br label %p.head", "p.head:",
         "  %p = phi i64 [%p0, %entry], [%p.next, %q.exit]", "  %p.ok = icmp slt i64 %p, %p1",
         "  br i1 %p.ok, label %p.body, label %done", "p.body:",
         f"  %j = mul nsw i64 %p, {width}", "  %cols = sub nsw i64 %n, %j", "  %bjo = mul nsw i64 %j, %bcs",
         "  %bj = getelementptr float, ptr %b, i64 %bjo", "  %cp = getelementptr float, ptr %c, i64 %j"]
    s += [f"  {text}" for v in range(vectors) for text in vector_mask(f"%m{v}", lanes, "%cols", first=v * lanes)]
    s += ["  br label %q.head", "q.head:", "  %q = phi i64 [0, %p.body], [%q.next, %i.exit]",
          "  %q.in = icmp slt i64 %q, %k", "  %q.first = icmp eq i64 %q, 0", "  %q.ok = or i1 %q.in, %q.first",
          "  br i1 %q.ok, label %q.body, label %q.exit", "q.body:", "  %q.left = sub nsw i64 %k, %q",
          f"  %q.short = icmp slt i64 %q.left, {DEPTH}", f"  %kq = select i1 %q.short, i64 %q.left, i64 {DEPTH}",
          "  %add = icmp sgt i64 %q, 0", "  br i1 %trans, label %h.head, label %k.head",
          # the block's pack: term t of the block to buf[t * width ...]
          "k.head:", "  %t = phi i64 [0, %q.body], [%t.next, %k.body]", "  %t.ok = icmp slt i64 %t, %kq",
          "  br i1 %t.ok, label %k.body, label %k.exit", "k.body:", "  %row = add nsw i64 %q, %t",
          "  %ro = mul nsw i64 %row, %brs", "  %bq = getelementptr float, ptr %bj, i64 %ro",
          f"  %so = mul nsw i64 %t, {width}", "  %sq = getelementptr float, ptr %buf, i64 %so"]
    # The rows of a block lie a row stride apart in L2 or L3: each term asks for a row PREFETCH terms ahead.
    s += ["  %pfo = mul nsw i64 %brs, " + str(PREFETCH), "  %pf = getelementptr float, ptr %bq, i64 %pfo"]
    s += [f"  %pf{v} = getelementptr float, ptr %pf, i64 {v * lanes}" for v in range(vectors)]
    s += [f"  call void @llvm.prefetch.p0(ptr %pf{v}, i32 0, i32 3, i32 1)" for v in range(vectors)]
    for v in range(vectors):
        s += [f"  %bq{v} = getelementptr float, ptr %bq, i64 {v * lanes}",
              f"  %bv{v} = call {vt} @llvm.masked.load.v{lanes}f32.p0(ptr %bq{v}, i32 4, <{lanes} x i1> %m{v}, "
              f"{vt} zeroinitializer)",
              f"  %sq{v} = getelementptr float, ptr %sq, i64 {v * lanes}", f"  store {vt} %bv{v}, ptr %sq{v}, align 4"]
    s += ["  %t.next = add nsw i64 %t, 1", "  br label %k.head"]
    s += _transposed_pack(lanes, vectors, width)
    s += ["k.exit:",
          "  %aqo = mul nsw i64 %q, %acs", "  %aq = getelementptr float, ptr %a, i64 %aqo",
          *row_tiles(name, most, "k.exit", "%ars", "%acs", "%buf")]
    s += ["i.exit:", f"  %q.next = add nsw i64 %q, {DEPTH}", "  br label %q.head",
          "q.exit:", "  %p.next = add nsw i64 %p, 1", "  br label %p.head", "done:", "  ret void", "}"]
    return decls, "\n".join(tiles + ["\n".join(s)])


def _transposed_pack(lanes, vectors, width):
    """The block's pack when ``b`` has unit ROW stride (``W.T``): ``lanes`` terms of ``lanes`` columns at a time,
    each column a contiguous vector load, turned into rows by a register transpose (`_transpose`); a gather per term
    would touch ``panel`` lines a row stride apart for every term, which thrash L1's few sets. Per column::

        %x0_3.m = select i1 %x0_3.v, <16 x i1> %lm, <16 x i1> zeroinitializer
        %x0_3 = call <16 x float> @llvm.masked.load.v16f32.p0(ptr %x0_3.p, i32 4, <16 x i1> %x0_3.m, ...)
    """
    vt = f"<{lanes} x float>"
    s = ["h.head:", "  %h = phi i64 [0, %q.body], [%h.next, %h.body]", "  %h.ok = icmp slt i64 %h, %kq",
         "  br i1 %h.ok, label %h.body, label %k.exit", "h.body:", "  %hl = sub nsw i64 %kq, %h",
         *(f"  {text}" for text in vector_mask("%lm", lanes, "%hl")),
         "  %hq = add nsw i64 %q, %h", "  %hb = getelementptr float, ptr %bj, i64 %hq"]
    for g in range(vectors):
        rows = []
        for r in range(lanes):
            col, x = g * lanes + r, f"%x{g}_{r}"
            s += [f"  {x}.v = icmp sgt i64 %cols, {col}",
                  f"  {x}.m = select i1 {x}.v, <{lanes} x i1> %lm, <{lanes} x i1> zeroinitializer",
                  f"  {x}.o = mul nsw i64 %bcs, {col}", f"  {x}.p = getelementptr float, ptr %hb, i64 {x}.o",
                  f"  {x} = call {vt} @llvm.masked.load.v{lanes}f32.p0(ptr {x}.p, i32 4, <{lanes} x i1> {x}.m, "
                  f"{vt} zeroinitializer)"]
            rows.append(x)
        text, rows = _transpose(rows, lanes, f"%y{g}")
        s += text
        for t, row in enumerate(rows):
            s += [f"  %st{g}_{t}.o = add nsw i64 %h, {t}", f"  %st{g}_{t}.r = mul nsw i64 %st{g}_{t}.o, {width}",
                  f"  %st{g}_{t}.c = add nsw i64 %st{g}_{t}.r, {g * lanes}",
                  f"  %st{g}_{t}.p = getelementptr float, ptr %buf, i64 %st{g}_{t}.c",
                  f"  store {vt} {row}, ptr %st{g}_{t}.p, align 4"]
    return s + [f"  %h.next = add nsw i64 %h, {lanes}", "  br label %h.head"]


def _transpose(rows, lanes, prefix):
    """``(instructions, columns)``: the ``lanes x lanes`` transpose of vectors ``rows`` in log2(lanes) stages; at
    stage ``s`` the pair ``(i, i + s)`` (``i & s == 0``) swaps the lanes whose row and lane bit ``s`` differ::

        %y0_s1_0 = shufflevector <16 x float> %x0_0, <16 x float> %x0_1, <16 x i32> <i32 0, i32 16, i32 2, ...>
    """
    vt, text, stage = f"<{lanes} x float>", [], 1
    rows = list(rows)
    while stage < lanes:
        new = list(rows)
        for i in range(lanes):
            if i & stage:
                continue
            low = [lanes + lane - stage if lane & stage else lane for lane in range(lanes)]
            high = [lanes + lane if lane & stage else lane + stage for lane in range(lanes)]
            for dst, order in ((i, low), (i + stage, high)):
                new[dst] = f"{prefix}_s{stage}_{dst}"
                mask = ", ".join(f"i32 {o}" for o in order)
                text.append(f"  {new[dst]} = shufflevector {vt} {rows[i]}, {vt} {rows[i + stage]}, "
                            f"<{lanes} x i32> <{mask}>")
        rows, stage = new, stage * 2
    return text, rows


_FN: dict = {}
_ADDRESSES: dict = {}


def tiled_address(shape, cache=None):
    """The address of `tiled_gemm` for geometry ``shape``, compiled once per process (its object cached in
    ``cache``); native programs call it through this address, kept in their integers."""
    found = _ADDRESSES.get(shape)
    if found is None:
        name = "jitorch_tiled_gemm_" + "x".join(map(str, shape))  # one name per geometry: one IR per name
        decls, text = tiled_gemm(shape, name)
        source = "\n".join([*sorted(decls), text.replace(f"define internal void @{name}(", f"define void @{name}(")])
        found = _ADDRESSES[shape] = compile_function(source, name, cache)
    return found


def tiled_matmul(a, b, shape=None):
    """``a @ b`` (float32, any strides: a ``b`` with no unit stride is copied) through `tiled_gemm` from Python, on
    one thread, with the host's geometry or ``shape`` (tests, measurements)."""
    if a.dtype != np.float32 or b.dtype != np.float32 or a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"tiled_matmul: float32 matrices with matching inner sizes expected, got {a.dtype} "
                         f"{a.shape} and {b.dtype} {b.shape}")
    (m, k), n = a.shape, b.shape[1]
    if 1 not in (b.strides[0] // 4, b.strides[1] // 4):
        b = np.ascontiguousarray(b)
    shape = shape or tiled_geometry(n)
    if shape not in _FN:
        _FN[shape] = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64,
                                      *([ctypes.c_void_p] * 3 + [ctypes.c_int64] * 8))(tiled_address(shape))
    c = np.empty((m, n), np.float32)
    if m and n:
        strides = [s // 4 for s in a.strides + b.strides]
        _FN[shape](0, -(-n // (shape[0] * shape[1])), a.ctypes.data, b.ctypes.data, c.ctypes.data, m, n, k,
                   *strides, n)
    return c
