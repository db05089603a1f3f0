"""A vectorized twin of `cuda_emit`'s elementwise kernel: 16-byte loads and stores for contiguous 4-byte buffers.

A contiguous elementwise kernel (after `ir.collapse`: one dimension, every buffer walked with stride 1 or broadcast
with stride 0, no offset) over float32/int32 data issues one 4-byte memory instruction per element per buffer.
`emit_cuda_vector` emits ``<name>_v4``, where each thread moves four consecutive elements of every stride-1 buffer
with one ``float4``/``int4`` access, computes the four lanes, and stores four results at once; the last ``n % 4``
elements take a scalar loop. The caller launches it only when every buffer pointer is 16-byte aligned (fresh
allocations are; a view such as ``x[1:]`` is not) and the scalar kernel otherwise.

Inside the vector loop each stride-1 buffer name is shadowed by a pointer to its loaded (or to-be-stored) vector, so
the lane values come from `cuda_emit`'s own per-node code with lane ``c`` read as ``buf<b>[c]`` (a constant index
into a local vector: a register, not memory). Launch contract as `cuda_emit`: ``blockDim.x`` a multiple of 32 and
``gridDim.x * blockDim.x <= 2**31``.

>>> from jitorch.codegen.ir import Buffer, Kernel, Store, load, op
>>> k = Kernel((1 << 20,), (Buffer("f32", (1,)), Buffer("f32", (0,)), Buffer("f32", (1,))),
...            (Store(2, op("add", load(0, "f32"), load(1, "f32"))),))
>>> vectorizable(k), vectorizable(Kernel((10,), k.buffers, k.stores))
(True, False)
>>> src = emit_cuda_vector(k, "add_v4")
>>> print(src[src.index("    for"):src.index("    // the last")], end="")
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 262144u; i += stride) {
        const float4 in0 = reinterpret_cast<const float4*>(buf0)[i];
        float4 out2;
        {
            const float* buf0 = reinterpret_cast<const float*>(&in0);
            float* buf2 = reinterpret_cast<float*>(&out2);
            const float x0_v0 = buf0[0];
            const float x0_v1 = buf1[0];
            const float x0_v2 = (x0_v0 + x0_v1);
            buf2[0] = x0_v2;
            const float x1_v0 = buf0[1];
            const float x1_v1 = buf1[0];
            const float x1_v2 = (x1_v0 + x1_v1);
            buf2[1] = x1_v2;
            const float x2_v0 = buf0[2];
            const float x2_v1 = buf1[0];
            const float x2_v2 = (x2_v0 + x2_v1);
            buf2[2] = x2_v2;
            const float x3_v0 = buf0[3];
            const float x3_v1 = buf1[0];
            const float x3_v2 = (x3_v0 + x3_v1);
            buf2[3] = x3_v2;
        }
        reinterpret_cast<float4*>(buf2)[i] = out2;
    }
"""
from __future__ import annotations

from .cuda_emit import _Emitter, _size
from .cuda_index import c_int
from .cuda_templates import _check_name
from .ir import collapse

__all__ = ["VECTOR_MIN", "VECTOR_TYPES", "vectorizable", "vector_buffers", "emit_cuda_vector"]

VECTOR_MIN = 1 << 12  # below this a kernel is launch-bound: one more compiled variant would not pay
VECTOR_TYPES = {"f32": ("float", "float4"), "i32": ("int", "int4")}


def vector_buffers(kernel):
    """The buffers a vectorized kernel moves four elements at a time (the stride-1 ones), after collapsing."""
    k = collapse(kernel)
    return tuple(i for i, b in enumerate(k.buffers) if b.strides == (1,))


def vectorizable(kernel):
    """Whether `emit_cuda_vector` applies: elementwise, one collapsed dimension of at least `VECTOR_MIN` points
    (32-bit indices), every buffer contiguous (stride 1, of a 4-byte type) or broadcast (stride 0), no offsets."""
    k = collapse(kernel)
    if k.reduce_axes or len(k.shape) != 1 or not VECTOR_MIN <= k.shape[0] < 2**31:
        return False
    ok = all(b.offset == 0 and (b.strides == (0,) or (b.strides == (1,) and b.dtype in VECTOR_TYPES))
             for b in k.buffers)
    stored = {s.buffer for s in k.stores}
    return ok and all(k.buffers[b].strides == (1,) for b in stored) and bool(vector_buffers(kernel))


def emit_cuda_vector(kernel, name):
    """CUDA C defining ``extern "C" __global__ void name(buf0, buf1, ...)``: the parameters of `cuda_emit.emit_cuda`
    for the same kernel, four elements per thread and iteration (see the module docstring for the loop)."""
    _check_name(name)
    if not vectorizable(kernel):
        raise ValueError("emit_cuda_vector: the kernel is not a contiguous 4-byte elementwise kernel")
    return _VectorEmitter(collapse(kernel), name, "elementwise").source()


class _VectorEmitter(_Emitter):
    def _elementwise(self):
        k, cb = self.k, self.cb
        n = _size(k.shape)
        vec = [i for i, b in enumerate(k.buffers) if b.strides == (1,)]
        loaded = sorted({e.value for e in k.nodes() if e.op == "load"} & set(vec))
        first = self._thread_index()
        # The header says "elementwise kernel"; say how this one moves its data.
        cb.line("// vectorized: 16-byte accesses of the stride-1 buffers; launch only with 16-byte aligned pointers")
        with self._grid_stride("i", n // 4, first, "stride"):
            for b in loaded:
                scalar, vector = VECTOR_TYPES[k.buffers[b].dtype]
                cb.line(f"const {vector} in{b} = reinterpret_cast<const {vector}*>(buf{b})[i];")
            for b in self.stored:
                cb.line(f"{VECTOR_TYPES[k.buffers[b].dtype][1]} out{b};")
            cb.line("{")
            with cb.indented():
                for b in loaded:
                    scalar = VECTOR_TYPES[k.buffers[b].dtype][0]
                    cb.line(f"const {scalar}* buf{b} = reinterpret_cast<const {scalar}*>(&in{b});")
                for b in self.stored:
                    scalar = VECTOR_TYPES[k.buffers[b].dtype][0]
                    cb.line(f"{scalar}* buf{b} = reinterpret_cast<{scalar}*>(&out{b});")
                for lane in range(4):
                    self._values(lambda b, lane=lane: str(lane) if b in vec else "0", tag=f"x{lane}_")
                    for s in k.stores:
                        cb.line(f"buf{s.buffer}[{lane}] = {self._name(s.value, f'x{lane}_')};")
            cb.line("}")
            for b in self.stored:
                cb.line(f"reinterpret_cast<{VECTOR_TYPES[k.buffers[b].dtype][1]}*>(buf{b})[i] = out{b};")
        cb.line(f"// the last {n % 4} elements, one per thread")
        tail = f"{c_int(n - n % 4, False)} + ({first})"
        with self._grid_stride("i", n, tail, "stride"):
            self._values(lambda b: "i" if b in vec else "0")
            for s in k.stores:
                cb.line(f"buf{s.buffer}[i] = {self.names[s.value]};")
