"""Kernel IR -> CUDA C (one ``extern "C" __global__`` function, strides and sizes baked in as constants).

The kernel is collapsed first (`ir.collapse`), like the LLVM backend. Three shapes of kernel come out, `strategy`
names them:

* ``elementwise``: a grid-stride loop over the flat iteration space; each point turns its flat index into one
  offset per buffer (`cuda_index.IndexPlan`), evaluates the DAG once and stores.
* ``block_reduce``: one block per output point (a grid-stride loop over outputs, so any grid size works); the
  threads stride over the reduced points, then warp shuffles and one shared partial per warp combine them.
* ``thread_reduce``: when at most `SMALL_REDUCTION` points are reduced, a block would leave most lanes idle, so
  each thread owns output points and loops over their reduced points serially.

Index arithmetic is ``unsigned int`` when the iteration size and every buffer offset stay below 2**31, else
``long long``. Launch contract: ``blockDim.x`` a multiple of 32 (at most 1024) and ``gridDim.x * blockDim.x <=
2**31``; any grid covers the work. Parameters are ``buf0, buf1, ...`` in IR order (as in `llvm_emit`), ``const``
when the kernel never stores to them, all ``__restrict__``: the caller passes distinct, non-overlapping buffers.
"""
from __future__ import annotations

import re
from contextlib import contextmanager

from .codeblock import CodeBlock
from .cuda_index import IndexPlan, c_int, index64_needed
from .cuda_ops import C_TYPES, UnsupportedPrimitive, c_const, c_op, combine, storage_prelude
from .cuda_templates import _check_name
from .ir import ARG_REDUCTIONS, collapse, identity

__all__ = ["SMALL_REDUCTION", "UnsupportedPrimitive", "emit_cuda", "strategy", "block_reduce_helper", "index_plans"]

SMALL_REDUCTION = 64


def strategy(kernel):
    """``"elementwise"``, ``"block_reduce"`` or ``"thread_reduce"`` for ``kernel`` (after collapsing).

    >>> from jitorch.codegen.ir import Buffer, Kernel, Store, load
    >>> row_sum = lambda n: Kernel((8, n), (Buffer("f32", (n, 1)), Buffer("f32", (1, 0))),
    ...                            (Store(1, load(0, "f32"), "sum"),), 1)
    >>> strategy(row_sum(1000)), strategy(row_sum(16))
    ('block_reduce', 'thread_reduce')
    """
    k = collapse(kernel)
    if not k.reduce_axes:
        return "elementwise"
    return "block_reduce" if _size(k.shape[len(k.outer_shape):]) > SMALL_REDUCTION else "thread_reduce"


def emit_cuda(kernel, name="kernel"):
    """CUDA C source defining ``extern "C" __global__ void name(buf0, buf1, ...)`` for ``kernel``.

    Raises `UnsupportedPrimitive` naming a primitive the backend cannot lower. A broadcast add (the first input
    repeats along dimension 1, so the flat index is split into two coordinates; NVCC folds ``o1``/``o2`` back
    to ``i``):

    >>> from jitorch.codegen.ir import Buffer, Kernel, Store, load, op
    >>> k = Kernel((3, 5), (Buffer("f32", (1, 0)), Buffer("f32", (5, 1)), Buffer("f32", (5, 1))),
    ...            (Store(2, op("add", load(0, "f32"), load(1, "f32"))),))
    >>> print(emit_cuda(k, "badd"), end="")
    // jitorch elementwise kernel, 32-bit indices; launch: blockDim.x % 32 == 0, any gridDim.x
    // kernel (3, 5) reduce=0
    //   buf0 f32 strides=(1, 0) offset=0
    //   buf1 f32 strides=(5, 1) offset=0
    //   buf2 f32 strides=(5, 1) offset=0
    //   %0 = load buf0
    //   %1 = load buf1
    //   %2 = add %0 %1
    //   store buf2 %2
    extern "C" __global__ void badd(
        const float* __restrict__ buf0,
        const float* __restrict__ buf1,
        float* __restrict__ buf2) {
        const unsigned int stride = (unsigned int)blockDim.x * gridDim.x;
        for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 15u; i += stride) {
            const unsigned int q1 = i / 5u;
            const unsigned int i1 = i - q1 * 5u;
            const unsigned int o0 = q1;
            const unsigned int o1 = q1 * 5u + i1;
            const unsigned int o2 = q1 * 5u + i1;
            const float v0 = buf0[o0];
            const float v1 = buf1[o1];
            const float v2 = (v0 + v1);
            buf2[o2] = v2;
        }
    }
    """
    _check_name(name)
    return _Emitter(collapse(kernel), name, strategy(kernel)).source()


def block_reduce_helper(reduce, dtype):
    """The device function that reduces one value per thread across a block, e.g. for ``sum`` over f32:

    >>> print(block_reduce_helper("sum", "f32"), end="")
    // Block-wide sum of float: warp shuffles, then one shared partial per warp folded by warp 0. The result is
    // valid in thread 0; the trailing barrier lets the caller reuse `partials` (32 entries) right away.
    static __device__ __forceinline__ float jt_block_sum_f32(float v, float* partials) {
        const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
        for (int offset = 16; offset > 0; offset >>= 1) {
            const float other = __shfl_down_sync(0xffffffffu, v, offset);
            v = (v + other);
        }
        if (lane == 0u) {
            partials[warp] = v;
        }
        __syncthreads();
        if (warp == 0u) {
            v = lane < (blockDim.x >> 5) ? partials[lane] : 0.0f;
            for (int offset = 16; offset > 0; offset >>= 1) {
                const float other = __shfl_down_sync(0xffffffffu, v, offset);
                v = (v + other);
            }
        }
        __syncthreads();
        return v;
    }
    """
    ct, cb = C_TYPES[dtype], CodeBlock("    ")
    # __shfl_down_sync has no bool overload, so bools travel as int
    shuffled = "__shfl_down_sync(0xffffffffu, (int)v, offset) != 0" if dtype == "bool" else \
        "__shfl_down_sync(0xffffffffu, v, offset)"

    def warp_reduce():
        with _braces(cb, "for (int offset = 16; offset > 0; offset >>= 1)"):
            cb.line(f"const {ct} other = {shuffled};")
            cb.line(f"v = {combine(reduce, 'v', 'other', dtype)};")

    cb.line(f"// Block-wide {reduce} of {ct}: warp shuffles, then one shared partial per warp folded by warp 0. "
            "The result is")
    cb.line("// valid in thread 0; the trailing barrier lets the caller reuse `partials` (32 entries) right away.")
    with _braces(cb, f"static __device__ __forceinline__ {ct} {_helper_name(reduce, dtype)}({ct} v, {ct}* partials)"):
        cb.line("const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;")
        warp_reduce()
        with _braces(cb, "if (lane == 0u)"):
            cb.line("partials[warp] = v;")
        cb.line("__syncthreads();")
        with _braces(cb, "if (warp == 0u)"):
            cb.line(f"v = lane < (blockDim.x >> 5) ? partials[lane] : {c_const(identity(reduce, dtype), dtype)};")
            warp_reduce()
        cb.line("__syncthreads();")
        cb.line("return v;")
    return str(cb) + "\n"


def index_plans(kernel):
    """The `IndexPlan` objects `emit_cuda` renders for ``kernel``: ``(plan,)`` over the flat iteration space of an
    elementwise kernel, ``(outer, inner)`` for a reduction, where ``outer`` walks the output points (variable
    ``p``, offsets ``po{b}``) and ``inner`` the reduced points (variable ``r``) starting from ``po{b}``.

    >>> from jitorch.codegen.ir import Buffer, Kernel, Store, load
    >>> k = Kernel((4, 6), (Buffer("f32", (1, 4)), Buffer("f32", (1, 0))), (Store(1, load(0, "f32"), "sum"),), 1)
    >>> [(p.shape, p.strides, p.offsets) for p in index_plans(k)]
    [((4,), ((1,), (1,)), (0, 0)), ((6,), ((4,), (0,)), ('po0', 'po1'))]
    """
    k = collapse(kernel)
    bufs = k.buffers
    loaded = sorted({e.value for e in k.nodes() if e.op == "load"})
    stored = sorted({s.buffer for s in k.stores if s.buffer is not None})
    # buffers a reduced loop writes point by point (a softmax's output) need inner offsets too
    in_loop = sorted({s.buffer for s in k.stores if s.buffer is not None and not s.reduce and not s.row}
                     if k.reduce_axes else set())
    index64 = index64_needed(k.shape, [b.strides for b in bufs], [b.offset for b in bufs])

    def plan(dims, buffers, prefix, offsets):
        return IndexPlan(tuple(k.shape[d] for d in dims), tuple(tuple(b.strides[d] for d in dims) for b in bufs),
                         tuple(offsets), tuple(buffers), index64, prefix)

    nouter = len(k.outer_shape)
    if not k.reduce_axes:
        return (plan(range(nouter), sorted(set(loaded) | set(stored)), "", [b.offset for b in bufs]),)
    # an empty reduction reads nothing, and unused offsets would draw NVRTC warning 177
    read = loaded if _size(k.shape[nouter:]) else []
    return (plan(range(nouter), sorted(set(read) | set(stored)), "p", [b.offset for b in bufs]),
            plan(range(nouter, len(k.shape)), sorted(set(loaded) | set(in_loop)), "r",
                 [f"po{b}" for b in range(len(bufs))]))


def _size(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _helper_name(reduce, dtype):
    return f"jt_block_{reduce}_{dtype}"


@contextmanager
def _braces(cb, header):
    cb.line(header + " {")
    with cb.indented():
        yield
    cb.line("}")


class _Emitter:
    def __init__(self, kernel, name, kind):
        arg = [s.reduce for s in kernel.stores if s.reduce in ARG_REDUCTIONS]
        if arg:  # a block combine would need (value, index) pairs through the shuffles
            raise UnsupportedPrimitive(f"cuda backend: {arg[0]} reductions are not supported; run the row eagerly "
                                       "(CuPy's argmax)")
        self.k, self.name, self.kind = kernel, name, kind
        self.nodes = kernel.nodes()
        self.names = {e: f"v{i}" for i, e in enumerate(self.nodes)}
        self.stored = sorted({s.buffer for s in kernel.stores if s.buffer is not None})
        self.plans = index_plans(kernel)
        self.index64 = self.plans[0].index64
        self.ity = "long long" if self.index64 else "unsigned int"
        self.cb = CodeBlock("    ")

    def source(self):
        cb, k = self.cb, self.k
        reducing = [(s.reduce, s.value.dtype) for s in k.stores if s.reduce]
        for line in storage_prelude(k):
            cb.line(line)
        if self.kind == "block_reduce":
            for reduce, dtype in dict.fromkeys(reducing):  # one helper per distinct (reduction, dtype)
                for line in block_reduce_helper(reduce, dtype).splitlines():
                    cb.line(line)
                cb.line("")
        cb.line(f"// jitorch {self.kind.replace('_', ' ')} kernel, {64 if self.index64 else 32}-bit indices; "
                "launch: blockDim.x % 32 == 0, any gridDim.x")
        for line in str(k).splitlines():
            cb.line("// " + line)
        cb.line(f'extern "C" __global__ void {self.name}(')
        with cb.indented():
            params = [f"{'' if i in self.stored else 'const '}{C_TYPES[b.dtype]}* __restrict__ buf{i}"
                      for i, b in enumerate(k.buffers)]
            for i, p in enumerate(params):
                cb.line(p + (")" if i == len(params) - 1 else ","))
        cb.lines[-1] += " {"
        with cb.indented():
            if self.kind == "elementwise":
                self._elementwise()
            else:
                self._reduction()
        cb.line("}")
        return str(cb) + "\n"

    def _grid_stride(self, var, size, first, step):
        return _braces(self.cb, f"for ({self.ity} {var} = {first}; {var} < {c_int(size, self.index64)}; "
                                f"{var} += {step})")

    def _thread_index(self):
        self.cb.line(f"const {self.ity} stride = ({self.ity})blockDim.x * gridDim.x;")
        return f"({self.ity})blockIdx.x * blockDim.x + threadIdx.x"

    def _elementwise(self):
        k, cb = self.k, self.cb
        plan, = self.plans
        n = _size(k.shape)
        if n == 0:
            cb.line("// empty iteration space: nothing to do")
            return
        with self._grid_stride("i", n, self._thread_index(), "stride"):
            for line in plan.c_lines("i"):
                cb.line(line)
            self._values(lambda b: f"o{b}")
            for s in k.stores:
                cb.line(f"buf{s.buffer}[o{s.buffer}] = {self.names[s.value]};")

    def _reduction(self):
        """Per output point, one loop over the reduced points per phase; between phases the block's totals are
        broadcast through shared memory (``fin{j}``), so later phases and row stores read final statistics."""
        k, cb = self.k, self.cb
        outer, inner = self.plans
        outer_n, red_n = _size(outer.shape), _size(inner.shape)
        if outer_n == 0:
            cb.line("// no output points: nothing to do")
            return
        reducing = [(j, s) for j, s in enumerate(k.stores) if s.reduce]
        block = self.kind == "block_reduce"
        if block:
            for j, s in reducing:
                cb.line(f"__shared__ {C_TYPES[s.value.dtype]} partials{j}[32];")
                if k.phases > 1 or any(st.row for st in k.stores):
                    cb.line(f"__shared__ {C_TYPES[s.value.dtype]} bcast{j};")
            loop = self._grid_stride("p", outer_n, f"({self.ity})blockIdx.x", "gridDim.x")
        else:
            loop = self._grid_stride("p", outer_n, self._thread_index(), "stride")
        with loop:
            for line in outer.c_lines("p"):
                cb.line(line)
            for phase in range(k.phases):
                self._phase(phase, inner, red_n, block)
            rows = [s for s in k.stores if s.row]
            if rows:
                with (_braces(cb, "if (threadIdx.x == 0u)") if block else _nothing()):
                    self._values(lambda b: f"po{b}", rows, f"w{k.phases}_")
                    for s in rows:
                        cb.line(f"buf{s.buffer}[po{s.buffer}] = {self._name(s.value, f'w{k.phases}_')};")

    def _phase(self, phase, inner, red_n, block):
        k, cb = self.k, self.cb
        stores = [(j, s) for j, s in enumerate(k.stores) if s.phase == phase and not s.row]
        reducing = [(j, s) for j, s in stores if s.reduce]
        tag = f"w{phase}_" if phase else ""  # phase 0 keeps the single-pass kernels' names
        for j, s in reducing:
            dt = s.value.dtype
            cb.line(f"{C_TYPES[dt]} acc{j} = {c_const(identity(s.reduce, dt), dt)};")
        first, step = ("threadIdx.x", "blockDim.x") if block else (c_int(0, self.index64), "1")
        if red_n and stores:  # an empty reduction leaves the identities (an empty loop draws NVRTC warning 186)
            used = {e.value for e in k.nodes([s for _, s in stores]) if e.op == "load"}
            used |= {s.buffer for _, s in stores if not s.reduce}
            with self._grid_stride("r", red_n, first, step):
                for line in inner.c_lines("r"):
                    m = re.match(r"const [\w ]+ ro(\d+) = ", line)
                    if m is None or int(m.group(1)) in used:  # a phase may touch fewer buffers than the kernel
                        cb.line(line)
                self._values(lambda b: f"ro{b}", [s for _, s in stores], tag)
                for j, s in stores:
                    value = self._name(s.value, tag)
                    if s.reduce:
                        cb.line(f"acc{j} = {combine(s.reduce, f'acc{j}', value, s.value.dtype)};")
                    else:
                        cb.line(f"buf{s.buffer}[ro{s.buffer}] = {value};")
        broadcast = k.phases > 1 or any(st.row for st in k.stores)
        for j, s in reducing:
            if block:
                cb.line(f"acc{j} = {_helper_name(s.reduce, s.value.dtype)}(acc{j}, partials{j});")
                if broadcast:
                    with _braces(cb, "if (threadIdx.x == 0u)"):
                        cb.line(f"bcast{j} = acc{j};")
        if block and broadcast and reducing:
            cb.line("__syncthreads();")
        for j, s in reducing:
            ct = C_TYPES[s.value.dtype]
            if broadcast:
                cb.line(f"const {ct} fin{j} = {'bcast' if block else 'acc'}{j};")
            if s.buffer is not None:
                with (_braces(cb, "if (threadIdx.x == 0u)") if block else _nothing()):
                    cb.line(f"buf{s.buffer}[po{s.buffer}] = acc{j};")

    def _name(self, e, tag):
        return f"{tag}{self.names[e]}"

    def _values(self, offset, stores=None, tag=""):
        """One ``const`` per DAG node of ``stores``, children first (shared subexpressions are computed once);
        names carry ``tag`` so that each phase's values are distinct variables."""
        nodes = self.nodes if stores is None else self.k.nodes(stores)
        for e in nodes:
            ct, name = C_TYPES[e.dtype], tag + self.names[e]
            if e.op == "load":
                rhs = f"buf{e.value}[{offset(e.value)}]"
            elif e.op == "const":
                rhs = c_const(e.value, e.dtype)
            elif e.op == "acc":
                rhs = f"fin{e.value}"
            else:
                if not e.args:
                    raise UnsupportedPrimitive(f"cuda backend: primitive {e.op!r} is not supported")
                arg_dtype = e.args[1].dtype if e.op == "where" else e.args[0].dtype
                rhs = c_op(e.op, [tag + self.names[a] for a in e.args], arg_dtype, e.dtype)
            self.cb.line(f"const {ct} {name} = {rhs};")


@contextmanager
def _nothing():
    yield
