"""Kernel IR -> textual LLVM IR (opaque pointers, ``noalias`` buffers).

Sizes, strides, offsets and constants are literals in a kernel as built, and ``%q<i>`` arguments in a template
from `ir_params.parametrize`, which is what the compilers emit (one function for every size); the emitter writes
either, so it never folds a size into code: structural choices read only what a template keeps literal.
The loops are this module's; the body at each point (values, stores, accumulations) comes from
`llvm_body.BodyEmitter`, the emitter's base class.

The emitted function walks the collapsed iteration space with dimension 0 limited to ``[start, stop)`` so that a
thread pool can split it. Loads and stores index ``offset + sum(i_d * stride_d)``; LLVM's loop passes strength-reduce
that and the loop vectorizer widens the innermost loop. Reductions keep one accumulator per store in an ``alloca``
(SROA turns it into a phi); the innermost reduced loop runs in blocks of `BLOCK` elements whose partial results are
combined into the total (a two-level sum, the total of a float32 sum kept in double: stable for long float sums),
and only the block accumulation carries ``reassoc`` so that it vectorizes. A kernel with several phases (see
`ir.Kernel`) emits one such reduced loop nest per phase inside the outer loops, loads each phase's totals once
after its loop (later phases read them as loop invariants), and ends each outer point with the row stores. The
caller must pass distinct, non-overlapping buffers (``noalias``); a buffer stored in one phase and read back in a
later one is one pointer, which ``noalias`` allows.

Loop hints (``!llvm.loop`` metadata): an innermost pointwise loop around transcendental functions interleaves 4
vectors (GELU: 15% faster). Reduced row loops carry none: unroll/interleave hints there hit LLVM bugs (rows that
never end, a vectorizer assertion), tested by tests/test_fusion_row_sizes.py; their row length is read through a
volatile slot instead, so LLVM cannot fully unroll a row. Index reductions
(``argmax``/``argmin``) keep (best, flat index) per point, unblocked.

Column reductions (``x.sum(0)``: one kept and one reduced dimension, the inputs contiguous along the kept one) walk
rows into per-column partials instead (`llvm_columns`, mixed into the emitter). Pointwise kernels with a transposed
operand (contiguous along another dim than the output's last) walk square tiles of those two dims (`llvm_tiled`).
"""
from __future__ import annotations

import hashlib

from . import llvm_trig
from .codeblock import LLVM_TYPES, LLVMBuilder, llvm_const
from .ir import ARG_REDUCTIONS, collapse, identity
from .ir_params import arguments, is_template
from .llvm_body import BodyEmitter, fast_extremum, total_type
from .llvm_columns import ColumnReduction, column_layout
from .llvm_tiled import TransposedTiles, transposed_dims

# Each vector lane adds BLOCK / (lanes x interleave) terms in float32 before the block sum goes into the total:
# 512 keeps a float32 sum of 10^7 equal terms within 1e-7 on 8-lane AVX2 (4096 gave 1.3e-6 there).
BLOCK = 512
# Elements per block of a pointwise loop with sin or cos (`_Emitter._versioned`): the check pass leaves the block's
# inputs in L1 for the compute pass.
TRIG_BLOCK = 512
EXPENSIVE = ("exp", "log", "tanh", "sigmoid", "erf", "sin", "cos", "pow")


def emit_kernel(kernel, name="kernel"):
    """Return an LLVM module (text) defining ``void @name(i64 start, i64 stop, ptr noalias buf0, ...)``.

    The kernel is collapsed first (`ir.collapse`); dimension 0 of the collapsed shape is the ``[start, stop)`` range.
    For ``out[i] = in[i] * 2.0`` on 1000 float32 elements the body reads (abridged)::

        d0.head:
          %d0.i = phi i64 [ %start, %d0.pre ], [ %d0.i.next, %d0.latch ]
          %t0 = icmp slt i64 %d0.i, %stop
          br i1 %t0, label %d0.body, label %d0.exit
        d0.body:
          %t1 = getelementptr float, ptr %buf0, i64 %d0.i
          %t2 = load float, ptr %t1
          %t3 = fmul float %t2, 0x4000000000000000
          %t4 = getelementptr float, ptr %buf1, i64 %d0.i
          store float %t3, ptr %t4
          br label %d0.latch

    >>> from jitorch.codegen.ir import Buffer, Kernel, Store, load, op, const
    >>> k = Kernel((1000,), (Buffer("f32", (1,)), Buffer("f32", (1,))),
    ...            (Store(1, op("mul", load(0, "f32"), const(2, "f32"))),))
    >>> "fmul float" in emit_kernel(k)
    True
    """
    kernel = kernel if is_template(kernel) else collapse(kernel)
    return _Emitter(kernel, name).module()


class _Emitter(ColumnReduction, TransposedTiles, BodyEmitter):
    def __init__(self, kernel, name):
        self.k, self.name, self.b = kernel, name, LLVMBuilder()
        self.nouter = len(kernel.outer_shape)
        self.metadata = []  # module-level metadata lines (loop hints)

    def module(self):
        b, k = self.b, self.k
        b.label("entry")
        # sin and cos of a pointwise kernel run in versioned blocks (`_versioned`); reductions keep the full form.
        self.trig_args = [] if k.reduce_axes else list(dict.fromkeys(
            e.args[0] for e in k.nodes() if e.op in ("sin", "cos")))
        self.trig_small = False
        self.big_slot = b.emit("alloca i8") if self.trig_args else None
        # store index -> (total, block) accumulator slots; SROA turns them into phis
        # (an index reduction's slots: (best value, its flat index), updated per point, never blocked)
        self.accs = {j: (b.emit(f"alloca {total_type(s)}"),
                         b.emit(f"alloca {'i64' if s.reduce in ARG_REDUCTIONS else LLVM_TYPES[s.value.dtype]}"))
                     for j, s in enumerate(k.stores) if s.reduce}
        self.acc_values = {}
        # A float max/min's block runs a plain vector max (``nnan``) with a nan flag beside it (`fast_extremum`).
        self.nan_flags = {j: b.emit("alloca i8") for j, s in enumerate(k.stores) if fast_extremum(s)}
        # The reduced row length, read through a volatile slot so LLVM cannot treat it as a constant: a known
        # 1024-wide row gets fully unrolled, and GVN then carries a whole row of vectors from one pass to the next,
        # spilled to the stack (layer norm 1.3x slower). Loop-hint metadata would say the same, but those hints hit
        # LLVM bugs here (rows that never end, a vectorizer assertion); see tests/test_fusion_row_sizes.py.
        self.row_len = None
        self.columns = column_layout(k)
        self.tiled = transposed_dims(k)
        if self.tiled:
            self._tile_slots()
        if self.columns:
            self._column_slots()
        elif any(s.reduce for s in k.stores) and k.reduce_axes:
            slot = b.emit("alloca i64")
            b.line(f"store volatile i64 {k.shape[-1]}, ptr {slot}")
            self.row_len = b.emit(f"load volatile i64, ptr {slot}")
        if self.columns:
            self._column_reduction()
        else:
            self._dim(0, [])
        b.label("exit")
        b.line("ret void")
        params = ", ".join(["i64 %start", "i64 %stop"] + [f"ptr noalias %buf{i}" for i in range(len(k.buffers))]
                           + [f"{ty} %q{j}" for j, ty in enumerate(arguments(k))])
        head = "; " + str(k).replace("\n", "\n; ")
        return "\n".join([head, *self.b.declarations(), f"define void @{self.name}({params}) nounwind {{",
                          str(b), "}", *self.metadata, ""])

    def _hint(self, *properties):
        """A ``!llvm.loop`` metadata reference carrying ``properties`` (e.g. ``!"llvm.loop.unroll.disable"``)."""
        n = _metadata_base(self.name) + len(self.metadata)
        ids = [f"!{n + 1 + i}" for i in range(len(properties))]
        self.metadata.append(f"!{n} = distinct !{{!{n}, {', '.join(ids)}}}")
        self.metadata.extend(f"{ref} = !{{{p}}}" for ref, p in zip(ids, properties))
        return f", !llvm.loop !{n}"

    def _loop(self, label, lo, hi, body, step=1, hint=""):
        """Emit ``for (i = lo; i < hi; i += step) body(i)``; ``hint``: a `_hint` for the latch branch."""
        b = self.b
        b.line(f"br label %{label}.pre")
        b.label(f"{label}.pre")
        b.line(f"br label %{label}.head")
        b.label(f"{label}.head")
        i = f"%{label}.i"
        b.line(f"{i} = phi i64 [ {lo}, %{label}.pre ], [ {i}.next, %{label}.latch ]")
        b.line(f"br i1 {b.emit(f'icmp slt i64 {i}, {hi}')}, label %{label}.body, label %{label}.exit")
        b.label(f"{label}.body")
        body(i)
        b.line(f"br label %{label}.latch")
        b.label(f"{label}.latch")
        b.line(f"{i}.next = add nsw i64 {i}, {step}")
        b.line(f"br label %{label}.head{hint}")
        b.label(f"{label}.exit")

    def _expensive(self):
        """Whether the kernel calls transcendental functions (measured on GELU: 4 vectors in flight are 15% faster
        than the 1 the vectorizer picks for such a long body)."""
        return any(e.op in EXPENSIVE for e in self.k.nodes())

    def _dim(self, d, idx):
        k, b = self.k, self.b
        if d == len(k.shape):
            return self._point(idx)
        if d == self.nouter and k.reduce_axes:
            return self._reduction(idx)
        if self.tiled and d == self.tiled[0]:
            self._tiles(idx)
            if d == 0:
                b.line("br label %exit")
            return
        lo, hi = ("%start", "%stop") if d == 0 else ("0", str(k.shape[d]))
        innermost = d == len(k.shape) - 1
        if innermost and self.trig_args:
            self._versioned(d, lo, hi, idx)
        else:
            # An innermost loop around transcendental functions: several vectors in flight hide the latency of
            # their long dependency chains (the vectorizer alone picks one, register pressure being its worry).
            hint = self._hint('!"llvm.loop.interleave.count", i32 4') if innermost and self._expensive() else ""
            self._loop(f"d{d}", lo, hi, lambda i: self._dim(d + 1, idx + [i]), hint=hint)
        if d == 0:
            b.line("br label %exit")

    def _versioned(self, d, lo, hi, idx):
        """The innermost loop of a pointwise kernel with sin or cos, in blocks of `TRIG_BLOCK`: a first loop asks
        whether any argument of the block is at least `llvm_trig.SMALL` (a vectorized or-reduction), and the block
        then runs a loop whose sin and cos reduce by Cody-Waite alone, or one that also has Payne-Hanek's (a select
        per element cannot skip the gathers: both would run). Emits, per block::

            %t40 = fcmp oge float %t39, 0x4270000000000000
            ...
            br i1 %t45, label %d0s.go, label %d0f.go
        """
        b = self.b
        hint = self._hint('!"llvm.loop.interleave.count", i32 4')

        def block(jb):
            end = b.emit(f"add nsw i64 {jb}, {TRIG_BLOCK}")
            end = b.emit(f"select i1 {b.emit(f'icmp slt i64 {end}, {hi}')}, i64 {end}, i64 {hi}")
            b.line(f"store i8 0, ptr {self.big_slot}")
            self._loop(f"d{d}c", jb, end, lambda i: self._note_big_arguments(idx + [i]))
            big = b.emit(f"icmp ne i8 {b.emit(f'load i8, ptr {self.big_slot}')}, 0")
            b.line(f"br i1 {big}, label %d{d}s.go, label %d{d}f.go")
            for tag, small in (("f", True), ("s", False)):
                b.label(f"d{d}{tag}.go")
                self.trig_small = small
                self._loop(f"d{d}{tag}", jb, end, lambda i: self._dim(d + 1, idx + [i]), hint=hint)
                b.line(f"br label %d{d}v.join")
            self.trig_small = False
            b.label(f"d{d}v.join")

        self._loop(f"d{d}v", lo, hi, block, step=TRIG_BLOCK)

    def _note_big_arguments(self, idx):
        """``big |= |a| >= SMALL[type]`` for the argument ``a`` of each sin and cos at this point."""
        b = self.b
        values = {}
        for e in _dag(self.trig_args):
            values[e] = self._expr(e, [values[a] for a in e.args], idx)
        big = None
        for a in self.trig_args:
            ty = LLVM_TYPES[a.dtype]
            magnitude = b.intrinsic("llvm.fabs", ty, values[a])
            flag = b.emit(f"fcmp oge {ty} {magnitude}, {llvm_const(llvm_trig.SMALL[ty], ty)}")
            big = flag if big is None else b.emit(f"or i1 {big}, {flag}")
        seen = b.emit(f"load i8, ptr {self.big_slot}")
        flag = b.emit(f"zext i1 {big} to i8")
        b.line(f"store i8 {b.emit(f'or i8 {seen}, {flag}')}, ptr {self.big_slot}")

    def _reduction(self, idx):
        """Per phase: accumulators := identity; reduced loops (innermost one blocked); totals final. Then row stores."""
        k, b = self.k, self.b
        last = len(k.shape) - 1
        for phase in range(k.phases):
            stores = [(j, s) for j, s in enumerate(k.stores) if s.phase == phase and not s.row]
            reducing = [(j, s) for j, s in stores if s.reduce]
            for j, s in reducing:
                ty = total_type(s)
                b.line(f"store {ty} {llvm_const(identity(s.reduce, s.value.dtype), ty)}, ptr {self.accs[j][0]}")
                if s.reduce in ARG_REDUCTIONS:
                    b.line(f"store i64 0, ptr {self.accs[j][1]}")
            tag = f"p{phase}d"

            def outer_reduced(d, ridx, stores=stores, reducing=reducing, tag=tag):
                if d < last:
                    return self._loop(f"{tag}{d}", "0", str(k.shape[d]),
                                      lambda i: outer_reduced(d + 1, ridx + [i]))
                self._loop(f"{tag}{d}b", "0", str(k.shape[d]), lambda jb: block(jb, ridx, stores, reducing, tag),
                           step=BLOCK)

            def block(jb, ridx, stores, reducing, tag):
                reducing = [(j, s) for j, s in reducing if s.reduce not in ARG_REDUCTIONS]
                for j, s in reducing:
                    ty = LLVM_TYPES[s.value.dtype]
                    b.line(f"store {ty} {llvm_const(identity(s.reduce, s.value.dtype), ty)}, ptr {self.accs[j][1]}")
                    if j in self.nan_flags:
                        b.line(f"store i8 0, ptr {self.nan_flags[j]}")
                end = b.emit(f"add nsw i64 {jb}, {BLOCK}")
                n = self.row_len if self.row_len is not None else k.shape[last]
                end = b.emit(f"select i1 {b.emit(f'icmp slt i64 {end}, {n}')}, i64 {end}, i64 {n}")
                self._loop(f"{tag}{last}", jb, end, lambda i: self._point(idx + ridx + [i], stores, blocked=True))
                for j, s in reducing:
                    total, blk = self.accs[j]
                    part = b.emit(f"load {LLVM_TYPES[s.value.dtype]}, ptr {blk}")
                    if j in self.nan_flags:
                        part = self._nan_if_flagged(s, j, part)
                    if total_type(s) != LLVM_TYPES[s.value.dtype]:
                        part = b.emit(f"fpext float {part} to double")
                    self._accumulate(s, total, part, flags="", ty=total_type(s))

            outer_reduced(self.nouter, [])
            for j, s in reducing:
                if s.reduce in ARG_REDUCTIONS:
                    total = b.emit(f"load i64, ptr {self.accs[j][1]}")
                else:
                    total = b.emit(f"load {total_type(s)}, ptr {self.accs[j][0]}")
                    if total_type(s) != LLVM_TYPES[s.dtype]:
                        total = b.emit(f"fptrunc double {total} to float")
                        # A fence: x86's instruction selection otherwise folds this rounding into a float16 cast
                        # of the total (``tanh(x.sum(-1))`` of a half ``x``), a double -> half rounding that calls
                        # ``__truncdfhf2`` (not linked in: a call to address 0) and rounds once, not twice as eager.
                        total = b.intrinsic("llvm.arithmetic.fence", "float", total)
                self.acc_values[j] = total
                if s.buffer is not None:
                    self._store(s.buffer, idx, self.acc_values[j], s.dtype)
        # Row stores read only buffers with zero reduced strides, so the outer index alone addresses them.
        self._point(idx, [(j, s) for j, s in enumerate(k.stores) if s.row])



def _dag(exprs):
    """The distinct nodes below ``exprs``, children before parents."""
    seen, order = set(), []

    def visit(e):
        if e not in seen:
            seen.add(e)
            for a in e.args:
                visit(a)
            order.append(e)

    for e in exprs:
        visit(e)
    return order


def _metadata_base(name):
    """The first metadata id of function ``name``. Metadata ids are module-wide, and callers may paste several
    kernels into one module (`llvm_program`), so each function numbers its own from a base of its name: names of up
    to 3 bytes (``k0``...``k99``) map one to one below 2**28, longer ones through a hash into [2**28, 2**32), 16
    ids apart (a kernel uses at most 2 + 3 * MAX_PHASES)."""
    raw = name.encode()
    if len(raw) <= 3:
        return 16 * int.from_bytes(raw.ljust(3, b"\0"), "big")
    return 16 * ((1 << 24) + int(hashlib.sha256(raw).hexdigest()[:8], 16) % ((1 << 28) - (1 << 24)))
