"""The weight gradient of a 2-D convolution as one LLVM function, reading the input in place (no im2col).

``gw[o, c, ky, kx] = sum over n, h, w of g[n, o, h, w] * x[n, c, h + ky*dh, w + kx*dw]`` (``x`` padded). For a block
of ``OB`` output channels and one input channel, ``OB * KH * KW`` vector accumulators run over every image, output
row and chunk of ``L`` output columns: ``acc[j][tap] += g[n, o0 + j, h, w0:w0 + L] * x[n, c, row(tap), col(tap)]``;
each is summed across its lanes at the end. Loads go through a mask (all lanes but the tail of a row), so lanes
past a row load zeros and ``0 * inf`` never happens.

For a 3x3 float32 kernel with ``OB = 2`` and ``L = 16`` one tap emits::

    %x.4 = call <16 x float> @llvm.masked.load.v16f32.p0(ptr %x.4.p, i32 4, <16 x i1> %mask, <16 x float> zeroinit...
    %acc.0.4.n = call <16 x float> @llvm.fmuladd.v16f32(<16 x float> %g.0, <16 x float> %x.4, <16 x float> %acc.0.4)
    %acc.1.4.n = call <16 x float> @llvm.fmuladd.v16f32(<16 x float> %g.1, <16 x float> %x.4, <16 x float> %acc.1.4)

>>> import numpy as np
>>> fn = DirectConvWeight("f32", (2, 2), lanes=8, block=1)
>>> x, g = np.random.rand(2, 1, 4, 5).astype(np.float32), np.random.rand(2, 3, 3, 4).astype(np.float32)
>>> gw = fn(x, g, ((0, 0), (0, 0)), groups=1, dilation=(1, 1))
>>> ref = [[[(g[:, o] * x[:, 0, ky:ky + 3, kx:kx + 4]).sum() for kx in range(2)] for ky in range(2)] for o in range(3)]
>>> bool(np.allclose(gw[:, 0], ref, rtol=1e-5))
True
"""
from __future__ import annotations

import ctypes

import numpy as np

from .codeblock import LLVM_TYPES, CodeBlock, vector_mask
from .ir import DTYPES
from .llvm_compile import compile_hashed
from .llvm_conv import emit_geometry
from .llvm_pool import split_call

__all__ = ["DirectConvWeight"]

_ARGS = ("batch", "cg", "hp", "wp", "ho", "wo", "obg", "cx", "ot", "dh", "dw")


def _function_ir(name, dtype, kernel, lanes, block, single=False, stride=(1, 1)):
    """The LLVM IR of the weight-gradient kernel ``name`` (see the module notes); ``single``: for output rows of at
    most ``lanes`` columns. At a column stride ``sx`` a tap loads the ``sx * L`` adjacent elements up to its last
    kept one (masked) and keeps every ``sx``-th, as `llvm_conv` 's forward does; rows are ``sy`` apart."""
    sy, sx = stride
    wide = sx > 1
    # Strided rows read several times the input a gradient row covers: consecutive items share the input channel
    # (kept in L1) and read the next block's gradient planes instead (4x16x32^3 at stride 2: ~20% faster).
    channel_major = (sy, sx) != (1, 1)
    ty = LLVM_TYPES[dtype]
    vt, item, mt = f"<{lanes} x {ty}>", np.dtype(DTYPES[dtype]).itemsize, f"<{lanes} x i1>"
    kh, kw = kernel
    taps = kh * kw
    fma, load_masked = f"@llvm.fmuladd.v{lanes}{dtype}", f"@llvm.masked.load.v{lanes}{dtype}.p0"
    reduce = f"@llvm.vector.reduce.fadd.v{lanes}{dtype}"
    accs = [(j, i) for j in range(block) for i in range(taps)]
    cb = CodeBlock()
    line = cb.line
    line(f"declare {vt} {fma}({vt}, {vt}, {vt})")
    line(f"declare {vt} {load_masked}(ptr, i32, {mt}, {vt})")
    line(f"declare {ty} {reduce}({ty}, {vt})")
    wide_t, wide_mt = f"<{lanes * sx} x {ty}>", f"<{lanes * sx} x i1>"
    load_wide = f"@llvm.masked.load.v{lanes * sx}{dtype}.p0"
    if wide:
        line(f"declare {wide_t} {load_wide}(ptr, i32, {wide_mt}, {wide_t})")
    line(f"define void @{name}(i64 %start, i64 %stop, ptr noalias %x, ptr noalias %g, ptr noalias %out, "
         f"{', '.join(f'i64 %{a}' for a in _ARGS)}) nounwind {{")
    line("entry:")
    emit_geometry(line, kernel, block, "gj")

    def chunk(col, acc_in, mask):
        """The loads and multiply-adds of one chunk of columns starting at ``col`` of the current row."""
        if wide:  # the input columns of chunk ``col`` start at ``sx * col``
            line(f"  %xw.c = mul nsw i64 {col}, {sx}")
            line("  %xw = add nsw i64 %xh, %xw.c")
        else:
            line(f"  %xw = add nsw i64 %xh, {col}")
        line(f"  %gw = add nsw i64 %gh, {col}")
        masked = f"i32 {item}, {mt} {mask}, {vt} zeroinitializer"
        for j in range(block):
            line(f"  %g.{j}.o = add nsw i64 %gw, %gj.{j}")
            line(f"  %g.{j}.p = getelementptr {ty}, ptr %g, i64 %g.{j}.o")
            line(f"  %g.{j} = call {vt} {load_masked}(ptr %g.{j}.p, {masked})")
        for i in range(taps):
            line(f"  %x.{i}.o = add nsw i64 %xw, %tap.{i}")
            line(f"  %x.{i}.p = getelementptr {ty}, ptr %x, i64 %x.{i}.o")
            if wide:
                every = ", ".join(f"i32 {k * sx}" for k in range(lanes))
                line(f"  %x.{i}.all = call {wide_t} {load_wide}(ptr %x.{i}.p, i32 {item}, {wide_mt} {mask}.wide, "
                     f"{wide_t} zeroinitializer)")
                line(f"  %x.{i} = shufflevector {wide_t} %x.{i}.all, {wide_t} poison, <{lanes} x i32> <{every}>")
            else:
                line(f"  %x.{i} = call {vt} {load_masked}(ptr %x.{i}.p, {masked})")
            for j in range(block):
                line(f"  %acc.{j}.{i}.new = call {vt} {fma}({vt} %g.{j}, {vt} %x.{i}, {vt} %acc.{j}.{i}.{acc_in})")

    def mask_of(name, left):
        for text in vector_mask(f"%{name}", lanes, left):
            line(f"  {text}")
        if wide:  # the wide load's lanes up to the last kept element: none past it, so no read past the input
            line(f"  %{name}.reach0 = mul nsw i64 {left}, {sx}")
            line(f"  %{name}.reach = sub nsw i64 %{name}.reach0, {sx - 1}")
            for text in vector_mask(f"%{name}.wide", lanes * sx, f"%{name}.reach"):
                line(f"  {text}")

    if single:
        mask_of("rowmask", "%wo")
    line("  br label %t.head")
    line("t.head:")
    line("  %t = phi i64 [ %start, %entry ], [ %t.next, %n.exit ]")
    line("  %t.ok = icmp slt i64 %t, %stop")
    line("  br i1 %t.ok, label %t.body, label %exit")
    line("t.body:")
    if channel_major:
        line(f"  %obt = sdiv i64 %ot, {block}")
        line("  %c = sdiv i64 %t, %obt")
        line("  %ob = srem i64 %t, %obt")
    else:
        line("  %ob = sdiv i64 %t, %cg")
        line("  %c = srem i64 %t, %cg")
    line("  %grp = sdiv i64 %ob, %obg")
    line(f"  %o0 = mul nsw i64 %ob, {block}")
    line("  %ch0 = mul nsw i64 %grp, %cg")
    line("  %ch = add nsw i64 %ch0, %c")
    line("  br label %n.head")
    # The accumulators live in phis of the loops: a loop starts from its parent's value and hands its own back at
    # its exit (the phi at its head dominates the exit). Rows of one chunk (``single``) have no column loop: the
    # row loop is innermost, so its addresses become pointer increments.
    if single:
        nest = (("n", "t.body", "%batch", "h.exit", None), ("h", "n.body", "%ho", "h.body", "n"))
    else:
        nest = (("n", "t.body", "%batch", "h.exit", None), ("h", "n.body", "%ho", "w.exit", "n"),
                ("w", "h.body", "%wo", "w.body", "h"))
    inner_of = {v[0]: (nest[k + 1][0] if k + 1 < len(nest) else None) for k, v in enumerate(nest)}
    for var, pre, bound, back, parent in nest:
        line(f"{var}.head:")
        line(f"  %{var} = phi i64 [ 0, %{pre} ], [ %{var}.next, %{back} ]")
        inner = inner_of[var]
        for j, i in accs:
            init = "zeroinitializer" if parent is None else f"%acc.{j}.{i}.{parent}"
            carried = f"%acc.{j}.{i}.{inner}" if inner else f"%acc.{j}.{i}.new"
            line(f"  %acc.{j}.{i}.{var} = phi {vt} [ {init}, %{pre} ], [ {carried}, %{back} ]")
        line(f"  %{var}.ok = icmp slt i64 %{var}, {bound}")
        line(f"  br i1 %{var}.ok, label %{var}.body, label %{var}.exit")
        line(f"{var}.body:")
        if var == "n":
            line("  %xn0 = mul nsw i64 %n, %cx")
            line("  %xn1 = add nsw i64 %xn0, %ch")
            line("  %xn = mul nsw i64 %xn1, %hw")
            line("  %gn0 = mul nsw i64 %n, %ot")
            line("  %gn1 = add nsw i64 %gn0, %o0")
            line("  %gn = mul nsw i64 %gn1, %howo")
            line("  br label %h.head")
        elif var == "h":
            if sy == 1:
                line("  %xh0 = mul nsw i64 %h, %wp")
            else:
                line(f"  %xh.r = mul nsw i64 %h, {sy}")
                line("  %xh0 = mul nsw i64 %xh.r, %wp")
            line("  %xh = add nsw i64 %xn, %xh0")
            line("  %gh0 = mul nsw i64 %h, %wo")
            line("  %gh = add nsw i64 %gn, %gh0")
            if single:
                chunk("0", "h", "%rowmask")
                line("  %h.next = add nsw i64 %h, 1")
                line("  br label %h.head")
            else:
                line("  br label %w.head")
        else:
            line("  %left = sub nsw i64 %wo, %w")
            mask_of("mask", "%left")
            chunk("%w", "w", "%mask")
            line(f"  %w.next = add nsw i64 %w, {lanes}")
            line("  br label %w.head")
    if not single:
        line("w.exit:")
        line("  %h.next = add nsw i64 %h, 1")
        line("  br label %h.head")
    line("h.exit:")
    line("  %n.next = add nsw i64 %n, 1")
    line("  br label %n.head")
    line("n.exit:")
    for j, i in accs:
        line(f"  %sum.{j}.{i} = call reassoc {ty} {reduce}({ty} -0.0, {vt} %acc.{j}.{i}.n)")
        line(f"  %out.{j}.{i}.r0 = add nsw i64 %o0, {j}")
        line(f"  %out.{j}.{i}.r1 = mul nsw i64 %out.{j}.{i}.r0, %cg")
        line(f"  %out.{j}.{i}.r2 = add nsw i64 %out.{j}.{i}.r1, %c")
        line(f"  %out.{j}.{i}.r3 = mul nsw i64 %out.{j}.{i}.r2, {taps}")
        line(f"  %out.{j}.{i}.o = add nsw i64 %out.{j}.{i}.r3, {i}")
        line(f"  %out.{j}.{i}.p = getelementptr {ty}, ptr %out, i64 %out.{j}.{i}.o")
        line(f"  store {ty} %sum.{j}.{i}, ptr %out.{j}.{i}.p, align {item}")
    line("  %t.next = add nsw i64 %t, 1")
    line("  br label %t.head")
    line("exit:")
    line("  ret void")
    line("}")
    return str(cb)


class DirectConvWeight:
    """A compiled weight-gradient kernel for one element type, kernel shape, chunk width, output-channel block and
    stride.

    ``fn(x, g, pads, groups, dilation, parallel=None)``: the gradient ``(O, C/G, KH, KW)`` of a
    convolution (at ``stride``) of ``x`` ``(N, C, H, W)``, zero-padded by ``pads``, given its output gradient ``g``
    ``(N, O, Ho, Wo)``; ``Ho`` and ``Wo`` may be smaller than the padded input allows (the windows follow ``g``).
    ``parallel`` as in `llvm_conv.DirectConv` (over output-channel blocks times input channels).
    """

    def __init__(self, dtype, kernel, lanes, block, cache=None, stride=(1, 1)):
        self.dtype, self.kernel, self.lanes, self.block = dtype, tuple(kernel), lanes, block
        self.stride = tuple(stride)
        self._cache, self._fns = cache, {}

    def _function(self, single):
        """The variant for rows of at most one chunk (``single``) or for longer rows, compiled on first use."""
        fn = self._fns.get(single)
        if fn is None:
            fn = self._fns[single] = self._compile(single, self._cache)
        return fn

    def _compile(self, single, cache):
        text = _function_ir("jitorch_conv_weight", self.dtype, self.kernel, self.lanes, self.block, single,
                            self.stride)
        address = compile_hashed(text, "jitorch_conv_weight", cache)[2]
        return ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * 2 + [ctypes.c_void_p] * 3 +
                                        [ctypes.c_int64] * len(_ARGS)))(address), address

    def __call__(self, x, g, pads, groups, dilation, parallel=None):
        n, cx, h, wd = x.shape
        _, o, ho, wo = g.shape
        kh, kw = self.kernel
        (top, bottom), (left, right) = pads
        hp, wp = h + top + bottom, wd + left + right
        dh, dw = dilation
        np_dtype = np.dtype(DTYPES[self.dtype])
        where = f"direct convolution weight: input {x.shape}, gradient {g.shape}, groups {groups}, pads {pads}, " \
                f"dilation {dilation}"
        if o % groups or (o // groups) % self.block or cx % groups or g.shape[0] != n:
            raise ValueError(f"{where}: do not fit this {self.kernel} kernel with blocks of {self.block} output "
                             "channels (need one batch, O and C divisible by groups, O / groups by the block)")
        sy, sx = self.stride
        if (ho - 1) * sy + dh * (kh - 1) >= hp or (wo - 1) * sx + dw * (kw - 1) >= wp:
            raise ValueError(f"{where}: the gradient has more positions than the padded input has windows")
        xpad = np.zeros((n, cx, hp, wp), np_dtype)
        xpad[:, :, top:top + h, left:left + wd] = x
        return self._run(xpad, 0, g, groups, dilation, parallel)

    def from_planes(self, planes, origin, g, groups, dilation, parallel=None):
        """The gradient as ``fn(...)`` gives it, from planes the caller padded: ``planes`` ``(N, C, Hp, Wp)``
        (C-contiguous, ``planes.dtype`` this kernel's) whose windows start at row and column ``origin`` (one
        phase of a strided input, `ops.conv_direct`, with no copy of its own).

        >>> fn = DirectConvWeight("f32", (1, 1), lanes=8, block=1)
        >>> planes = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
        >>> fn.from_planes(planes, (1, 2), np.ones((1, 1, 2, 2), np.float32), 1, (1, 1)).ravel().tolist()  # 6+7+10+11
        [34.0]
        """
        _, _, hp, wp = planes.shape
        kh, kw = self.kernel
        (sy, sx), (dh, dw) = self.stride, dilation
        _, _, ho, wo = g.shape
        if (not planes.flags.c_contiguous or planes.dtype != np.dtype(DTYPES[self.dtype]) or min(origin) < 0
                or origin[0] + (ho - 1) * sy + dh * (kh - 1) >= hp or origin[1] + (wo - 1) * sx + dw * (kw - 1) >= wp):
            raise ValueError(f"direct convolution weight: planes {planes.shape} {planes.dtype} from {origin} do not "
                             f"hold the windows of a gradient {g.shape} (kernel {self.kernel}, dilation {dilation})")
        return self._run(planes, origin[0] * wp + origin[1], g, groups, dilation, parallel)

    def _run(self, xpad, start, g, groups, dilation, parallel):
        """The kernel over the padded input ``xpad`` ``(N, C, Hp, Wp)`` whose windows start ``start`` elements into
        each plane."""
        n, cx, hp, wp = xpad.shape
        _, o, ho, wo = g.shape
        kh, kw = self.kernel
        np_dtype = xpad.dtype
        if o % groups or (o // groups) % self.block or cx % groups or g.shape[0] != n:
            raise ValueError(f"direct convolution weight: input {xpad.shape}, gradient {g.shape}, groups {groups}: "
                             f"do not fit this {self.kernel} kernel with blocks of {self.block} output channels (need "
                             "one batch, O and C divisible by groups, O / groups by the block)")
        cg = cx // groups
        gc = np.ascontiguousarray(g, np_dtype)
        out = np.empty((o, cg, kh, kw), np_dtype)
        items = (o // self.block) * cg
        ints = (n, cg, hp, wp, ho, wo, (o // groups) // self.block, cx, o, dilation[0], dilation[1])
        ptrs = [xpad.ctypes.data + start * np_dtype.itemsize, gc.ctypes.data, out.ctypes.data]

        fn, address = self._function(wo <= self.lanes)  # rows of one chunk: the variant whose row loop is innermost
        split_call(parallel, fn, address, ["ptr"] * 3 + ["i64"] * len(ints), (*ptrs, *ints), items)
        return out
