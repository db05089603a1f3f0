"""Two-pass CUDA reductions for very large inputs: many blocks per output point, then one block per output point.

`cuda_emit`'s ``block_reduce`` gives each output point one block. A full reduction of 2**28 elements would then
run on ONE block of one SM while the rest of the GPU idles. When a kernel has few output points and many reduced
points per point (`split_needed`), it is emitted as two kernels instead (`emit_cuda_split`):

* ``<name>_partial``: the reduced range of each output point is cut into `SPLIT` contiguous chunks; a block
  reduces a chunk (threads striding through it, coalesced) and writes its partial to a workspace,
  ``ws{j}[p * SPLIT + chunk]`` for reducing store ``j``. Pointwise stores of the same pass happen here too.
* ``<name>_final``: one block per output point combines its `SPLIT` partials with the same operation (partial
  sums add, maxima take the max...), then writes the reducing stores and the row stores.

Both kernels take the kernel's buffers, then the workspaces (``ws0, ws1, ...``, one per reducing store, element
type that of the store's value, `SplitReduction.workspaces` gives their sizes); launch contract as in `cuda_emit`
(``blockDim.x`` a multiple of 32, any grid; ``SPLIT`` blocks for the first kernel keep every chunk on its own
block). Only single-pass kernels split: a later pass would need every chunk's result, i.e. a grid-wide barrier.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .cuda_emit import _braces, _Emitter, _helper_name, _size, block_reduce_helper
from .cuda_index import c_int
from .cuda_ops import C_TYPES, c_const, combine, storage_prelude
from .cuda_templates import _check_name
from .ir import collapse, identity

__all__ = ["SPLIT", "SPLIT_MIN", "SPLIT_MAX_OUTPUTS", "SplitReduction", "split_needed", "emit_cuda_split"]

SPLIT = 256  # chunks per output point: enough blocks to fill a large GPU several times over
SPLIT_MIN = 1 << 20  # reduced points per output point from which one block per point is too slow
SPLIT_MAX_OUTPUTS = 64  # with more output points than this, one block per point already fills the GPU


@dataclass(frozen=True)
class SplitReduction:
    """The two sources, their function names, and per reducing store ``(store index, dtype, element count)`` of
    its workspace, in parameter order."""

    partial: str
    final: str
    names: tuple
    workspaces: tuple


def split_needed(kernel):
    """Whether `emit_cuda_split` should be used for ``kernel``: one pass, few output points, huge reductions.

    >>> from jitorch.codegen.ir import Buffer, Kernel, Store, load
    >>> full = lambda n: Kernel((n,), (Buffer("f32", (1,)), Buffer("f32", (0,))), (Store(1, load(0, "f32"), "sum"),), 1)
    >>> split_needed(full(1 << 24)), split_needed(full(1000))
    (True, False)
    """
    k = collapse(kernel)
    if not k.reduce_axes or k.phases != 1:
        return False
    nouter = len(k.outer_shape)
    return _size(k.shape[:nouter]) <= SPLIT_MAX_OUTPUTS and _size(k.shape[nouter:]) >= SPLIT_MIN


def emit_cuda_split(kernel, name="kernel"):
    """`SplitReduction` for ``kernel`` (any single-pass reduction; `split_needed` says when it pays). The first
    kernel's loop over one chunk of output point ``p`` reads, for a float32 sum over 2**24 points::

        const unsigned int lo = c * 65536u;
        const unsigned int hi = lo + 65536u < 16777216u ? lo + 65536u : 16777216u;
        for (unsigned int r = lo + threadIdx.x; r < hi; r += blockDim.x) {
            ...
            acc1 = (acc1 + v1);
        }
        acc1 = jt_block_sum_f32(acc1, partials1);
        if (threadIdx.x == 0u) {
            ws0[p * 256u + c] = acc1;
        }

    >>> from jitorch.codegen.ir import Buffer, Kernel, Store, load
    >>> k = Kernel((1 << 24,), (Buffer("f32", (1,)), Buffer("f32", (0,))), (Store(1, load(0, "f32"), "sum"),), 1)
    >>> s = emit_cuda_split(k, "total")
    >>> s.names, s.workspaces
    (('total_partial', 'total_final'), ((0, 'f32', 256),))
    """
    _check_name(name)
    k = collapse(kernel)
    if not k.reduce_axes or k.phases != 1:
        raise ValueError(f"emit_cuda_split: needs a single-pass reduction, got reduce_axes={k.reduce_axes} "
                         f"and {k.phases} passes")
    nouter = len(k.outer_shape)
    outer_n = _size(k.shape[:nouter])
    reducing = [(j, s) for j, s in enumerate(k.stores) if s.reduce]
    workspaces = tuple((j, s.value.dtype, outer_n * SPLIT) for j, s in reducing)
    names = (f"{name}_partial", f"{name}_final")
    partial = _SplitEmitter(k, names[0], workspaces, final=False).source()
    final = _SplitEmitter(k, names[1], workspaces, final=True).source()
    return SplitReduction(partial, final, names, workspaces)


class _SplitEmitter(_Emitter):
    def __init__(self, kernel, name, workspaces, final):
        super().__init__(kernel, name, "block_reduce")
        self.workspaces, self.final = workspaces, final

    def source(self):
        cb, k = self.cb, self.k
        for line in storage_prelude(k):
            cb.line(line)
        for reduce, dtype in dict.fromkeys((s.reduce, s.value.dtype) for s in k.stores if s.reduce):
            for line in block_reduce_helper(reduce, dtype).splitlines():
                cb.line(line)
            cb.line("")
        what = "second pass: combines the partials" if self.final else f"first pass: {SPLIT} chunks per point"
        cb.line(f"// jitorch split reduction, {what}, {64 if self.index64 else 32}-bit indices; "
                "launch: blockDim.x % 32 == 0, any gridDim.x")
        for line in str(k).splitlines():
            cb.line("// " + line)
        cb.line(f'extern "C" __global__ void {self.name}(')
        stored = set(self.stored) if self.final else {s.buffer for s in k.stores if not s.reduce}
        params = [f"{'' if i in stored else 'const '}{C_TYPES[b.dtype]}* __restrict__ buf{i}"
                  for i, b in enumerate(k.buffers)]
        params += [f"{'const ' if self.final else ''}{C_TYPES[dt]}* __restrict__ ws{n}"
                   for n, (_, dt, _) in enumerate(self.workspaces)]
        with cb.indented():
            for i, p in enumerate(params):
                cb.line(p + (")" if i == len(params) - 1 else ","))
        cb.lines[-1] += " {"
        start = len(cb.lines)
        with cb.indented():
            self._final() if self.final else self._partial()
        cb.lines[start:] = _drop_unused(cb.lines[start:])
        cb.line("}")
        return str(cb) + "\n"

    def _partial(self):
        k, cb = self.k, self.cb
        outer, inner = self.plans
        outer_n, red_n = _size(outer.shape), _size(inner.shape)
        chunk = -(-red_n // SPLIT)
        reducing = [(j, s) for j, s in enumerate(k.stores) if s.reduce]
        for j, s in reducing:
            cb.line(f"__shared__ {C_TYPES[s.value.dtype]} partials{j}[32];")
        ity = self.ity
        with self._grid_stride("c", SPLIT, f"({ity})blockIdx.x", "gridDim.x"):
            with self._grid_stride("p", outer_n, c_int(0, self.index64), "1"):
                for line in outer.c_lines("p"):
                    cb.line(line)
                for j, s in reducing:
                    dt = s.value.dtype
                    cb.line(f"{C_TYPES[dt]} acc{j} = {c_const(identity(s.reduce, dt), dt)};")
                size, step = c_int(chunk, self.index64), c_int(red_n, self.index64)
                cb.line(f"const {ity} lo = c * {size};")
                cb.line(f"const {ity} hi = lo + {size} < {step} ? lo + {size} : {step};")
                with _braces(cb, f"for ({ity} r = lo + threadIdx.x; r < hi; r += blockDim.x)"):
                    for line in inner.c_lines("r"):
                        cb.line(line)
                    points = [(j, s) for j, s in enumerate(k.stores) if not s.row]
                    self._values(lambda b: f"ro{b}", [s for _, s in points])
                    for j, s in points:
                        value = self._name(s.value, "")
                        if s.reduce:
                            cb.line(f"acc{j} = {combine(s.reduce, f'acc{j}', value, s.value.dtype)};")
                        else:
                            cb.line(f"buf{s.buffer}[ro{s.buffer}] = {value};")
                for n, (j, s) in enumerate(reducing):
                    cb.line(f"acc{j} = {_helper_name(s.reduce, s.value.dtype)}(acc{j}, partials{j});")
                    with _braces(cb, "if (threadIdx.x == 0u)"):
                        cb.line(f"ws{n}[p * {c_int(SPLIT, self.index64)} + c] = acc{j};")

    def _final(self):
        k, cb = self.k, self.cb
        outer, _ = self.plans
        outer_n = _size(outer.shape)
        reducing = [(j, s) for j, s in enumerate(k.stores) if s.reduce]
        for j, s in reducing:
            cb.line(f"__shared__ {C_TYPES[s.value.dtype]} partials{j}[32];")
        with self._grid_stride("p", outer_n, f"({self.ity})blockIdx.x", "gridDim.x"):
            for line in outer.c_lines("p"):
                cb.line(line)
            for n, (j, s) in enumerate(reducing):
                dt = s.value.dtype
                cb.line(f"{C_TYPES[dt]} acc{j} = {c_const(identity(s.reduce, dt), dt)};")
                with _braces(cb, f"for (unsigned int c = threadIdx.x; c < {SPLIT}u; c += blockDim.x)"):
                    part = f"ws{n}[p * {c_int(SPLIT, self.index64)} + c]"
                    cb.line(f"acc{j} = {combine(s.reduce, f'acc{j}', part, dt)};")
                cb.line(f"acc{j} = {_helper_name(s.reduce, dt)}(acc{j}, partials{j});")
            with _braces(cb, "if (threadIdx.x == 0u)"):
                for j, s in reducing:
                    cb.line(f"const {C_TYPES[s.value.dtype]} fin{j} = acc{j};")
                    if s.buffer is not None:
                        cb.line(f"buf{s.buffer}[po{s.buffer}] = acc{j};")
                rows = [s for s in k.stores if s.row]
                self._values(lambda b: f"po{b}", rows, "w_")
                for s in rows:
                    cb.line(f"buf{s.buffer}[po{s.buffer}] = {self._name(s.value, 'w_')};")


_CONST = re.compile(r"\s*const [\w ]+? (\w+) = ")


def _drop_unused(lines):
    """Drop ``const T name = ...;`` lines whose name nothing else reads (offsets of buffers one of the two kernels
    does not touch; NVRTC warns about them), repeatedly, since a dropped offset may free the index it used."""
    while True:
        text = "\n".join(lines)
        keep = []
        for line in lines:
            m = _CONST.match(line)
            if m and len(re.findall(rf"\b{m.group(1)}\b", text)) == 1:
                continue
            keep.append(line)
        if len(keep) == len(lines):
            return lines
        lines = keep
