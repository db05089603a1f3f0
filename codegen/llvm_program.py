"""A whole program of kernels as ONE native function: ``void @program(ptr %table)`` runs a list of calls in order.

The program is what a CPU graph replays: each call is an IR `Kernel` (a fused elementwise group or a reduction), a
matrix product (`Gemm`: a vector loop for small sizes, a BLAS call through a function pointer for large ones) or a
`Copy` (``memcpy``). Every pointer a call uses is ``table[slot] + byte_offset``: the table (an array of ``void*``
the caller owns) holds one address per distinct allocation, so a caller can substitute an input by rewriting one
table entry, with no copy and no recompile, as long as the new memory has the same layout.

Each distinct kernel becomes one ``internal noinline`` function (calls with equal IR share it, so a 100-step loop
compiles three functions, not three hundred); the program only loads table entries, offsets them and calls. For a
two-call program the emitted text reads (abridged)::

    define internal void @k0(i64 %start, i64 %stop, ptr noalias %buf0, ptr noalias %buf1) noinline nounwind {...}
    define void @jitorch_program_1f2e...(ptr %table) nounwind {
    entry:
      %s0 = load ptr, ptr %table
      %s1.a = getelementptr ptr, ptr %table, i64 1
      %s1 = load ptr, ptr %s1.a
      %p0 = getelementptr i8, ptr %s1, i64 256
      call void @k0(i64 0, i64 64, ptr %s0, ptr %p0)
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
from .ir import Buffer, Kernel, Store, collapse, load, op
from .llvm_compile import compile_function
from .llvm_emit import emit_kernel

__all__ = ["Ref", "KernelCall", "Gemm", "Copy", "emit_program", "compile_program", "Program", "VECTOR_BYTES"]

# A product whose output rows fit in this many bytes accumulates each row in one LLVM vector (registers).
VECTOR_BYTES = 512
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

    def spec(self):
        return (self.dtype, self.m, self.n, self.k, self.a_strides, self.b_strides, self.c_strides,
                self.blas is not None, self.blas_int_bits)


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
    """Rows of ``c`` accumulated in one ``<n x T>`` vector each: ``acc = fmuladd(splat(a[i, k]), b[k, :], acc)``.

    Needs unit column strides in ``b`` and ``c``. For ``m = 1, n = k = 64`` float32 the inner block reads::

        %t6 = load <64 x float>, ptr %t5, align 4
        %t7 = call <64 x float> @llvm.fmuladd.v64f32(<64 x float> %t4, <64 x float> %t6, <64 x float> %acc)
    """
    ty = LLVM_TYPES[g.dtype]
    vt = f"<{g.n} x {ty}>"
    (a0, a1), (b0, _), (c0, _) = g.a_strides, g.b_strides, g.c_strides
    fma = f"llvm.fmuladd.v{g.n}{'f32' if g.dtype == 'f32' else 'f64'}"
    lines = [f"define internal void @{name}(ptr noalias %a, ptr noalias %b, ptr noalias %c) noinline nounwind {{",
             "entry:", "  br label %i.head",
             "i.head:", "  %i = phi i64 [ 0, %entry ], [ %i.next, %k.exit ]",
             f"  %i.ok = icmp slt i64 %i, {g.m}", "  br i1 %i.ok, label %i.body, label %exit",
             "i.body:", f"  %a.row = mul nsw i64 %i, {a0}", "  br label %k.head",
             "k.head:", "  %kk = phi i64 [ 0, %i.body ], [ %kk.next, %k.body ]",
             f"  %acc = phi {vt} [ zeroinitializer, %i.body ], [ %acc.next, %k.body ]",
             f"  %k.ok = icmp slt i64 %kk, {g.k}", "  br i1 %k.ok, label %k.body, label %k.exit",
             "k.body:", f"  %a.col = mul nsw i64 %kk, {a1}", "  %a.off = add nsw i64 %a.row, %a.col",
             f"  %a.ptr = getelementptr {ty}, ptr %a, i64 %a.off", f"  %a.val = load {ty}, ptr %a.ptr",
             f"  %a.ins = insertelement {vt} poison, {ty} %a.val, i64 0",
             f"  %a.splat = shufflevector {vt} %a.ins, {vt} poison, <{g.n} x i32> zeroinitializer",
             f"  %b.off = mul nsw i64 %kk, {b0}", f"  %b.ptr = getelementptr {ty}, ptr %b, i64 %b.off",
             f"  %b.val = load {vt}, ptr %b.ptr, align {_ITEM[g.dtype]}",
             f"  %acc.next = call {vt} @{fma}({vt} %a.splat, {vt} %b.val, {vt} %acc)",
             "  %kk.next = add nsw i64 %kk, 1", "  br label %k.head",
             "k.exit:", f"  %c.off = mul nsw i64 %i, {c0}", f"  %c.ptr = getelementptr {ty}, ptr %c, i64 %c.off",
             f"  store {vt} %acc, ptr %c.ptr, align {_ITEM[g.dtype]}",
             "  %i.next = add nsw i64 %i, 1", "  br label %i.head",
             "exit:", "  ret void", "}"]
    return {f"declare {vt} @{fma}({vt}, {vt}, {vt})"}, "\n".join(lines)


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
    """A call of ``?gemm_`` through the pointer ``%fn``; Fortran takes every argument by reference (allocas)::

        %n = alloca i64                  ; i32 for an LP64 BLAS (``blas_int_bits``)
        store i64 90, ptr %n
        ...
        call void %fn(ptr %ta, ptr %tb, ptr %n, ptr %m, ptr %k, ptr %alpha, ptr %b, ptr %ldb, ptr %a, ...)
    """
    ty = LLVM_TYPES[g.dtype]
    transb, transa, ldb, lda, ldc = blas_operands(g)
    lines = [f"define internal void @{name}(ptr %a, ptr %b, ptr %c, ptr %fn) noinline nounwind {{", "entry:"]
    ints = {"n": g.n, "m": g.m, "k": g.k, "ldb": ldb, "lda": lda, "ldc": ldc}
    it = f"i{g.blas_int_bits}"
    for key, value in ints.items():
        lines += [f"  %{key} = alloca {it}", f"  store {it} {value}, ptr %{key}"]
    for key, value in (("ta", transb), ("tb", transa)):
        lines += [f"  %{key} = alloca i8", f"  store i8 {ord(value)}, ptr %{key}"]
    lines += [f"  %alpha = alloca {ty}", f"  store {ty} 1.0, ptr %alpha",
              f"  %beta = alloca {ty}", f"  store {ty} 0.0, ptr %beta",
              "  call void %fn(ptr %ta, ptr %tb, ptr %n, ptr %m, ptr %k, ptr %alpha, ptr %b, ptr %ldb, ptr %a, "
              "ptr %lda, ptr %beta, ptr %c, ptr %ldc)",
              "  ret void", "}"]
    return set(), "\n".join(lines)


def _uses_blas(g):
    return g.m > 0 and g.n > 0 and g.blas is not None and g.k > 0 and blas_operands(g) is not None


def vector_fits(g):
    """Whether `_vector_gemm` applies: unit column strides in ``b`` and ``c``, a row of ``c`` in `VECTOR_BYTES`."""
    return ((g.b_strides[1] == 1 or g.n == 1) and (g.c_strides[1] == 1 or g.n == 1)
            and 0 < g.n * _ITEM[g.dtype] <= VECTOR_BYTES)


def _gemm_function(g, name):
    if g.m == 0 or g.n == 0:
        return set(), f"define internal void @{name}(ptr %a, ptr %b, ptr %c) noinline nounwind {{\nentry:\n" \
                      "  ret void\n}"
    if _uses_blas(g):
        return _blas_gemm(g, name)
    if vector_fits(g):
        return _vector_gemm(g, name)
    decls, body = _kernel_function(gemm_reduction_kernel(g), name)
    # The emitter's signature is (start, stop, a, b, c): wrap it in the three-pointer one.
    outer = collapse(gemm_reduction_kernel(g)).shape[0]
    wrapper = (f"define internal void @{name}.w(ptr %a, ptr %b, ptr %c) noinline nounwind {{\nentry:\n"
               f"  call void @{name}(i64 0, i64 {outer}, ptr %a, ptr %b, ptr %c)\n  ret void\n}}")
    return decls, body + "\n" + wrapper


def emit_program(calls, name):
    """The LLVM module (text) defining ``void @name(ptr %table)`` that runs ``calls`` in order (module notes)."""
    decls, functions, body = set(), [], LLVMBuilder()
    kernels, gemms, slots = {}, {}, {}
    body.label("entry")

    def pointer(ref):
        if ref.slot not in slots:
            if ref.slot == 0:
                slots[0] = body.emit("load ptr, ptr %table")
            else:
                entry = body.emit(f"getelementptr ptr, ptr %table, i64 {ref.slot}")
                slots[ref.slot] = body.emit(f"load ptr, ptr {entry}")
        base = slots[ref.slot]
        return base if ref.byte_offset == 0 else body.emit(f"getelementptr i8, ptr {base}, i64 {ref.byte_offset}")

    for call in calls:
        if isinstance(call, KernelCall):
            key = str(call.kernel)
            if key not in kernels:
                kernels[key] = f"k{len(kernels)}"
                d, text = _kernel_function(call.kernel, kernels[key])
                decls |= d
                functions.append(text)
            outer = collapse(call.kernel).shape[0]
            args = ", ".join(f"ptr {pointer(r)}" for r in call.refs)
            body.line(f"call void @{kernels[key]}(i64 0, i64 {outer}, {args})")
        elif isinstance(call, Gemm):
            key = call.spec()
            if key not in gemms:
                fname = f"g{len(gemms)}"
                d, text = _gemm_function(call, fname)
                gemms[key] = fname + ".w" if f"@{fname}.w(" in text else fname  # the reduction's wrapper
                decls |= d
                functions.append(text)
            args = [pointer(call.a), pointer(call.b), pointer(call.c)]
            if _uses_blas(call):
                args.append(pointer(call.blas))
            body.line(f"call void @{gemms[key]}({', '.join(f'ptr {a}' for a in args)})")
        elif isinstance(call, Copy):
            if call.nbytes:
                decls.add("declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)")
                dst, src = pointer(call.dst), pointer(call.src)
                body.line(f"call void @llvm.memcpy.p0.p0.i64(ptr {dst}, ptr {src}, i64 {call.nbytes}, i1 false)")
        else:
            raise TypeError(f"emit_program: unknown call {call!r}")
    body.line("ret void")
    return "\n".join([*sorted(decls), *functions, f"define void @{name}(ptr %table) nounwind {{", str(body), "}", ""])


class Program:
    """A compiled program: ``program(table_address)`` runs it (the ctypes call releases the GIL).

    ``source`` is the LLVM IR text; ``ncalls`` the number of calls it makes; ``nfunctions`` the distinct kernels.
    """

    def __init__(self, calls, cache=None):
        placeholder = emit_program(calls, "jitorch_program")
        # Named by a hash of the code: equal programs share machine code, in this process and (through the object
        # cache on disk) in the next one; each caller brings its own table.
        digest = hashlib.sha256(placeholder.encode()).hexdigest()[:24]
        self.name = f"jitorch_program_{digest}"
        self.source = placeholder.replace("define void @jitorch_program(", f"define void @{self.name}(")
        self.ncalls = len(calls)
        self.nfunctions = self.source.count("define internal")
        self.address = compile_function(self.source, self.name, cache)
        self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self.address)

    def __call__(self, table_address):
        self._fn(table_address)


def compile_program(calls, cache=None):
    """Compile ``calls`` (`KernelCall`, `Gemm`, `Copy`) into one native `Program`; ``cache``: a `cache.KernelCache`."""
    return Program(list(calls), cache)
