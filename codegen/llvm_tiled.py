"""Transposed operands for `llvm_emit`: a pointwise kernel whose output runs contiguously along the last dimension
while an input runs contiguously along another dim ``e`` (``x.t().contiguous()``, attention's head merge,
``a + b.T``) walks those two dims in square tiles of `TILE`, each cut into micro tiles of `MICRO` x `MICRO`.

The plain loop nest walks the last dimension with the input's large stride: every load of a 1024x1024 float32
transpose misses L1 (3.2 ns an element against 0.09 for a copy), and LLVM can only load one element at a time.
In a full micro tile each transposed operand is read as `MICRO` vectors along ``e`` (one per output column),
transposed in registers by three rounds of shuffles (`transpose_masks`) and kept in a stack tile that the body
then reads along the output's contiguous dim, so the body's loop vectorizes as a plain one (for a copy, LLVM
forwards the shuffled vectors straight to the stores). Micro tiles cut by an edge run the body element by element.

`TransposedTiles` is mixed into `llvm_emit`'s emitter, which provides ``_loop`` and the `llvm_body.BodyEmitter`
methods; `transposed_dims` says which kernels take this form (their dims ``(e, last)``).

>>> from jitorch.codegen.ir import Buffer, Kernel, Store, load
>>> t = Kernel((64, 32), (Buffer("f32", (32, 1)), Buffer("f32", (1, 64))), (Store(0, load(1, "f32")),))
>>> transposed_dims(t)
(0, 1)
"""
from __future__ import annotations

from .llvm_body import _MEM_TYPES
from .ir_params import Sym, unit_stride

__all__ = ["MICRO", "TILE", "TransposedTiles", "transposed_dims", "transpose_masks"]

# The side of a square tile (its input lines stay in L1 while it is written); 32 and 128 measured within noise of it.
TILE = 64
# The side of a micro tile, transposed in registers: vectors of one cache line for 4- and 8-byte elements (16 x 16
# float32 tiles ran a 1024x1024 transpose 1.3x as fast as 8 x 8 ones: full lines written), 16 for narrower ones.
MICRO = {1: 16, 2: 16, 4: 16, 8: 8}
_SIZES = {"i8": 1, "i16": 2, "half": 2, "i32": 4, "float": 4, "i64": 8, "double": 8}
# Innermost strides that are a strided walk, not a transposed operand (`ir_params.INNER_LITERAL_STRIDES`).
_NEAR = (0, 1, -1, 2, -2)


def transposed_dims(kernel):
    """``(e, last)`` where pointwise ``kernel`` (collapsed, or a template) writes every output with stride 1 on its
    last dim and loads a buffer with stride +-1 on dim ``e`` and a large one on the last dim (None otherwise).

    Only literal strides decide (a template's 0 and +-1 stay literal), so a kernel and its template agree. Kernels
    with sin or cos keep their versioned loops (`llvm_emit._Emitter._versioned`).
    """
    k = kernel
    last = len(k.shape) - 1
    if k.reduce_axes or last < 1 or any(e.op in ("sin", "cos") for e in k.nodes()):
        return None
    if not all(s.buffer is not None and k.buffers[s.buffer].strides[last] == 1 for s in k.stores):
        return None
    for e in k.nodes():
        if e.op != "load":
            continue
        strides = k.buffers[e.value].strides
        inner = strides[last]
        if not isinstance(inner, Sym) and inner in _NEAR:
            continue
        for d in range(last - 1, -1, -1):
            if unit_stride(strides[d]):
                return d, last
    return None


def transpose_masks(n):
    """The shuffle masks of an ``n x n`` in-register transpose, ``n`` a power of two: per round (bit ``s`` of the
    row and column numbers swapped), the masks giving rows ``r`` and ``r | s`` from the old rows ``r`` and ``r | s``
    (a mask's entries >= n pick from the second vector).

    >>> transpose_masks(2)
    [(1, [0, 2], [1, 3])]
    """
    rounds, s = [], 1
    while s < n:
        low = [c if not c & s else n + c - s for c in range(n)]
        high = [c + s if not c & s else n + c for c in range(n)]
        rounds.append((s, low, high))
        s *= 2
    return rounds


def _transposed_loads(kernel, dims):
    """The buffers a full micro tile reads through its stack tile: stride 1 along ``e``, a large one along the last
    dim (a stride of -1 along ``e`` keeps its element loads)."""
    e, last = dims
    found = []
    for node in kernel.nodes():
        strides = kernel.buffers[node.value].strides if node.op == "load" else None
        if strides is not None and node.value not in found and not isinstance(strides[e], Sym) and strides[e] == 1 \
                and (isinstance(strides[last], Sym) or strides[last] not in _NEAR):
            found.append(node.value)
    return found


class TransposedTiles:
    """The tiled loops of a kernel emitter (see the module notes); ``self.tiled`` is `transposed_dims` of ``self.k``."""

    stack_at = None  # while a full micro tile's body is emitted: the index of its point in the stack tiles

    def _tile_slots(self):
        """A ``[micro * micro]`` stack tile per transposed buffer (allocas in the entry block, made once); ``micro``:
        the `MICRO` side of the widest of their elements."""
        found = _transposed_loads(self.k, self.tiled)
        self.micro = min((MICRO[_SIZES[_MEM_TYPES[self.k.buffers[buf].dtype]]] for buf in found), default=MICRO[8])
        self.stack = {buf: self.b.emit(f"alloca [{self.micro ** 2} x {_MEM_TYPES[self.k.buffers[buf].dtype]}], "
                                       "align 64") for buf in found}

    def _address(self, buf, idx):
        if self.stack_at is not None and buf in self.stack:
            ty = _MEM_TYPES[self.k.buffers[buf].dtype]
            return self.b.emit(f"getelementptr {ty}, ptr {self.stack[buf]}, i64 {self.stack_at}")
        return super()._address(buf, idx)

    def _tiles(self, idx):
        """Dims ``e..last`` of the nest (``idx``: the indices of the dims before ``e``): tiles of ``e``, the dims
        between, tiles of the last dim, then micro tiles. For a 2-D float32 transpose it emits (abridged)::

            u1.body:
              %t13 = add nsw i64 %u0.i, 16
              ...
              %t21 = and i1 %t16, %t20
              br i1 %t21, label %u1.full, label %u1.edge
            u1.full:
              %t22 = mul nsw i64 %u1.i, %q3
              %t23 = add nsw i64 %u0.i, %t22
              %t24 = getelementptr float, ptr %buf1, i64 %t23
              %t25 = load <16 x float>, ptr %t24, align 4
              ...
              %t101 = shufflevector <16 x float> %t25, <16 x float> %t30, <16 x i32> <i32 0, i32 16, i32 2, ...>
        """
        k, b = self.k, self.b
        e, last = self.tiled

        def clipped(lo, step, hi):
            end = b.emit(f"add nsw i64 {lo}, {step}")
            fits = b.emit(f"icmp slt i64 {end}, {hi}")
            return b.emit(f"select i1 {fits}, i64 {end}, i64 {hi}"), b.emit(f"icmp sle i64 {end}, {hi}")

        def middle(d, mid, i0, i1):
            if d < last:
                return self._loop(f"d{d}", "0", str(k.shape[d]), lambda i: middle(d + 1, mid + [i], i0, i1))
            n = str(k.shape[last])

            def tile(j0):
                j1 = clipped(j0, TILE, n)[0]
                self._loop(f"u{e}", i0, i1, lambda ii: self._loop(
                    f"u{last}", j0, j1, lambda jj: micro(mid, ii, i1, jj, j1), step=self.micro), step=self.micro)

            self._loop(f"t{last}", "0", n, tile, step=TILE)

        def micro(mid, ii, i1, jj, j1):
            ie, full_i = clipped(ii, self.micro, i1)
            je, full_j = clipped(jj, self.micro, j1)
            b.line(f"br i1 {b.emit(f'and i1 {full_i}, {full_j}')}, label %u{last}.full, label %u{last}.edge")
            b.label(f"u{last}.full")
            self._full_micro(idx, mid, ii, jj)
            b.line(f"br label %u{last}.join")
            b.label(f"u{last}.edge")
            self._loop(f"d{e}", ii, ie, lambda i: self._loop(
                f"d{last}", jj, je, lambda j: self._point(idx + [i] + mid + [j])))
            b.line(f"br label %u{last}.join")
            b.label(f"u{last}.join")

        lo, hi = ("%start", "%stop") if e == 0 else ("0", str(k.shape[e]))
        self._loop(f"t{e}", lo, hi, lambda i0: middle(e + 1, [], i0, clipped(i0, TILE, hi)[0]), step=TILE)

    def _full_micro(self, idx, mid, ii, jj):
        """A full micro tile at ``(ii, jj)``: each transposed buffer's `MICRO` vectors along ``e`` shuffled into its
        stack tile (row ``c`` of the tile: the elements of point ``ii + c`` along the last dim), then the body at
        each point reading them from there."""
        b, n = self.b, self.micro
        e, last = self.tiled
        for buf, tile in self.stack.items():
            ty = _MEM_TYPES[self.k.buffers[buf].dtype]
            vec, size = f"<{n} x {ty}>", _SIZES[ty]
            rows = []
            for r in range(n):
                j = jj if not r else b.emit(f"add nsw i64 {jj}, {r}")
                rows.append(b.emit(f"load {vec}, ptr {super()._address(buf, idx + [ii] + mid + [j])}, align {size}"))
            for s, low, high in transpose_masks(n):
                for r in range(n):
                    if not r & s:
                        pair = f"{vec} {rows[r]}, {vec} {rows[r | s]}"
                        rows[r], rows[r | s] = (b.emit(f"shufflevector {pair}, <{n} x i32> <"
                                                       + ", ".join(f"i32 {m}" for m in mask) + ">")
                                                for mask in (low, high))
            for c in range(n):
                at = b.emit(f"getelementptr {ty}, ptr {tile}, i64 {c * n}")
                b.line(f"store {vec} {rows[c]}, ptr {at}, align {size}")

        def point(c, r):
            i, j = b.emit(f"add nsw i64 {ii}, {c}"), b.emit(f"add nsw i64 {jj}, {r}")
            self.stack_at = b.emit(f"add nsw i64 {b.emit(f'mul nsw i64 {c}, {n}')}, {r}")
            self._point(idx + [i] + mid + [j])
            self.stack_at = None

        self._loop(f"m{e}", "0", str(n), lambda c: self._loop(f"m{last}", "0", str(n), lambda r: point(c, r)))
