"""A whole program of kernels as ONE native function: ``void @program(ptr %table, ptr %ints)`` runs calls in order.

The program is what a CPU graph replays: each call is an IR `Kernel` (a fused elementwise group or a reduction), a
matrix product (`Gemm`: a vector loop for small sizes, a BLAS call through a function pointer for large ones,
float32 register tiles over a right operand packed as they go, `llvm_gemm_tiled`; `PackedGemm`: a product by a
weight packed in panels, `llvm_gemm_packed`) or a `Copy` (``memcpy``). Every pointer a call uses is
``table[slot] + byte_offset``: the table (an array of ``void*`` the caller owns) holds one address per distinct
allocation, so a caller can substitute an input by rewriting one table entry, with no copy and no recompile, as long
as the new memory has the same layout.

The program is size-generic: every integer of its calls (sizes, strides, byte offsets, byte counts) and constant is
read from an ``i64`` array that the `Program` holds, not baked into the code, so the same calls at other sizes are
the same text, hence the same cached machine code, with other integers (products: `llvm_gemm`). Kernels are not in
the program's code either: each distinct kernel template is a function of its own (`llvm_compile.template_address`,
shared by every program and by single kernel calls; calls whose kernels differ only in those integers share it, so
a 100-step loop compiles three functions, not three hundred), and the program calls it through its address, also
kept in the integer array. So a program's own compile is its call sequence: it only loads table entries and
integers, offsets pointers and calls. For a one-kernel program the emitted text reads::

    define void @jitorch_program_1f2e...(ptr %table, ptr %ints) nounwind {
    entry:
      %t0 = getelementptr i64, ptr %ints, i64 0
      %t1 = load ptr, ptr %t0
      %t2 = getelementptr i64, ptr %ints, i64 1
      %t3 = load i64, ptr %t2
      %t4 = load ptr, ptr %table
      %t5 = getelementptr ptr, ptr %table, i64 1
      %t6 = load ptr, ptr %t5
      %t7 = getelementptr i64, ptr %ints, i64 2
      %t8 = load i64, ptr %t7
      %t9 = getelementptr i8, ptr %t6, i64 %t8
      %t10 = getelementptr i64, ptr %ints, i64 3
      %t11 = load i64, ptr %t10
      call void %t1(i64 0, i64 %t3, ptr %t4, ptr %t9, i64 %t11)
      ret void
    }

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
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .codeblock import LLVMBuilder
from .ir import Kernel
from .ir_params import arguments, bits, outer_size, parametrize
from .llvm_compile import compile_hashed, template_address
from .llvm_objcache import default_cache
from .llvm_pool import available, chunking, current_cell, grain_rows, run_address, shared_pool, trampoline_address, \
    worth_splitting
from .llvm_gemm import blas_gemm, blas_ints, blas_operands, gemm_outer_kernel, gemm_reduction_kernel, uses_blas, \
    vector_chunk, vector_fits, vector_gemm, vector_ints
from .llvm_gemm_packed import geometry, packed_gemm, packed_ints
from .llvm_gemm_tiled import TILED_SPLIT_FLOPS, TILED_TYPES, tiled_address, tiled_geometry, tiled_ints, \
    tiled_panels, tiled_pays

__all__ = ["Ref", "KernelCall", "Gemm", "PackedGemm", "Function", "FunctionCall", "call_for", "Copy", "emit_program",
           "compile_program", "Program"]


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
    # > 1: call the kernel through the native pool (`llvm_pool`) of this many threads, which splits its outer range
    # when `llvm_pool.worth_splitting` holds at this call's size and runs it whole otherwise: a size-dependent
    # choice made in the integers, so the program's text (and machine code) is the same at every size.
    split: int = 0


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
    # > 0: float32 register tiles over a right operand packed as they go (`llvm_gemm_tiled`), faster than NumPy's
    # OpenBLAS on the products of a training step; > 1: its column panels split over this many pool threads.
    tiled: int = 0


@dataclass(frozen=True)
class PackedGemm:
    """float32 ``c[m, n] = a[m, k] @ B[k, n]`` with ``b`` the address of ``B`` in column panels
    (`llvm_gemm_packed.pack_panels`), for a weight that many products reuse; ``a`` and ``c`` row-major with leading
    dimensions ``lda``, ``ldc``."""

    m: int
    n: int
    k: int
    a: Ref
    lda: int
    b: Ref
    c: Ref
    ldc: int


@dataclass(frozen=True)
class Function:
    """A generated function compiled once per process and called as ``fn(start, stop, pointers..., ints...)`` over
    ``range(rows)``: ``address()`` returns its address (kept in the program's integers, not its code), ``ints`` are
    its integer arguments after the pointers, ``worth`` says whether splitting the rows over threads pays, ``name``
    names it in messages (`llvm_maxpool2`'s pool functions)."""

    name: str
    address: Callable
    pointers: int
    ints: tuple
    rows: int
    worth: bool

    @property
    def types(self):
        """Its argument types after the row range: ``"ptr"`` per pointer, then ``"i64"`` per integer."""
        return ("ptr",) * self.pointers + ("i64",) * len(self.ints)


@dataclass(frozen=True)
class FunctionCall:
    """Run a `Function` with ``refs`` as its pointers; ``split`` > 1: its rows over this many pool threads."""

    function: Function
    refs: tuple
    split: int = 0


def call_for(kernel, refs, split=0):
    """The call running ``kernel`` over ``refs``: a `KernelCall` for an IR `Kernel`, a `FunctionCall` for a
    `Function` (the two things a whole-kernel lowering returns)."""
    if isinstance(kernel, Function):
        return FunctionCall(kernel, tuple(refs), split)
    return KernelCall(kernel, tuple(refs), split)


@dataclass(frozen=True)
class Copy:
    """``memcpy(dst, src, nbytes)`` (the regions must not overlap)."""

    dst: Ref
    src: Ref
    nbytes: int


def emit_program(calls, name, ints, link):
    """The LLVM module (text) defining ``void @name(ptr %table, ptr %ints)`` that runs ``calls`` in order.

    A kernel is called through its function's address, ``link(template)`` (kept in ``ints``, not the code): kernels
    compile once as functions of their own (`llvm_compile.template_address`), shared by every program and by the
    Python-side calls, and a program's own compile is only its call sequence.

    Every integer and constant of the calls is appended to ``ints`` (a list: the caller passes its values as
    ``%ints``, an array of i64, a float in the low bytes of its entry), so the text depends only on the calls'
    structure (which kernels, which kind of product, which table slots): see the module notes.
    """
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

    def kernel_call(kernel, refs, split=0):
        template, values = parametrize(kernel)
        key = str(template)
        if key not in kernels:
            kernels[key] = integer(link(template), "ptr")
        outer = outer_size(template, values)
        types = ["ptr"] * len(refs) + list(arguments(template))
        operands = [pointer(r) for r in refs] + [integer(v, ty) for v, ty in zip(values, types[len(refs):])]
        if split > 1 and outer > 1:
            pool_call(kernels[key], types, operands, outer, split, grain_rows(kernel, outer),
                      worth_splitting(kernel, math.prod(kernel.shape)))
            return
        args = [f"i64 {integer(outer) if outer > 1 else outer}"] + [f"{t} {o}" for t, o in zip(types, operands)]
        body.line(f"call void {kernels[key]}(i64 0, {', '.join(args)})")

    def pool_call(fn, types, operands, outer, threads, grain, worth):
        # The kernel's arguments go in a context array on the stack, read by the signature's trampoline in every
        # thread (`llvm_pool.emit_trampoline`). The pool's block is read from the process's current-pool cell on
        # every call (it follows set_num_threads); the cell and entry point are process addresses: integers.
        shared_pool(threads)
        ctx = body.emit(f"alloca [{1 + len(types)} x i64], align 8")
        body.line(f"store ptr {fn}, ptr {ctx}")
        for i, (ty, operand) in enumerate(zip(types, operands), start=1):
            body.line(f"store {ty} {operand}, ptr {body.emit(f'getelementptr i64, ptr {ctx}, i64 {i}')}")
        chunk, count = chunking(outer, threads, grain) if worth else (outer, 1)
        state = body.emit(f"load atomic ptr, ptr {integer(current_cell(), 'ptr')} acquire, align 8")
        body.line(f"call void {integer(run_address(), 'ptr')}(ptr {state}, "
                  f"ptr {integer(trampoline_address(types, default_cache()), 'ptr')}, ptr {ctx}, "
                  f"i64 {integer(outer)}, i64 {integer(chunk)}, i64 {integer(count)})")

    def gemm_call(g, kind, make, values, extra=()):
        if kind not in gemms:
            gemms[kind] = f"g{len(gemms)}"
            d, text = make(g, gemms[kind])
            decls.update(d)
            functions.append(text)
        args = [f"ptr {pointer(r)}" for r in (g.a, g.b, g.c, *extra)] + [f"i64 {integer(v)}" for v in values]
        body.line(f"call void @{gemms[kind]}({', '.join(args)})")

    def tiled_call(g):
        # Whether the tiles pay, and their geometry, depend on the sizes: both are the address in the integers
        # (null: the other path), so the text is the same at every size. Values the other path loads first are
        # forgotten after it: they do not dominate the code that follows.
        fn = integer(tiled_address(tiled_geometry(g.n), default_cache()) if tiled_pays(g) else 0, "ptr")
        operands = [pointer(r) for r in (g.a, g.b, g.c)] + [integer(v) for v in tiled_ints(g)]
        n = len(body.lines)
        yes, no, join = f"tiled{n}", f"other{n}", f"join{n}"
        body.line(f"br i1 {body.emit(f'icmp ne ptr {fn}, null')}, label %{yes}, label %{no}")
        body.label(yes)
        range_call(fn, TILED_TYPES, operands, tiled_panels(g.n), g.tiled, g.m * g.n * g.k >= TILED_SPLIT_FLOPS)
        body.line(f"br label %{join}")
        body.label(no)
        saved = dict(slots), dict(kernels)
        product(g)
        slots.clear(), slots.update(saved[0]), kernels.clear(), kernels.update(saved[1])
        body.line(f"br label %{join}")
        body.label(join)

    def range_call(fn, types, operands, rows, threads, worth):
        # ``fn(0, rows, operands...)``, or its rows split over ``threads`` of the pool where ``worth`` says so
        # (a choice in the integers: `pool_call`).
        if threads > 1 and available():
            pool_call(fn, types, operands, rows, threads, 1, worth)
        else:
            args = "".join(f", {t} {o}" for t, o in zip(types, operands))
            body.line(f"call void {fn}(i64 0, i64 {integer(rows)}{args})")

    def product(call):
        if uses_blas(call):
            kind = ("blas", call.dtype, *blas_operands(call)[:2], call.blas_int_bits)
            gemm_call(call, kind, blas_gemm, blas_ints(call), (call.blas,))
        elif vector_fits(call):
            gemm_call(call, ("vector", call.dtype, vector_chunk(call)), vector_gemm, vector_ints(call))
        else:
            kernel_call(gemm_reduction_kernel(call), (call.a, call.b, call.c))

    for call in calls:
        if isinstance(call, KernelCall):
            kernel_call(call.kernel, call.refs, call.split if available() else 0)
        elif isinstance(call, Gemm):
            if call.m == 0 or call.n == 0:
                continue
            if call.k == 1:
                kernel_call(gemm_outer_kernel(call), (call.a, call.b, call.c))
            elif call.tiled:  # (set only where `tiled_fits`; whether they pay is the address in the integers)
                tiled_call(call)
            else:
                product(call)
        elif isinstance(call, PackedGemm):
            if call.m and call.n:
                gemm_call(call, ("packed", geometry()), lambda g, name: packed_gemm(name), packed_ints(call))
        elif isinstance(call, FunctionCall):
            f = call.function
            if f.rows:
                operands = [pointer(r) for r in call.refs] + [integer(v) for v in f.ints]
                range_call(integer(f.address(), "ptr"), f.types, operands,
                           f.rows, call.split if f.rows > 1 else 1, f.worth)
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

    ``source`` is the LLVM IR text; ``ncalls`` the number of calls it makes; ``ints`` its integer array.
    """

    def __init__(self, calls, cache=None):
        ints = []
        placeholder = emit_program(calls, "jitorch_program", ints, lambda t: template_address(t, cache))
        # Named by a hash of the code: equal programs share machine code, in this process and (through the object
        # cache on disk) in the next one; each caller brings its own table.
        self.name, self.source, self.address = compile_hashed(placeholder, "jitorch_program", cache)
        self.ncalls = len(calls)
        self.ints = np.array(ints, dtype=np.int64)
        self._ints_address = self.ints.ctypes.data
        self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(self.address)

    def __call__(self, table_address):
        self._fn(table_address, self._ints_address)


def compile_program(calls, cache=None):
    """Compile ``calls`` (`KernelCall`, `Gemm`, `PackedGemm`, `FunctionCall`, `Copy`) into one native `Program`;
    ``cache``: a `cache.KernelCache`."""
    return Program(list(calls), cache)
