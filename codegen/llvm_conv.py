"""Direct 2-D convolution as one LLVM function: register tiles of output channels by output columns.

im2col copies the input ``prod(kernel)`` times before its GEMM; at stride 1 a window row is a contiguous run of the
padded input, so the product can read the input in place. For each image, block of ``OB`` output channels, output
row and chunk of ``L`` output columns, ``OB`` vector accumulators sum over input channels and the (unrolled) kernel
taps ``acc[j] += splat(w[o0 + j, c, ky, kx]) * x[c, h + ky*dh, w0 + kx*dw : ... + L]``; the last chunk of a row is
stored through a mask. Loads of the last chunk may run up to ``L - 1`` elements past a row (into the next row, or
past the end, so the input buffer carries ``L`` elements of slack); those lanes are never stored.

A stride ``(sy, sx)`` reads row ``sy * h + ky*dh`` and, for each chunk, ``sx * L`` adjacent elements of which every
``sx``-th is kept (a load pair and one permute instead of a gather); the slack grows to ``sx * L``. So a strided
layer runs all its taps in one pass over the padded input, where a sum of stride-1 kernels by phase would run
several thin ones and add their outputs.

Every size is an argument; the code depends only on the element type, ``L``, ``OB``, the stride and the kernel's
shape. The
weight comes packed as ``(O / OB, C / G, KH, KW, OB)`` (`pack_weight`), so a tap's ``OB`` weights are adjacent.
For a 3x3 float32 kernel with ``OB = 8`` and ``L = 16`` one tap emits::

    %x.4.p = getelementptr float, ptr %x, i64 %x.4.o
    %x.4 = load <16 x float>, ptr %x.4.p, align 4
    %w.4.0 = load float, ptr %w.4.0.p, align 4
    ...
    %acc.0.4 = call <16 x float> @llvm.fmuladd.v16f32(<16 x float> %x.4, <16 x float> %w.4.0.s, <16 x float> ...)

>>> import numpy as np
>>> fn = DirectConv("f32", (3, 3), lanes=8, block=2)
>>> x, w = np.random.rand(1, 2, 6, 7).astype(np.float32), np.random.rand(4, 2, 3, 3).astype(np.float32)
>>> out = fn(x, w, np.zeros(4, np.float32), ((0, 0), (0, 0)), groups=1, dilation=(1, 1))
>>> ref = sum(w[None, :, c, ky, kx, None, None] * x[:, c, None, ky:ky + 4, kx:kx + 5]
...           for c in range(2) for ky in range(3) for kx in range(3))
>>> bool(np.allclose(out, ref, rtol=1e-5))
True
"""
from __future__ import annotations

import ctypes

import numpy as np

from .codeblock import LLVM_TYPES, CodeBlock, vector_mask, vector_splat
from .ir import DTYPES
from .llvm_compile import compile_hashed
from .llvm_host import has_avx512
from .llvm_pool import split_call

__all__ = ["DirectConv", "conv_lanes", "conv_registers", "emit_geometry", "pack_weight"]

_ARGS = ("cg", "hp", "wp", "ho", "wo", "obt", "obg", "cx", "ot", "dh", "dw")
_OUT_ARGS = ("ohw", "owp")  # a spread output's plane size and row pitch (``out_stride``)


def conv_lanes(dtype):
    """Output columns per register chunk: one full vector register of the host (AVX-512 or narrower).

    >>> conv_lanes("f32") in (8, 16), conv_lanes("f64") * 2 == conv_lanes("f32")
    (True, True)
    """
    return (64 if has_avx512() else 32) // np.dtype(DTYPES[dtype]).itemsize


def conv_registers():
    """Vector registers of the host: 32 with AVX-512, 16 otherwise (what a kernel's accumulators must fit in).

    >>> conv_registers() in (16, 32)
    True
    """
    return 32 if has_avx512() else 16


def _spread_mask(line, part, lanes, ox):
    """The mask operand of a spread store: every ``ox``-th of ``ox * lanes`` lanes (a constant), of the tail's
    ``%mask`` lanes only (``%tail.wmask``)."""
    if part == "full":
        return "<" + ", ".join(f"i1 {'true' if k % ox == 0 else 'false'}" for k in range(lanes * ox)) + ">"
    picks = ", ".join(f"i32 {k // ox}" if k % ox == 0 else f"i32 {lanes}" for k in range(lanes * ox))
    line(f"  %tail.wmask = shufflevector <{lanes} x i1> %mask, <{lanes} x i1> zeroinitializer, "
         f"<{lanes * ox} x i32> <{picks}>")
    return "%tail.wmask"


def pack_weight(w, block):
    """``(O, C/G, KH, KW)`` -> ``(O / block, C/G, KH, KW, block)``, C-contiguous: a tap's block of weights adjacent.

    >>> pack_weight(np.arange(8.0).reshape(4, 2, 1, 1), 2)[:, :, 0, 0].tolist()
    [[[0.0, 2.0], [1.0, 3.0]], [[4.0, 6.0], [5.0, 7.0]]]
    """
    o, cg, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(o // block, block, cg, kh, kw).transpose(0, 2, 3, 4, 1))


def emit_geometry(line, kernel, block, plane):
    """The entry block's offsets shared by both convolution kernels: the padded plane ``%hw``, the output plane
    ``%howo``, each tap's input offset ``%tap.{i}`` and each output channel's plane offset ``%{plane}.{j}``.
    For a 1x2 kernel and a block of 1 it emits::

        %hw = mul nsw i64 %hp, %wp
        %howo = mul nsw i64 %ho, %wo
        %kstep = mul nsw i64 %dh, %wp
        %tap.0.y = mul nsw i64 %kstep, 0
        ...
        %tap.1 = add nsw i64 %tap.1.y, %tap.1.x
        %oj.0 = mul nsw i64 %howo, 0
    """
    line("  %hw = mul nsw i64 %hp, %wp")
    line("  %howo = mul nsw i64 %ho, %wo")
    line("  %kstep = mul nsw i64 %dh, %wp")
    kh, kw = kernel
    for ky in range(kh):
        for kx in range(kw):
            i = ky * kw + kx
            line(f"  %tap.{i}.y = mul nsw i64 %kstep, {ky}")
            line(f"  %tap.{i}.x = mul nsw i64 %dw, {kx}")
            line(f"  %tap.{i} = add nsw i64 %tap.{i}.y, %tap.{i}.x")
    for j in range(block):
        line(f"  %{plane}.{j} = mul nsw i64 %howo, {j}")


def _function_ir(name, dtype, kernel, lanes, block, stride=(1, 1), out_stride=None):
    """The LLVM IR of the direct convolution ``name`` (see the module notes for its loops and arguments).
    ``out_stride`` ``(oy, ox)``: output row ``h`` and column ``w`` are stored at row ``oy * h`` and column ``ox * w``
    of planes ``%ohw`` elements apart with rows ``%owp`` apart (two more arguments): one phase of a transposed
    convolution written straight into its strided slice of the result."""
    sy, sx = stride
    spread = out_stride is not None
    oy, ox = out_stride if spread else (1, 1)
    ty = LLVM_TYPES[dtype]
    vt, item = f"<{lanes} x {ty}>", np.dtype(DTYPES[dtype]).itemsize
    kh, kw = kernel
    taps = kh * kw
    fma = f"@llvm.fmuladd.v{lanes}{dtype}"
    mt = f"<{lanes} x i1>"
    store_masked = f"@llvm.masked.store.v{lanes}{dtype}.p0"
    cb = CodeBlock()
    line = cb.line
    ints = ", ".join(f"i64 %{a}" for a in _ARGS + (_OUT_ARGS if spread else ()))
    line(f"declare {vt} {fma}({vt}, {vt}, {vt})")
    line(f"declare void {store_masked}({vt}, ptr, i32, {mt})")
    # A spread store writes ``ox * L`` lanes through a mask of every ``ox``-th: the other phases' columns untouched.
    wide_vt, wide_mt = f"<{lanes * ox} x {ty}>", f"<{lanes * ox} x i1>"
    store_wide = f"@llvm.masked.store.v{lanes * ox}{dtype}.p0"
    if ox > 1:
        line(f"declare void {store_wide}({wide_vt}, ptr, i32, {wide_mt})")
    line(f"define void @{name}(i64 %start, i64 %stop, ptr noalias %x, ptr noalias %w, ptr noalias %bias, "
         f"ptr noalias %out, {ints}) nounwind {{")
    line("entry:")

    def splat(dst, scalar):
        for text in vector_splat(dst, ty, lanes, scalar):
            line(f"  {text}")

    emit_geometry(line, kernel, block, "oj")
    if spread:  # the output's planes and rows are the result's, not ``ho * wo`` and ``wo``
        for j in range(block):
            line(f"  %oj.{j}.s = mul nsw i64 %ohw, {j}")
    line("  br label %t.head")
    line("t.head:")
    line("  %t = phi i64 [ %start, %entry ], [ %t.next, %h.exit ]")
    line("  %t.ok = icmp slt i64 %t, %stop")
    line("  br i1 %t.ok, label %t.body, label %exit")
    line("t.body:")
    line("  %n = sdiv i64 %t, %obt")
    line("  %ob = srem i64 %t, %obt")
    line("  %grp = sdiv i64 %ob, %obg")
    line(f"  %o0 = mul nsw i64 %ob, {block}")
    line("  %xn0 = mul nsw i64 %n, %cx")
    line("  %xg = mul nsw i64 %grp, %cg")
    line("  %xn1 = add nsw i64 %xn0, %xg")
    line("  %xbase = mul nsw i64 %xn1, %hw")
    line("  %wb0 = mul nsw i64 %ob, %cg")
    line(f"  %wbase = mul nsw i64 %wb0, {taps * block}")
    line("  %on0 = mul nsw i64 %n, %ot")
    line("  %on1 = add nsw i64 %on0, %o0")
    line(f"  %obase = mul nsw i64 %on1, {'%ohw' if spread else '%howo'}")
    for j in range(block):
        line(f"  %b.{j}.o = add nsw i64 %o0, {j}")
        line(f"  %b.{j}.p = getelementptr {ty}, ptr %bias, i64 %b.{j}.o")
        line(f"  %b.{j} = load {ty}, ptr %b.{j}.p, align {item}")
        splat(f"%b.{j}.s", f"%b.{j}")
    line("  br label %h.head")
    line("h.head:")
    line("  %h = phi i64 [ 0, %t.body ], [ %h.next, %w.exit ]")
    line("  %h.ok = icmp slt i64 %h, %ho")
    line("  br i1 %h.ok, label %h.body, label %h.exit")
    line("h.body:")
    line(f"  %xh.r = mul nsw i64 %h, {sy}")
    line("  %xh0 = mul nsw i64 %xh.r, %wp")
    line("  %xh = add nsw i64 %xbase, %xh0")
    if spread:
        line(f"  %oh.r = mul nsw i64 %h, {oy}")
        line("  %oh0 = mul nsw i64 %oh.r, %owp")
    else:
        line("  %oh0 = mul nsw i64 %h, %wo")
    line("  %oh = add nsw i64 %obase, %oh0")
    line("  br label %w.head")
    line("w.head:")
    line("  %w0 = phi i64 [ 0, %h.body ], [ %w0.next, %store.done ]")
    line("  %w.ok = icmp slt i64 %w0, %wo")
    line("  br i1 %w.ok, label %w.body, label %w.exit")
    line("w.body:")
    line(f"  %xw.c = mul nsw i64 %w0, {sx}")
    line("  %xw = add nsw i64 %xh, %xw.c")
    line("  br label %c.head")
    line("c.head:")
    line("  %c = phi i64 [ 0, %w.body ], [ %c.next, %c.body ]")
    for j in range(block):
        line(f"  %acc.{j} = phi {vt} [ %b.{j}.s, %w.body ], [ %acc.{j}.{taps - 1}, %c.body ]")
    line("  %c.ok = icmp slt i64 %c, %cg")
    line("  br i1 %c.ok, label %c.body, label %c.exit")
    line("c.body:")
    line("  %xc0 = mul nsw i64 %c, %hw")
    line("  %xc = add nsw i64 %xw, %xc0")
    line(f"  %wc0 = mul nsw i64 %c, {taps * block}")
    line("  %wc = add nsw i64 %wbase, %wc0")
    for i in range(taps):
        line(f"  %x.{i}.o = add nsw i64 %xc, %tap.{i}")
        line(f"  %x.{i}.p = getelementptr {ty}, ptr %x, i64 %x.{i}.o")
        if sx == 1:
            line(f"  %x.{i} = load {vt}, ptr %x.{i}.p, align {item}")
        else:
            # sx * L adjacent elements, every sx-th kept: two vector loads and a permute, no gather.
            every = ", ".join(f"i32 {k * sx}" for k in range(lanes))
            line(f"  %x.{i}.all = load <{lanes * sx} x {ty}>, ptr %x.{i}.p, align {item}")
            line(f"  %x.{i} = shufflevector <{lanes * sx} x {ty}> %x.{i}.all, <{lanes * sx} x {ty}> poison, "
                 f"<{lanes} x i32> <{every}>")
        for j in range(block):
            line(f"  %w.{i}.{j}.o = add nsw i64 %wc, {i * block + j}")
            line(f"  %w.{i}.{j}.p = getelementptr {ty}, ptr %w, i64 %w.{i}.{j}.o")
            line(f"  %w.{i}.{j} = load {ty}, ptr %w.{i}.{j}.p, align {item}")
            splat(f"%w.{i}.{j}.s", f"%w.{i}.{j}")
            prev = f"%acc.{j}" if i == 0 else f"%acc.{j}.{i - 1}"
            line(f"  %acc.{j}.{i} = call {vt} {fma}({vt} %x.{i}, {vt} %w.{i}.{j}.s, {vt} {prev})")
    line("  %c.next = add nsw i64 %c, 1")
    line("  br label %c.head")
    line("c.exit:")
    line("  %left = sub nsw i64 %wo, %w0")
    line(f"  %full = icmp sge i64 %left, {lanes}")
    line("  br i1 %full, label %store.full, label %store.tail")
    for part in ("full", "tail"):
        line(f"store.{part}:")
        if part == "tail":
            for text in vector_mask("%mask", lanes, "%left"):
                line(f"  {text}")
        wmask = _spread_mask(line, part, lanes, ox) if ox > 1 else None
        for j in range(block):
            line(f"  %{part}.{j}.o0 = add nsw i64 %oh, %oj.{j}{'.s' if spread else ''}")
            if ox > 1:
                line(f"  %{part}.{j}.w = mul nsw i64 %w0, {ox}")
                line(f"  %{part}.{j}.o = add nsw i64 %{part}.{j}.o0, %{part}.{j}.w")
            else:
                line(f"  %{part}.{j}.o = add nsw i64 %{part}.{j}.o0, %w0")
            line(f"  %{part}.{j}.p = getelementptr {ty}, ptr %out, i64 %{part}.{j}.o")
            if ox > 1:
                lanes_of = ", ".join(f"i32 {k // ox}" if k % ox == 0 else "i32 poison" for k in range(lanes * ox))
                line(f"  %{part}.{j}.v = shufflevector {vt} %acc.{j}, {vt} poison, <{lanes * ox} x i32> <{lanes_of}>")
                line(f"  call void {store_wide}({wide_vt} %{part}.{j}.v, ptr %{part}.{j}.p, i32 {item}, "
                     f"{wide_mt} {wmask})")
            elif part == "full":
                line(f"  store {vt} %acc.{j}, ptr %full.{j}.p, align {item}")
            else:
                line(f"  call void {store_masked}({vt} %acc.{j}, ptr %tail.{j}.p, i32 {item}, {mt} %mask)")
        line("  br label %store.done")
    line("store.done:")
    line(f"  %w0.next = add nsw i64 %w0, {lanes}")
    line("  br label %w.head")
    line("w.exit:")
    line("  %h.next = add nsw i64 %h, 1")
    line("  br label %h.head")
    line("h.exit:")
    line("  %t.next = add nsw i64 %t, 1")
    line("  br label %t.head")
    line("exit:")
    line("  ret void")
    line("}")
    return str(cb)


class DirectConv:
    """A compiled direct convolution for one element type, kernel shape, chunk width, output-channel block and
    stride.

    ``fn(x, w, bias, pads, groups, dilation, parallel=None)`` convolves ``(N, C, H, W)``, padded with zeros by
    ``pads`` (``((top, bottom), (left, right))``), with ``(O, C/G, KH, KW)`` weights (``O / G`` a multiple of
    ``block``) and a bias ``(O,)``: ``(N, O, Ho, Wo)``. ``parallel`` (``parallel(fn, n)`` calls ``fn(start, stop)``
    over ``range(n)``, as `runtime.threads.parallel_for` does, or a `llvm_pool.NativePool`) splits the images and
    channel blocks across threads.
    """

    def __init__(self, dtype, kernel, lanes, block, cache=None, stride=(1, 1), out_stride=None):
        self.dtype, self.kernel, self.lanes, self.block = dtype, tuple(kernel), lanes, block
        self.stride, self.out_stride = tuple(stride), None if out_stride is None else tuple(out_stride)
        text = _function_ir("jitorch_conv", dtype, self.kernel, lanes, block, self.stride, self.out_stride)
        self.name, self.llvm_ir, self.address = compile_hashed(text, "jitorch_conv", cache)
        self._ints = len(_ARGS) + (0 if out_stride is None else len(_OUT_ARGS))
        self._fn = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * 2 + [ctypes.c_void_p] * 4 +
                                            [ctypes.c_int64] * self._ints))(self.address)

    def __call__(self, x, w, bias, pads, groups, dilation, parallel=None):
        if self.out_stride is not None:
            raise ValueError("direct convolution: a kernel with an out_stride runs through spread_into")
        n, cx, h, wd = x.shape
        o, cg, kh, kw = w.shape
        (top, bottom), (left, right) = pads
        hp, wp = h + top + bottom, wd + left + right
        dh, dw = dilation
        sy, sx = self.stride
        ho, wo = (hp - dh * (kh - 1) - 1) // sy + 1, (wp - dw * (kw - 1) - 1) // sx + 1
        np_dtype = np.dtype(DTYPES[self.dtype])
        where = f"direct convolution: input {x.shape}, weight {w.shape}, groups {groups}, pads {pads}, dilation " \
                f"{dilation}, stride {self.stride}"
        if (kh, kw) != self.kernel or o % groups or (o // groups) % self.block or cg * groups != cx:
            raise ValueError(f"{where}: do not fit this {self.kernel} kernel with blocks of {self.block} output "
                             "channels (need O and C divisible by groups, O / groups by the block)")
        if hp < dh * (kh - 1) + 1 or wp < dw * (kw - 1) + 1:
            raise ValueError(f"{where}: the padded input is smaller than the dilated kernel")
        if tuple(np.shape(bias)) != (o,):
            raise ValueError(f"{where}: expected a bias of shape ({o},), got {tuple(np.shape(bias))}")
        # Padded in one copy, with slack past the last row for the last chunk's unmasked loads.
        size = n * cx * hp * wp
        buf = np.zeros(size + sx * self.lanes, np_dtype)
        buf[:size].reshape(n, cx, hp, wp)[:, :, top:top + h, left:left + wd] = x
        packed = pack_weight(np.asarray(w, np_dtype), self.block)
        b = np.ascontiguousarray(bias, np_dtype)
        out = np.empty((n, o, ho, wo), np_dtype)
        obt = o // self.block
        ints = (cg, hp, wp, ho, wo, obt, (o // groups) // self.block, cx, o, dh, dw)
        ptrs = [a.__array_interface__["data"][0] for a in (buf, packed, b, out)]

        split_call(parallel, self._fn, self.address, ["ptr"] * 4 + ["i64"] * len(ints), (*ptrs, *ints), n * obt)
        return out

    def spread_into(self, buf, start, plane, w, out, at, sizes, groups, dilation, parallel=None):
        """The kernel of an ``out_stride`` over images the caller padded: ``buf`` (flat, C-contiguous) holds, from
        element ``start`` on, ``out.shape[0]`` images of ``w.shape[1] * groups`` planes ``plane`` ``(Hp, Wp)``
        (slack after the last included); the ``sizes`` ``(Ho, Wo)`` outputs go to rows ``at[0] + oy * h`` and
        columns ``at[1] + ox * w`` of ``out`` ``(N, O, H, W)`` (C-contiguous), no bias. Other elements of ``out``
        keep their values.

        >>> fn = DirectConv("f32", (1, 1), 8, 1, out_stride=(1, 2))
        >>> out, buf = np.zeros((1, 1, 1, 8), np.float32), np.arange(1, 13, dtype=np.float32)  # 4 values, slack
        >>> fn.spread_into(buf, 0, (1, 4), np.ones((1, 1, 1, 1), np.float32), out, (0, 1), (1, 4), 1, (1, 1))
        >>> out[0, 0, 0].tolist()
        [0.0, 1.0, 0.0, 2.0, 0.0, 3.0, 0.0, 4.0]
        """
        n, o, oh, ow = out.shape
        kh, kw = self.kernel
        cg, cx = w.shape[1], w.shape[1] * groups
        (hp, wp), (ho, wo), (dh, dw) = plane, sizes, dilation
        (sy, sx), (oy, ox) = self.stride, self.out_stride
        np_dtype = np.dtype(DTYPES[self.dtype])
        chunks = -(-wo // self.lanes) * self.lanes
        last_read = start + (n * cx - 1) * hp * wp + ((ho - 1) * sy + dh * (kh - 1)) * wp + \
            chunks * sx - 1 + dw * (kw - 1)  # the last chunk's (unmasked) load
        if (self.out_stride is None or w.shape[0] != o or o % groups or (o // groups) % self.block
                or tuple(w.shape[2:]) != self.kernel or buf.dtype != np_dtype or out.dtype != np_dtype
                or not (buf.flags.c_contiguous and out.flags.c_contiguous) or min(ho, wo, *at) < 0
                or last_read >= buf.size or at[0] + oy * (ho - 1) >= oh or at[1] + ox * (wo - 1) >= ow
                or (ho - 1) * sy + dh * (kh - 1) >= hp):
            raise ValueError(f"direct convolution spread_into: buffer {buf.shape} {buf.dtype} from {start} with planes "
                             f"{plane}, weight {w.shape}, output {out.shape} {out.dtype} at {at}, sizes {sizes}, "
                             f"groups {groups}: out of bounds or not this {self.kernel} kernel's")
        if not (n and ho and wo):
            return
        packed = pack_weight(np.asarray(w, np_dtype), self.block)
        bias = np.zeros(o, np_dtype)
        obt = o // self.block
        ints = (cg, hp, wp, ho, wo, obt, (o // groups) // self.block, cx, o, dh, dw, oh * ow, ow)
        item = np_dtype.itemsize
        ptrs = (buf.ctypes.data + start * item, packed.ctypes.data, bias.ctypes.data,
                out.ctypes.data + (at[0] * ow + at[1]) * item)
        split_call(parallel, self._fn, self.address, ["ptr"] * 4 + ["i64"] * len(ints), (*ptrs, *ints), n * obt)
