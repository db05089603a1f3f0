"""Column reductions for `llvm_emit`: one kept and one reduced dimension, where the inputs are contiguous along the
kept one and strided along the reduced one (``x.sum(0)``, a bias or layer-norm weight gradient), walk the rows
instead of the columns. The kept range is cut into tiles of `COLUMN_TILE`, and for each tile every row adds into
per-column partials on the stack (a contiguous, vectorized inner loop), `COLUMN_BLOCK` rows at a time, the totals
of float32 sums in double (`llvm_body.total_type`). Walking each column down its stride was 15x slower (1024x128
float32: 239 us against 16 us).

`ColumnReduction` is mixed into `llvm_emit`'s emitter, which provides ``_loop`` and the `llvm_body.BodyEmitter`
methods; `column_layout` says which kernels take this form.

>>> from jitorch.codegen.ir import Buffer, Kernel, Store, load
>>> sums = Kernel((64, 1000), (Buffer("f32", (1, 64)), Buffer("f32", (1, 0))), (Store(1, load(0, "f32"), "sum"),), 1)
>>> column_layout(sums)
True
"""
from __future__ import annotations

from .codeblock import LLVM_TYPES, llvm_const
from .ir import identity
from .ir_params import literal_size, unit_stride
from .llvm_body import total_type

__all__ = ["COLUMN_BLOCK", "COLUMN_TILE", "ColumnReduction", "column_layout"]

COLUMN_TILE = 64  # kept elements per tile of a column reduction: its partials and totals stay in L1
# Rows a column's float32 partial adds before it goes into the double total: each partial is one sequential sum (no
# lanes share it), so blocks are short: on 10^6 rows of 0.1, 512 gave 4e-6 relative error and 32 gives 3.3e-7
# (torch's column sum: 5.5e-7; NumPy's, which adds row after row in float32: 1e-2).
COLUMN_BLOCK = 32


class ColumnReduction:
    """The column-reduction loops of a kernel emitter (see the module notes); ``self.k`` is a `column_layout` kernel."""

    def _column_slots(self):
        """Per reducing store, ``[COLUMN_TILE x T]`` stack arrays: block partials and totals (allocas in the entry
        block, so they are made once, not per tile)."""
        b = self.b
        self.col = {}
        for j, s in enumerate(self.k.stores):
            value_ty, total_ty = LLVM_TYPES[s.value.dtype], total_type(s)
            self.col[j] = (b.emit(f"alloca [{COLUMN_TILE} x {value_ty}]"),
                           b.emit(f"alloca [{COLUMN_TILE} x {total_ty}]"))

    def _column_reduction(self):
        """``for tile in [start, stop): totals = id; for row block: partials = id; rows add; totals += partials``."""
        k, b = self.k, self.b
        rows = k.shape[1]

        def tile(t):
            end = b.emit(f"add nsw i64 {t}, {COLUMN_TILE}")
            end = b.emit(f"select i1 {b.emit(f'icmp slt i64 {end}, %stop')}, i64 {end}, i64 %stop")
            width = b.emit(f"sub nsw i64 {end}, {t}")
            self._column_fill(width, 1, "ct")

            def block(rb):
                self._column_fill(width, 0, "cp")
                stop = b.emit(f"add nsw i64 {rb}, {COLUMN_BLOCK}")
                stop = b.emit(f"select i1 {b.emit(f'icmp slt i64 {stop}, {rows}')}, i64 {stop}, i64 {rows}")
                self._loop("cr", rb, stop,
                           lambda r: self._loop("co", "0", width, lambda o: self._column_point(t, o, r)))
                self._loop("cs", "0", width, lambda o: self._column_merge(o))

            self._loop("cb", "0", str(rows), block, step=COLUMN_BLOCK)
            self._loop("cw", "0", width, lambda o: self._column_write(t, o))

        self._loop("ck", "%start", "%stop", tile, step=COLUMN_TILE)
        b.line("br label %exit")

    def _slot(self, j, which, o):
        s = self.k.stores[j]
        ty = LLVM_TYPES[s.value.dtype] if which == 0 else total_type(s)
        return self.b.emit(f"getelementptr [{COLUMN_TILE} x {ty}], ptr {self.col[j][which]}, i64 0, i64 {o}"), ty

    def _column_fill(self, width, which, label):
        def body(o):
            for j, s in enumerate(self.k.stores):
                slot, ty = self._slot(j, which, o)
                self.b.line(f"store {ty} {llvm_const(identity(s.reduce, s.value.dtype), ty)}, ptr {slot}")
        self._loop(label, "0", width, body)

    def _column_point(self, t, o, r):
        idx = [self.b.emit(f"add nsw i64 {t}, {o}"), r]
        values = {}
        for e in self.k.nodes(self.k.stores):
            values[e] = self._expr(e, [values[a] for a in e.args], idx)
        for j, s in enumerate(self.k.stores):
            self._accumulate(s, self._slot(j, 0, o)[0], values[s.value], flags="")

    def _column_merge(self, o):
        b = self.b
        for j, s in enumerate(self.k.stores):
            part = b.emit(f"load {LLVM_TYPES[s.value.dtype]}, ptr {self._slot(j, 0, o)[0]}")
            slot, ty = self._slot(j, 1, o)
            if ty != LLVM_TYPES[s.value.dtype]:
                part = b.emit(f"fpext float {part} to double")
            self._accumulate(s, slot, part, flags="", ty=ty)

    def _column_write(self, t, o):
        b = self.b
        idx = [b.emit(f"add nsw i64 {t}, {o}"), "0"]
        for j, s in enumerate(self.k.stores):
            slot, ty = self._slot(j, 1, o)
            total = b.emit(f"load {ty}, ptr {slot}")
            if ty != LLVM_TYPES[s.dtype]:
                total = b.emit(f"fptrunc double {total} to float")
            self._store(s.buffer, idx, total, s.dtype)


def column_layout(k):
    """Whether a (collapsed) kernel is a column reduction (see the module notes): one kept and one reduced dim, only
    reducing stores of plain kinds into buffers no load reads, every input contiguous or constant along the kept dim
    and the contiguous ones strided along the reduced one."""
    if len(k.shape) != 2 or k.reduce_axes != 1 or k.phases != 1 or literal_size(k.shape[0], 2) or \
            literal_size(k.shape[1], 2):
        return False
    if not all(s.reduce in ("sum", "prod", "max", "min", "maxnum") and s.buffer is not None and not s.row
               for s in k.stores):
        return False
    written = {s.buffer for s in k.stores}
    loads = {e.value for e in k.nodes() if e.op == "load"}
    if loads & written or not loads:
        return False
    strides = [k.buffers[i].strides for i in loads]
    # Along the kept dim an input is contiguous (walked by the vector loop) or constant (a per-row value such as
    # layer norm's mean, loaded once per row); along the reduced dim a contiguous one would keep the row path.
    return all(st[0] == 0 or (unit_stride(st[0]) and not unit_stride(st[1])) for st in strides) and \
        any(unit_stride(st[0]) for st in strides)
