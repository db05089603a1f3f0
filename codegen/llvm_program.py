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
from .llvm_emit import emit_kernel

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


def _vector_gemm(g, name):
    """Rows of ``c`` in chunks of one ``<W x T>`` vector (`VECTOR_CHUNK` bytes), each accumulated in registers:
    ``acc = fmuladd(splat(a[i, k]), b[k, j0:j0 + W], acc)``; the last chunk of a row is masked.

    Needs unit column strides in ``b`` and ``c``. Every size and stride is an argument, so one function serves
    every size. For float32 the inner block reads::

        %b.val = call <32 x float> @llvm.masked.load.v32f32.p0(ptr %b.ptr, i32 4, <32 x i1> %mask, ...)
        %acc.next = call <32 x float> @llvm.fmuladd.v32f32(<32 x float> %a.splat, <32 x float> %b.val, ...)
    """
    ty = LLVM_TYPES[g.dtype]
    w = VECTOR_CHUNK // _ITEM[g.dtype]
    vt, mt, it = f"<{w} x {ty}>", f"<{w} x i1>", f"<{w} x i64>"
    suffix = f"v{w}{'f32' if g.dtype == 'f32' else 'f64'}"
    fma, mload, mstore = f"llvm.fmuladd.{suffix}", f"llvm.masked.load.{suffix}.p0", f"llvm.masked.store.{suffix}.p0"
    align = _ITEM[g.dtype]
    lanes = ", ".join(f"i64 {i}" for i in range(w))
    lines = [f"define internal void @{name}(ptr noalias %a, ptr noalias %b, ptr noalias %c, i64 %m, i64 %n, "
             "i64 %k, i64 %a0, i64 %a1, i64 %b0, i64 %c0) noinline nounwind {",
             "entry:", "  br label %i.head",
             "i.head:", "  %i = phi i64 [ 0, %entry ], [ %i.next, %j.exit ]",
             "  %i.ok = icmp slt i64 %i, %m", "  br i1 %i.ok, label %i.body, label %exit",
             "i.body:", "  %a.row = mul nsw i64 %i, %a0", "  %c.row = mul nsw i64 %i, %c0", "  br label %j.head",
             "j.head:", "  %j = phi i64 [ 0, %i.body ], [ %j.next, %k.exit ]",
             "  %j.ok = icmp slt i64 %j, %n", "  br i1 %j.ok, label %j.body, label %j.exit",
             "j.body:", "  %left = sub nsw i64 %n, %j",
             f"  %left.ins = insertelement {it} poison, i64 %left, i64 0",
             f"  %left.splat = shufflevector {it} %left.ins, {it} poison, <{w} x i32> zeroinitializer",
             f"  %mask = icmp slt {it} <{lanes}>, %left.splat", "  br label %k.head",
             "k.head:", "  %kk = phi i64 [ 0, %j.body ], [ %kk.next, %k.body ]",
             f"  %acc = phi {vt} [ zeroinitializer, %j.body ], [ %acc.next, %k.body ]",
             "  %k.ok = icmp slt i64 %kk, %k", "  br i1 %k.ok, label %k.body, label %k.exit",
             "k.body:", "  %a.col = mul nsw i64 %kk, %a1", "  %a.off = add nsw i64 %a.row, %a.col",
             f"  %a.ptr = getelementptr {ty}, ptr %a, i64 %a.off", f"  %a.val = load {ty}, ptr %a.ptr",
             f"  %a.ins = insertelement {vt} poison, {ty} %a.val, i64 0",
             f"  %a.splat = shufflevector {vt} %a.ins, {vt} poison, <{w} x i32> zeroinitializer",
             "  %b.row = mul nsw i64 %kk, %b0", "  %b.off = add nsw i64 %b.row, %j",
             f"  %b.ptr = getelementptr {ty}, ptr %b, i64 %b.off",
             f"  %b.val = call {vt} @{mload}(ptr %b.ptr, i32 {align}, {mt} %mask, {vt} zeroinitializer)",
             f"  %acc.next = call {vt} @{fma}({vt} %a.splat, {vt} %b.val, {vt} %acc)",
             "  %kk.next = add nsw i64 %kk, 1", "  br label %k.head",
             "k.exit:", "  %c.off = add nsw i64 %c.row, %j", f"  %c.ptr = getelementptr {ty}, ptr %c, i64 %c.off",
             f"  call void @{mstore}({vt} %acc, ptr %c.ptr, i32 {align}, {mt} %mask)",
             f"  %j.next = add nsw i64 %j, {w}", "  br label %j.head",
             "j.exit:", "  %i.next = add nsw i64 %i, 1", "  br label %i.head",
             "exit:", "  ret void", "}"]
    return {f"declare {vt} @{fma}({vt}, {vt}, {vt})", f"declare {vt} @{mload}(ptr, i32, {mt}, {vt})",
            f"declare void @{mstore}({vt}, ptr, i32, {mt})"}, "\n".join(lines)


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
                gemm_call(call, ("vector", call.dtype), _vector_gemm, _vector_ints(call))
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
