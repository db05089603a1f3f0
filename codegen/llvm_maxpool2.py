"""The 2x2, stride-2 float32 max pool (a CNN's usual pool) and its gradient as LLVM functions of native programs.

The general pool kernels (`jitorch.cpu._lower_pool`) are IR loops over the output whose window loads step by two
along a row; LLVM vectorizes them with gathers (and the gradient with scattered stores), about 10 cycles an output
on Zen 4: 1.14 ms forward and 1.28 ms backward for 128 x 16 x 28 x 28. Here a row of ``lanes`` outputs reads its two
input rows as contiguous vectors and splits even and odd columns with shuffles; the gradient builds both columns of
a tile and interleaves them back, so every access is a contiguous (masked) vector.

Forward: ``void @name(i64 r0, i64 r1, ptr x, ptr values, ptr indices, i64 H, i64 W, i64 OH, i64 OW)`` over output
rows ``[r0, r1)`` of ``N * C * OH``: PyTorch's scan ``take = v > best || isnan(v)`` over the window in row-major
order (the first of equal maxima, the last NaN), the index ``h * W + w`` in the input plane (int64). Backward:
``void @name(i64 r0, i64 r1, ptr grad, ptr indices, ptr grad_in, i64 H, i64 W, i64 OH, i64 OW)`` with
``H == 2 * OH`` and ``W == 2 * OW``: each input position takes its tile's gradient when the tile's index names it.
All arrays C-contiguous ``(N, C, ...)``. Per chunk of a forward row (AVX-512, lanes 16)::

    %top.lo = call <16 x float> @llvm.masked.load.v16f32.p0(ptr %tp, i32 4, <16 x i1> %m.lo, <16 x float> poison)
    %a00 = shufflevector <16 x float> %top.lo, <16 x float> %top.hi, <16 x i32> <i32 0, i32 2, ..., i32 30>

>>> import numpy as np
>>> x = np.random.rand(2, 3, 6, 10).astype(np.float32)
>>> v, i = maxpool2_forward(x)
>>> bool((v == x.reshape(2, 3, 3, 2, 5, 2).max(axis=(3, 5))).all())
True
"""
from __future__ import annotations

import ctypes

import numpy as np

from .codeblock import vector_mask
from .llvm_compile import compile_function
from .llvm_host import has_avx512

__all__ = ["lanes", "forward_text", "backward_text", "pool_address", "maxpool2_forward",
           "maxpool2_backward"]


def lanes():
    """Outputs per vector: 16 with AVX-512, else 8."""
    return 16 if has_avx512() else 8


def _row_setup(s):
    """The row's plane and output row, and the chunk loop's head (``%c`` the chunk's first output)."""
    s += ["  br label %r.head", "r.head:", "  %r = phi i64 [%r0, %entry], [%r.next, %c.exit]",
          "  %r.ok = icmp slt i64 %r, %r1", "  br i1 %r.ok, label %r.body, label %done", "r.body:",
          "  %plane = udiv i64 %r, %OH", "  %oh = urem i64 %r, %OH", "  %hw = mul nsw i64 %H, %W",
          "  %pbase = mul nsw i64 %plane, %hw", "  %h0 = shl nsw i64 %oh, 1", "  %h0w = mul nsw i64 %h0, %W",
          "  %h1w = add nsw i64 %h0w, %W", "  %orow = mul nsw i64 %r, %OW", "  br label %c.head", "c.head:",
          "  %c = phi i64 [0, %r.body], [%c.next, %c.body]", "  %c.ok = icmp slt i64 %c, %OW",
          "  br i1 %c.ok, label %c.body, label %c.exit", "c.body:", "  %left = sub nsw i64 %OW, %c",
          "  %left2 = shl nsw i64 %left, 1", "  %c2 = shl nsw i64 %c, 1"]


def _row_end(s, n):
    s += [f"  %c.next = add nsw i64 %c, {n}", "  br label %c.head", "c.exit:", "  %r.next = add nsw i64 %r, 1",
          "  br label %r.head", "done:", "  ret void", "}"]


def _masks(s, n):
    s += [f"  {t}" for t in vector_mask("%m", n, "%left")]
    s += [f"  {t}" for t in vector_mask("%m.lo", n, "%left2")]
    s += [f"  {t}" for t in vector_mask("%m.hi", n, "%left2", first=n)]


def _start(name, n, arrays):
    """The vector types, the even column offsets ``0, 2, ..`` and the function's opening lines over ``arrays``."""
    pointers = "".join(f", ptr noalias %{a}" for a in arrays)
    return (f"<{n} x float>", f"<{n} x i64>", f"<{n} x i1>", ", ".join(f"i64 {2 * k}" for k in range(n)),
            [f"define void @{name}(i64 %r0, i64 %r1{pointers}, i64 %H, i64 %W, i64 %OH, i64 %OW) nounwind {{",
             "entry:"])


def forward_text(name, n):
    """The forward function's LLVM text (see the module notes), ``n`` outputs per vector."""
    ft, it, mt, iota2, s = _start(name, n, ("x", "v", "ix"))
    even = ", ".join(f"i32 {2 * k}" for k in range(n))
    odd = ", ".join(f"i32 {2 * k + 1}" for k in range(n))
    s += [f"  %w.i = insertelement {it} poison, i64 %W, i64 0",
         f"  %w.v = shufflevector {it} %w.i, {it} poison, <{n} x i32> zeroinitializer",
         f"  %w1.v = add {it} %w.v, splat (i64 1)"]
    _row_setup(s)
    _masks(s, n)
    for row, at in (("top", "%h0w"), ("bot", "%h1w")):
        s += [f"  %{row}.o = add nsw i64 %pbase, {at}", f"  %{row}.o2 = add nsw i64 %{row}.o, %c2",
              f"  %{row}.p = getelementptr float, ptr %x, i64 %{row}.o2",
              f"  %{row}.ph = getelementptr float, ptr %{row}.p, i64 {n}",
              f"  %{row}.lo = call {ft} @llvm.masked.load.v{n}f32.p0(ptr %{row}.p, i32 4, {mt} %m.lo, {ft} poison)",
              f"  %{row}.hi = call {ft} @llvm.masked.load.v{n}f32.p0(ptr %{row}.ph, i32 4, {mt} %m.hi, {ft} poison)"]
    s += [f"  %a0 = shufflevector {ft} %top.lo, {ft} %top.hi, <{n} x i32> <{even}>",
          f"  %a1 = shufflevector {ft} %top.lo, {ft} %top.hi, <{n} x i32> <{odd}>",
          f"  %a2 = shufflevector {ft} %bot.lo, {ft} %bot.hi, <{n} x i32> <{even}>",
          f"  %a3 = shufflevector {ft} %bot.lo, {ft} %bot.hi, <{n} x i32> <{odd}>"]
    # window offsets from the tile's corner, in scan order: 0, 1, W, W + 1
    offsets = ["zeroinitializer", "splat (i64 1)", "%w.v", "%w1.v"]
    best, off = "%a0", offsets[0]
    for j in range(1, 4):
        s += [f"  %gt{j} = fcmp ogt {ft} %a{j}, {best}", f"  %nan{j} = fcmp uno {ft} %a{j}, zeroinitializer",
              f"  %take{j} = or {mt} %gt{j}, %nan{j}",
              f"  %best{j} = select {mt} %take{j}, {ft} %a{j}, {ft} {best}",
              f"  %off{j} = select {mt} %take{j}, {it} {offsets[j]}, {it} {off}"]
        best, off = f"%best{j}", f"%off{j}"
    s += ["  %corner = add nsw i64 %h0w, %c2", f"  %cn.i = insertelement {it} poison, i64 %corner, i64 0",
          f"  %cn.v = shufflevector {it} %cn.i, {it} poison, <{n} x i32> zeroinitializer",
          f"  %cols = add {it} %cn.v, <{iota2}>", f"  %index = add {it} %cols, {off}",
          "  %out = add nsw i64 %orow, %c", "  %vp = getelementptr float, ptr %v, i64 %out",
          "  %ip = getelementptr i64, ptr %ix, i64 %out",
          f"  call void @llvm.masked.store.v{n}f32.p0({ft} {best}, ptr %vp, i32 4, {mt} %m)",
          f"  call void @llvm.masked.store.v{n}i64.p0({it} %index, ptr %ip, i32 8, {mt} %m)"]
    _row_end(s, n)
    return "\n".join(_declarations(n) + s)


def backward_text(name, n):
    """The backward function's LLVM text (see the module notes), ``n`` gradients per vector. Per chunk and input
    row, the tile's two columns interleaved back::

        %top.hit0 = icmp eq <16 x i64> %iv, %top.e
        %top.g0 = select <16 x i1> %top.hit0, <16 x float> %gv, <16 x float> zeroinitializer
        %top.lo = shufflevector <16 x float> %top.g0, <16 x float> %top.g1, <16 x i32> <i32 0, i32 16, i32 1, ...>
    """
    ft, it, mt, iota2, s = _start(name, n, ("g", "ix", "gi"))
    low = ", ".join(f"i32 {k // 2 + (n if k % 2 else 0)}" for k in range(n))
    high = ", ".join(f"i32 {n // 2 + k // 2 + (n if k % 2 else 0)}" for k in range(n))
    _row_setup(s)
    _masks(s, n)
    s += ["  %out = add nsw i64 %orow, %c", "  %gp = getelementptr float, ptr %g, i64 %out",
          "  %ip = getelementptr i64, ptr %ix, i64 %out",
          f"  %gv = call {ft} @llvm.masked.load.v{n}f32.p0(ptr %gp, i32 4, {mt} %m, {ft} poison)",
          f"  %iv = call {it} @llvm.masked.load.v{n}i64.p0(ptr %ip, i32 8, {mt} %m, {it} poison)"]
    for row, at in (("top", "%h0w"), ("bot", "%h1w")):
        s += [f"  %{row}.c = add nsw i64 {at}, %c2", f"  %{row}.i = insertelement {it} poison, i64 %{row}.c, i64 0",
              f"  %{row}.v = shufflevector {it} %{row}.i, {it} poison, <{n} x i32> zeroinitializer",
              f"  %{row}.e = add {it} %{row}.v, <{iota2}>", f"  %{row}.o = add {it} %{row}.e, splat (i64 1)"]
        for j, pos in ((0, f"%{row}.e"), (1, f"%{row}.o")):
            s += [f"  %{row}.hit{j} = icmp eq {it} %iv, {pos}",
                  f"  %{row}.g{j} = select {mt} %{row}.hit{j}, {ft} %gv, {ft} zeroinitializer"]
        s += [f"  %{row}.lo = shufflevector {ft} %{row}.g0, {ft} %{row}.g1, <{n} x i32> <{low}>",
              f"  %{row}.hi = shufflevector {ft} %{row}.g0, {ft} %{row}.g1, <{n} x i32> <{high}>",
              f"  %{row}.at = add nsw i64 %pbase, %{row}.c",
              f"  %{row}.p = getelementptr float, ptr %gi, i64 %{row}.at",
              f"  %{row}.ph = getelementptr float, ptr %{row}.p, i64 {n}",
              f"  call void @llvm.masked.store.v{n}f32.p0({ft} %{row}.lo, ptr %{row}.p, i32 4, {mt} %m.lo)",
              f"  call void @llvm.masked.store.v{n}f32.p0({ft} %{row}.hi, ptr %{row}.ph, i32 4, {mt} %m.hi)"]
    _row_end(s, n)
    return "\n".join(_declarations(n) + s)


def _declarations(n):
    ft, it, mt = f"<{n} x float>", f"<{n} x i64>", f"<{n} x i1>"
    return [f"declare {ft} @llvm.masked.load.v{n}f32.p0(ptr, i32, {mt}, {ft})",
            f"declare {it} @llvm.masked.load.v{n}i64.p0(ptr, i32, {mt}, {it})",
            f"declare void @llvm.masked.store.v{n}f32.p0({ft}, ptr, i32, {mt})",
            f"declare void @llvm.masked.store.v{n}i64.p0({it}, ptr, i32, {mt})"]


_ADDRESSES: dict = {}


def pool_address(direction, cache=None, n=None):
    """The address of the ``"forward"`` or ``"backward"`` function, ``n`` lanes (default: the host's), compiled once
    per process."""
    n = n or lanes()
    found = _ADDRESSES.get((direction, n))
    if found is None:
        name = f"jitorch_maxpool2_{direction}_{n}"
        text = (forward_text if direction == "forward" else backward_text)(name, n)
        found = _ADDRESSES[(direction, n)] = compile_function(text, name, cache)
    return found


def _call(direction, arrays, sizes, rows, n):
    fn = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * 2 + [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 4))
    fn(pool_address(direction, n=n))(0, rows, *(a.ctypes.data for a in arrays), *sizes)


def maxpool2_forward(x, n=None):
    """``(values, indices)`` of the 2x2 stride-2 max pool of C-contiguous float32 ``x`` ``(N, C, H, W)`` through the
    forward function of ``n`` lanes (default: the host's), from Python (tests, measurements)."""
    x = np.ascontiguousarray(x, np.float32)
    batch, c, h, w = x.shape
    values = np.empty((batch, c, h // 2, w // 2), np.float32)
    indices = np.empty(values.shape, np.int64)
    _call("forward", (x, values, indices), (h, w, h // 2, w // 2), batch * c * (h // 2), n)
    return values, indices


def maxpool2_backward(grad, indices, input_shape, n=None):
    """The input gradient of `maxpool2_forward` for ``grad`` through the backward function (even ``H`` and ``W``)."""
    batch, c, h, w = input_shape
    out = np.empty(input_shape, np.float32)
    grad, indices = np.ascontiguousarray(grad, np.float32), np.ascontiguousarray(indices, np.int64)  # kept alive
    _call("backward", (grad, indices, out), (h, w, h // 2, w // 2), batch * c * (h // 2), n)
    return out
