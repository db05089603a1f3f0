"""A whole program of kernels as ONE native function: ``void @program(ptr %table)`` runs a list of calls in order.

The program is what a CPU graph replays: each call is an IR `Kernel` (a fused elementwise group or a reduction), a
matrix product (`Gemm`: a vector loop for small sizes, a BLAS call through a function pointer for large ones) or a
`Copy` (``memcpy``). Every pointer a call uses is ``table[slot] + byte_offset``: the table (an array of ``void*``
the caller owns) holds one address per distinct allocation, so a caller can substitute an input by rewriting one
table entry, with no copy and no recompile, as long as the new memory has the same layout.

The program is size-generic: every integer of its calls (sizes, strides, byte offsets, byte counts) and constant is read from
an ``i64`` array that the `Program` holds, not baked into the code, so the same calls at other sizes are the same
text, hence the same cached machine code, with other integers. Each distinct kernel becomes one ``internal noinline``
function (calls whose kernels differ only in those integers share it, so a 100-step loop compiles three functions,
not three hundred); the program only loads table entries and integers, offsets pointers and calls. For a two-call
program the emitted text reads (abridged)::

    define internal void @k0(i64 %start, i64 %stop, ptr noalias %buf0, ptr noalias %buf1) noinline nounwind {...}
    define void @jitorch_program_1f2e...(ptr %table, ptr %ints) nounwind {
    entry:
      %t0 = getelementptr i64, ptr %ints, i64 0
      %t1 = load i64, ptr %t0
      %t2 = load ptr, ptr %table
      %t3 = getelementptr ptr, ptr %table, i64 1
      %t4 = load ptr, ptr %t3
      %t5 = getelementptr i64, ptr %ints, i64 1
      %t6 = load i64, ptr %t5
      %t7 = getelementptr i8, ptr %t4, i64 %t6
      call void @k0(i64 0, i64 %t1, ptr %t2, ptr %t7)
      ...

>>> import ctypes, numpy as np
>>> from jitorch.codegen.ir import Buffer, Kernel, Store, load, op
>>> k = Kernel((4,), (Buffer("f32", (1,)), Buffer("f32", (1,))), (Store(1, op("exp", load(0, "f32"))),))
>>> prog = compile_program([KernelCall(k, (Ref(0, 0), Ref(1, 0)))])
>>> x, y = np.zeros(4, np.float32), np.empty(4, np.float32)
>>> table = np.array([x.ctypes.data, y.ctypes.data], np.uint64)
>>> prog(table.ctypes.data); y.tolist()
[1.0, 1.0, 1.0, 1.0]
"""
from __future__ import annotations

import ctypes
import hashlib
from dataclasses import dataclass

from .codeblock import LLVM_TYPES, LLVMBuilder
import numpy as np

from .ir import Buffer, Kernel, Store, collapse, load, op
from .ir_params import arguments, bits, parametrize
from .llvm_compile import compile_function
from .llvm_emit import _metadata_base, emit_kernel

__all__ = ["Ref", "KernelCall", "Gemm", "Copy", "emit_program", "compile_program", "Program", "VECTOR_BYTES"]

# A product whose output rows fit in this many bytes accumulates each row in registers, VECTOR_CHUNK bytes at a time.
VECTOR_BYTES = 512
VECTOR_CHUNK = 128
_ITEM = {"f32": 4, "f64": 8}


@dataclass(frozen=True)
class Ref:
    """A pointer argument: ``table[slot] + byte_offset``."""

    slot: int
    byte_offset: int = 0


@dataclass(frozen=True)
class KernelCall:
    """Run an IR kernel over its whole iteration space; ``refs[i]`` is IR buffer ``i``'s address.

    Buffers that are written must not overlap any other buffer of the call (the kernel's parameters are
    ``noalias``): one memory region read and written is one IR buffer.
    """

    kernel: Kernel
    refs: tuple


@dataclass(frozen=True)
class Gemm:
    """``c[m, n] = sum_k a[m, k] * b[k, n]`` with element strides ``(row, column)`` for each matrix.

    ``blas`` is the `Ref` of a table entry holding the address of a Fortran-ABI ``sgemm``/``dgemm`` to call (the
    address lives in the table, not the code, so the machine code is the same in every process and can be cached),
    or None for the generated loop; ``blas_int_bits`` is the width of the integers that function takes (64 for an
    ILP64 build such as NumPy's OpenBLAS).
    """

    dtype: str
    m: int
    n: int
    k: int
    a: Ref
    a_strides: tuple
    b: Ref
    b_strides: tuple
    c: Ref
    c_strides: tuple
    blas: Ref | None = None
    blas_int_bits: int = 32


@dataclass(frozen=True)
class Copy:
    """``memcpy(dst, src, nbytes)`` (the regions must not overlap)."""

    dst: Ref
    src: Ref
    nbytes: int


def _kernel_function(kernel, name):
    """(declarations, the kernel's function text renamed ``@name``, internal and never inlined)."""
    text = emit_kernel(kernel, name)
    decls = {line for line in text.splitlines() if line.startswith("declare ")}
    start = text.index(f"define void @{name}(")
    body = text[start:].replace(f"define void @{name}(", f"define internal void @{name}(", 1)
    body = body.replace(") nounwind {", ") noinline nounwind {", 1)
    return decls, body


def gemm_reduction_kernel(g):
    """The generic product as an IR reduction over ``(m, n, k)``: any strides (the emitter's reduction loop).

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


def _vector_chunk(g):
    """Lanes per register chunk: a narrow product (``n`` of one small chunk) gets one, so it wastes no lanes."""
    item = _ITEM[g.dtype]
    return VECTOR_CHUNK // 2 // item if g.n * item <= VECTOR_CHUNK // 2 else VECTOR_CHUNK // item


def _vector_gemm(g, name):
    """Rows of ``c`` in chunks accumulated in registers: ``acc = fmuladd(splat(a[i, k]), b[k, j:j + V], acc)``.

    With ``W`` = `_vector_chunk` lanes, a row goes in plain ``<2W x T>`` chunks while ``2W`` columns are left (a
    64-wide float32 row in one pass), then one plain ``<W x T>`` chunk if ``W`` are left, then one masked ``<W x T>``
    chunk for the rest. Needs unit column strides in ``b`` and ``c``. Every size and stride is an argument (only
    ``W`` is code), so one function serves every size; the k loops are unrolled by 4, as a known ``k`` would be.
    For float32 the wide chunk's inner block reads::

        %w.b = load <64 x float>, ptr %w.bp, align 4
        %w.acc.next = call <64 x float> @llvm.fmuladd.v64f32(<64 x float> %w.a.splat, <64 x float> %w.b, ...)
    """
    ty, item = LLVM_TYPES[g.dtype], _ITEM[g.dtype]
    w = _vector_chunk(g)
    short = f"{'f32' if g.dtype == 'f32' else 'f64'}"
    decls, lines, meta = set(), [], []
    unroll = _metadata_base(name)
    meta += [f"!{unroll} = distinct !{{!{unroll}, !{unroll + 1}}}", f'!{unroll + 1} = !{{!"llvm.loop.unroll.count", i32 4}}']

    def chunk(tag, lanes, masked, after):
        """One chunk of ``lanes`` columns at ``%j``: the k loop, the store, then ``%j`` += lanes and ``br after``."""
        vt = f"<{lanes} x {ty}>"
        fma = f"llvm.fmuladd.v{lanes}{short}"
        decls.add(f"declare {vt} @{fma}({vt}, {vt}, {vt})")
        pre = [f"{tag}.pre:"]
        if masked:
            it, mt = f"<{lanes} x i64>", f"<{lanes} x i1>"
            mload, mstore = f"llvm.masked.load.v{lanes}{short}.p0", f"llvm.masked.store.v{lanes}{short}.p0"
            decls.update({f"declare {vt} @{mload}(ptr, i32, {mt}, {vt})", f"declare void @{mstore}({vt}, ptr, i32, {mt})"})
            index = ", ".join(f"i64 {i}" for i in range(lanes))
            pre += [f"  %{tag}.left.ins = insertelement {it} poison, i64 %left, i64 0",
                    f"  %{tag}.left = shufflevector {it} %{tag}.left.ins, {it} poison, <{lanes} x i32> zeroinitializer",
                    f"  %{tag}.mask = icmp slt {it} <{index}>, %{tag}.left"]
            load_b = f"  %{tag}.b = call {vt} @{mload}(ptr %{tag}.bp, i32 {item}, {mt} %{tag}.mask, {vt} zeroinitializer)"
            store_c = f"  call void @{mstore}({vt} %{tag}.acc, ptr %{tag}.cp, i32 {item}, {mt} %{tag}.mask)"
        else:
            load_b = f"  %{tag}.b = load {vt}, ptr %{tag}.bp, align {item}"
            store_c = f"  store {vt} %{tag}.acc, ptr %{tag}.cp, align {item}"
        lines.extend(pre + [f"  br label %{tag}.head",
                     f"{tag}.head:", f"  %{tag}.kk = phi i64 [ 0, %{tag}.pre ], [ %{tag}.kk.next, %{tag}.body ]",
                     f"  %{tag}.acc = phi {vt} [ zeroinitializer, %{tag}.pre ], [ %{tag}.acc.next, %{tag}.body ]",
                     f"  %{tag}.ok = icmp slt i64 %{tag}.kk, %k",
                     f"  br i1 %{tag}.ok, label %{tag}.body, label %{tag}.exit",
                     f"{tag}.body:", f"  %{tag}.ac = mul nsw i64 %{tag}.kk, %a1",
                     f"  %{tag}.ao = add nsw i64 %a.row, %{tag}.ac",
                     f"  %{tag}.ap = getelementptr {ty}, ptr %a, i64 %{tag}.ao", f"  %{tag}.a = load {ty}, ptr %{tag}.ap",
                     f"  %{tag}.a.ins = insertelement {vt} poison, {ty} %{tag}.a, i64 0",
                     f"  %{tag}.a.splat = shufflevector {vt} %{tag}.a.ins, {vt} poison, <{lanes} x i32> zeroinitializer",
                     f"  %{tag}.br = mul nsw i64 %{tag}.kk, %b0", f"  %{tag}.bo = add nsw i64 %{tag}.br, %j",
                     f"  %{tag}.bp = getelementptr {ty}, ptr %b, i64 %{tag}.bo", load_b,
                     f"  %{tag}.acc.next = call {vt} @{fma}({vt} %{tag}.a.splat, {vt} %{tag}.b, {vt} %{tag}.acc)",
                     f"  %{tag}.kk.next = add nsw i64 %{tag}.kk, 1", f"  br label %{tag}.head, !llvm.loop !{unroll}",
                     f"{tag}.exit:", f"  %{tag}.co = add nsw i64 %c.row, %j",
                     f"  %{tag}.cp = getelementptr {ty}, ptr %c, i64 %{tag}.co", store_c,
                     f"  %{tag}.j = add nsw i64 %j, {lanes}", f"  br label %{after}"])

    lines += [f"define internal void @{name}(ptr noalias %a, ptr noalias %b, ptr noalias %c, i64 %m, i64 %n, "
              "i64 %k, i64 %a0, i64 %a1, i64 %b0, i64 %c0) noinline nounwind {",
              "entry:", "  br label %i.head",
              "i.head:", "  %i = phi i64 [ 0, %entry ], [ %i.next, %j.exit ]",
              "  %i.ok = icmp slt i64 %i, %m", "  br i1 %i.ok, label %i.body, label %exit",
              "i.body:", "  %a.row = mul nsw i64 %i, %a0", "  %c.row = mul nsw i64 %i, %c0", "  br label %j.head",
              "j.head:", "  %j = phi i64 [ 0, %i.body ], [ %w.j, %w.exit ], [ %p.j, %p.exit ], [ %t.j, %t.exit ]",
              "  %left = sub nsw i64 %n, %j", f"  %wide = icmp sge i64 %left, {2 * w}",
              "  br i1 %wide, label %w.pre, label %one",
              "one:", f"  %plain = icmp sge i64 %left, {w}", "  br i1 %plain, label %p.pre, label %rest",
              "rest:", "  %some = icmp sgt i64 %left, 0", "  br i1 %some, label %t.pre, label %j.exit"]
    chunk("w", 2 * w, False, "j.head")
    chunk("p", w, False, "j.head")
    chunk("t", w, True, "j.head")
    lines += ["j.exit:", "  %i.next = add nsw i64 %i, 1", "  br label %i.head", "exit:", "  ret void", "}"]
    return decls, "\n".join(lines + meta)


def _vector_ints(g):
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


def _blas_gemm(g, name):
    """A call of ``?gemm_`` through the pointer ``%fn``; Fortran takes every argument by reference (allocas). The
    sizes and leading dimensions are arguments (`_blas_ints`); the transposes are part of the code::

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


def _blas_ints(g):
    _, _, ldb, lda, ldc = blas_operands(g)
    return (g.n, g.m, g.k, ldb, lda, ldc)


def _uses_blas(g):
    return g.m > 0 and g.n > 0 and g.blas is not None and g.k > 0 and blas_operands(g) is not None


def vector_fits(g):
    """Whether `_vector_gemm` applies: unit column strides in ``b`` and ``c``, a row of ``c`` in `VECTOR_BYTES`."""
    return ((g.b_strides[1] == 1 or g.n == 1) and (g.c_strides[1] == 1 or g.n == 1)
            and 0 < g.n * _ITEM[g.dtype] <= VECTOR_BYTES)


def emit_program(calls, name, ints=None):
    """The LLVM module (text) defining ``void @name(ptr %table, ptr %ints)`` that runs ``calls`` in order.

    The program is size-generic: every size, stride, byte offset and byte count of the calls, and the kernels'
    constants (`ir_params.parametrize`), is appended to ``ints`` (a list; the caller passes its values as ``%ints``,
    an array of i64, a float in the low bytes of its entry) and read from there, so the text
    depends only on the calls' structure (which kernels, which kind of product, which table slots) and a program
    at another size is the same machine code with other ``ints``.
    """
    ints = [] if ints is None else ints
    decls, functions, body = set(), [], LLVMBuilder()
    kernels, gemms, slots = {}, {}, {}
    body.label("entry")

    def integer(value, ty="i64"):
        at = body.emit(f"getelementptr i64, ptr %ints, i64 {len(ints)}")
        ints.append(bits(value, ty))
        return body.emit(f"load {ty}, ptr {at}")

    def pointer(ref):
        if ref.slot not in slots:
            if ref.slot == 0:
                slots[0] = body.emit("load ptr, ptr %table")
            else:
                entry = body.emit(f"getelementptr ptr, ptr %table, i64 {ref.slot}")
                slots[ref.slot] = body.emit(f"load ptr, ptr {entry}")
        base = slots[ref.slot]
        return base if ref.byte_offset == 0 else \
            body.emit(f"getelementptr i8, ptr {base}, i64 {integer(ref.byte_offset)}")

    def kernel_call(kernel, refs):
        template, values = parametrize(kernel)
        key = str(template)
        if key not in kernels:
            kernels[key] = f"k{len(kernels)}"
            d, text = _kernel_function(template, kernels[key])
            decls.update(d)
            functions.append(text)
        outer = collapse(kernel).shape[0]
        args = [f"i64 {integer(outer) if outer > 1 else outer}"] + [f"ptr {pointer(r)}" for r in refs] + \
            [f"{ty} {integer(v, ty)}" for v, ty in zip(values, arguments(template))]
        body.line(f"call void @{kernels[key]}(i64 0, {', '.join(args)})")

    def gemm_call(g, kind, make, values, extra=()):
        if kind not in gemms:
            gemms[kind] = f"g{len(gemms)}"
            d, text = make(g, gemms[kind])
            decls.update(d)
            functions.append(text)
        args = [f"ptr {pointer(r)}" for r in (g.a, g.b, g.c, *extra)] + [f"i64 {integer(v)}" for v in values]
        body.line(f"call void @{gemms[kind]}({', '.join(args)})")

    for call in calls:
        if isinstance(call, KernelCall):
            kernel_call(call.kernel, call.refs)
        elif isinstance(call, Gemm):
            if call.m == 0 or call.n == 0:
                continue
            if _uses_blas(call):
                kind = ("blas", call.dtype, *blas_operands(call)[:2], call.blas_int_bits)
                gemm_call(call, kind, _blas_gemm, _blas_ints(call), (call.blas,))
            elif vector_fits(call):
                gemm_call(call, ("vector", call.dtype, _vector_chunk(call)), _vector_gemm, _vector_ints(call))
            else:
                kernel_call(gemm_reduction_kernel(call), (call.a, call.b, call.c))
        elif isinstance(call, Copy):
            if call.nbytes:
                decls.add("declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)")
                dst, src = pointer(call.dst), pointer(call.src)
                body.line(f"call void @llvm.memcpy.p0.p0.i64(ptr {dst}, ptr {src}, i64 {integer(call.nbytes)}, "
                          "i1 false)")
        else:
            raise TypeError(f"emit_program: unknown call {call!r}")
    body.line("ret void")
    return "\n".join([*sorted(decls), *functions, f"define void @{name}(ptr %table, ptr %ints) nounwind {{",
                      str(body), "}", ""])


class Program:
    """A compiled program: ``program(table_address)`` runs it (the ctypes call releases the GIL).

    ``source`` is the LLVM IR text; ``ncalls`` the number of calls it makes; ``nfunctions`` the distinct kernels.
    """

    def __init__(self, calls, cache=None):
        ints = []
        placeholder = emit_program(calls, "jitorch_program", ints)
        # Named by a hash of the code: equal programs share machine code, in this process and (through the object
        # cache on disk) in the next one; each caller brings its own table.
        digest = hashlib.sha256(placeholder.encode()).hexdigest()[:24]
        self.name = f"jitorch_program_{digest}"
        self.source = placeholder.replace("define void @jitorch_program(", f"define void @{self.name}(")
        self.ncalls = len(calls)
        self.nfunctions = self.source.count("define internal")
        self.ints = np.array(ints, dtype=np.int64)
        self._ints_address = self.ints.ctypes.data
        self.address = compile_function(self.source, self.name, cache)
        self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(self.address)

    def __call__(self, table_address):
        self._fn(table_address, self._ints_address)


def compile_program(calls, cache=None):
    """Compile ``calls`` (`KernelCall`, `Gemm`, `Copy`) into one native `Program`; ``cache``: a `cache.KernelCache`."""
    return Program(list(calls), cache)
