"""CUDA C source for jitorch's canonical kernels: elementwise maps and sum/max/min reductions.

Each generator returns one self-contained source (no includes, so it also compiles under NVRTC's ``--minimal``)
whose kernels are ``extern "C"`` so their symbols keep their names. The docstrings show the exact text emitted;
running them as doctests keeps them honest, so they double as golden snapshots.

Launch contract shared by every kernel here: ``blockDim.x`` is a multiple of 32 (at most 1024), and for the 32-bit
variants ``gridDim.x * blockDim.x <= 2**31``, so an unsigned 32-bit grid-stride index cannot wrap before the
``i < n`` test fails. Inputs of 2**31 elements or more need the 64-bit variant (`needs_index64`).
"""
from __future__ import annotations

import re
from string import Template
from typing import Sequence

__all__ = ["FLOAT_TYPES", "REDUCE_OPS", "needs_index64", "index_type", "elementwise_kernel", "block_reduce_kernel",
           "two_pass_reduce_kernels", "two_pass_plan"]

FLOAT_TYPES = ("float", "double")
REDUCE_OPS = ("sum", "max", "min")
_C_TYPES = ("float", "double", "bool", "int", "long long", "unsigned int")

# Infinities by bit pattern: INFINITY lives in <math.h>, which NVRTC does not provide without includes.
_IDENTITY = {
    ("sum", "float"): "0.0f", ("sum", "double"): "0.0",
    ("max", "float"): "__int_as_float(0xff800000)", ("max", "double"): "__longlong_as_double(0xfff0000000000000ULL)",
    ("min", "float"): "__int_as_float(0x7f800000)", ("min", "double"): "__longlong_as_double(0x7ff0000000000000ULL)",
}
# max/min return a NaN operand, as numpy and torch do; fmaxf/fminf would silently drop it.
_COMBINE = {"sum": "a + b", "max": "(a != a || a > b) ? a : b", "min": "(a != a || a < b) ? a : b"}


def needs_index64(n: int) -> bool:
    """Whether ``n`` elements need 64-bit index arithmetic (a 32-bit signed offset stops at 2**31 - 1).

    >>> needs_index64(2**31 - 1), needs_index64(2**31)
    (False, True)
    """
    return n >= 2**31


def index_type(index64: bool) -> str:
    """The C index type: unsigned 32-bit (cheaper address arithmetic) or ``long long``.

    >>> index_type(False), index_type(True)
    ('unsigned int', 'long long')
    """
    return "long long" if index64 else "unsigned int"


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"kernel name {name!r} is not a C identifier")


def _check_type(ctype: str, allowed: Sequence[str]) -> None:
    if ctype not in allowed:
        raise ValueError(f"C type {ctype!r} is not supported here (expected one of {', '.join(allowed)})")


def _fill(template: str, **subs: str) -> str:
    return Template(template).substitute(**subs).strip("\n") + "\n"


_ELEMENTWISE = """
// jitorch elementwise: out = $expr
static __device__ __forceinline__ $out_type ${name}_op($op_params) {
    return $expr;
}

extern "C" __global__ void $name(
$kernel_params) {
    const $idx start = ($idx)blockIdx.x * blockDim.x + threadIdx.x;
    const $idx stride = ($idx)blockDim.x * gridDim.x;
$body}
"""

_SCALAR_LOOP = """
    for ($idx i = $first; i < n; i += stride) {
        out[i] = ${name}_op($loads);
    }
"""

# float4 moves 16 bytes per load, so each thread issues a quarter of the memory instructions; the caller must
# guarantee every pointer is 16-byte aligned (contiguous buffers from the allocator are).
_VECTOR_LOOP = """
    const $idx n4 = n / 4;
    for ($idx i = start; i < n4; i += stride) {
$vector_loads
        float4 r;
        r.x = ${name}_op($lanes_x);
        r.y = ${name}_op($lanes_y);
        r.z = ${name}_op($lanes_z);
        r.w = ${name}_op($lanes_w);
        reinterpret_cast<float4*>(out)[i] = r;
    }
"""


def elementwise_kernel(name: str, expr: str, in_types: Sequence[str], out_type: str = "float", *,
                       index64: bool = False, vectorize: bool = False) -> str:
    """A grid-stride elementwise kernel ``out[i] = expr(x0[i], x1[i], ...)`` over ``len(in_types)`` inputs.

    ``expr`` is a C expression in the values ``x0, x1, ...``; it becomes a ``__device__`` function so the scalar and
    vector loops share one copy. Parameters: ``in0, in1, ..., out, n``. ``vectorize=True`` (all ``float``, every
    pointer 16-byte aligned and contiguous) adds a float4 main loop; the last ``n % 4`` elements take the scalar loop.

    >>> print(elementwise_kernel("add", "x0 + x1", ["float", "float"]), end="")
    // jitorch elementwise: out = x0 + x1
    static __device__ __forceinline__ float add_op(float x0, float x1) {
        return x0 + x1;
    }
    <BLANKLINE>
    extern "C" __global__ void add(
        const float* __restrict__ in0,
        const float* __restrict__ in1,
        float* __restrict__ out,
        const unsigned int n) {
        const unsigned int start = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x;
        const unsigned int stride = (unsigned int)blockDim.x * gridDim.x;
        for (unsigned int i = start; i < n; i += stride) {
            out[i] = add_op(in0[i], in1[i]);
        }
    }
    """
    _check_name(name)
    if not in_types:
        raise ValueError("an elementwise kernel needs at least one input")
    for ctype in (*in_types, out_type):
        _check_type(ctype, _C_TYPES)
    if vectorize and any(t != "float" for t in (*in_types, out_type)):
        raise ValueError("vectorize=True needs float inputs and output (float4 loads)")
    idx, count = index_type(index64), len(in_types)
    params = [f"    const {t}* __restrict__ in{k}," for k, t in enumerate(in_types)]
    params += [f"    {out_type}* __restrict__ out,", f"    const {idx} n"]
    body = ""
    if vectorize:
        loads = "\n".join(f"        const float4 v{k} = reinterpret_cast<const float4*>(in{k})[i];"
                          for k in range(count))
        lanes = {f"lanes_{c}": ", ".join(f"v{k}.{c}" for k in range(count)) for c in "xyzw"}
        body += _fill(_VECTOR_LOOP, idx=idx, name=name, vector_loads=loads, **lanes)
    first = "n4 * 4 + start" if vectorize else "start"
    body += _fill(_SCALAR_LOOP, idx=idx, name=name, first=first, loads=", ".join(f"in{k}[i]" for k in range(count)))
    op_params = ", ".join(f"{t} x{k}" for k, t in enumerate(in_types))
    return _fill(_ELEMENTWISE, name=name, expr=expr, out_type=out_type, op_params=op_params, idx=idx,
                 kernel_params="\n".join(params), body=body)


_REDUCE_HELPERS = """
// jitorch $op reduction helpers ($ctype)
static __device__ __forceinline__ $ctype ${name}_combine($ctype a, $ctype b) {
    return $combine;
}

static __device__ __forceinline__ $ctype ${name}_warp_reduce($ctype v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v = ${name}_combine(v, __shfl_down_sync(0xffffffffu, v, offset));
    }
    return v;
}

// Warp shuffles reduce each warp, shared memory carries one partial per warp, and warp 0 reduces those.
// The result is valid in thread 0 only.
static __device__ $ctype ${name}_block_reduce($ctype v) {
    __shared__ $ctype warp_partials[32];
    const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    v = ${name}_warp_reduce(v);
    if (lane == 0) {
        warp_partials[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        v = lane < (blockDim.x >> 5) ? warp_partials[lane] : $identity;
        v = ${name}_warp_reduce(v);
    }
    return v;
}
"""

_ROW_REDUCE = """
// One block per output: block b reduces in[b * row_len : (b + 1) * row_len] into out[b].
extern "C" __global__ void $name(
    const $ctype* __restrict__ in,
    $ctype* __restrict__ out,
    const $idx row_len) {
    const $ctype* row = in + ($idx)blockIdx.x * row_len;
    $ctype acc = $identity;
    for ($idx j = threadIdx.x; j < row_len; j += blockDim.x) {
        const $ctype x0 = row[j];
        acc = ${name}_combine(acc, $map_expr);
    }
    acc = ${name}_block_reduce(acc);
    if (threadIdx.x == 0) {
        out[blockIdx.x] = acc;
    }
}
"""

_GRID_REDUCE = """
// Block b reduces a grid-stride share of in[0:n] into out[b]; $what
extern "C" __global__ void $kernel(
    const $ctype* __restrict__ in,
    $ctype* __restrict__ out,
    const $idx n) {
    const $idx stride = ($idx)blockDim.x * gridDim.x;
    $ctype acc = $identity;
    for ($idx i = ($idx)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const $ctype x0 = in[i];
        acc = ${name}_combine(acc, $map_expr);
    }
    acc = ${name}_block_reduce(acc);
    if (threadIdx.x == 0) {
        out[blockIdx.x] = acc;
    }
}
"""


def _reduce_subs(name: str, op: str, ctype: str) -> dict:
    _check_name(name)
    if op not in REDUCE_OPS:
        raise ValueError(f"reduction op {op!r} is not one of {', '.join(REDUCE_OPS)}")
    _check_type(ctype, FLOAT_TYPES)
    return {"name": name, "op": op, "ctype": ctype, "combine": _COMBINE[op], "identity": _IDENTITY[op, ctype]}


def block_reduce_kernel(name: str, op: str, ctype: str = "float", *, map_expr: str = "x0",
                        index64: bool = False) -> str:
    """A row reduction: one block per row of a contiguous ``(rows, row_len)`` input, ``out[row] = op(map(x))``.

    Parameters: ``in, out, row_len``; launch ``rows`` blocks. Pass ``index64=needs_index64(rows * row_len)``:
    the row offset spans the whole input, not one row. ``map_expr`` (in ``x0``) is applied to each element
    first, e.g. ``"x0 * x0"`` for a sum of squares. ``max``/``min`` propagate NaN. The helpers are long, so only the
    kernel itself is shown:

    >>> source = block_reduce_kernel("row_max", "max")
    >>> print(source[source.index('extern "C"'):], end="")
    extern "C" __global__ void row_max(
        const float* __restrict__ in,
        float* __restrict__ out,
        const unsigned int row_len) {
        const float* row = in + (unsigned int)blockIdx.x * row_len;
        float acc = __int_as_float(0xff800000);
        for (unsigned int j = threadIdx.x; j < row_len; j += blockDim.x) {
            const float x0 = row[j];
            acc = row_max_combine(acc, x0);
        }
        acc = row_max_block_reduce(acc);
        if (threadIdx.x == 0) {
            out[blockIdx.x] = acc;
        }
    }
    """
    subs = _reduce_subs(name, op, ctype)
    helpers = _fill(_REDUCE_HELPERS, **subs)
    return helpers + "\n" + _fill(_ROW_REDUCE, idx=index_type(index64), map_expr=map_expr, **subs)


def two_pass_reduce_kernels(name: str, op: str, ctype: str = "float", *, map_expr: str = "x0",
                            index64: bool = True) -> str:
    """A full reduction of a very large input in two launches: ``{name}_partial`` then ``{name}_final``.

    Pass 1 runs G blocks, each folding a grid-stride share of ``in[0:n]`` (after ``map_expr``) into ``partials[b]``;
    pass 2 runs one block over the G partials without the map. `two_pass_plan` picks G. 64-bit indexing is the
    default because inputs large enough to need two passes are often past 2**31 elements. The pass-1 kernel:

    >>> source = two_pass_reduce_kernels("total", "sum")
    >>> print(source[source.index('extern "C"'):source.index("// Block b", source.index('extern "C"'))].rstrip())
    extern "C" __global__ void total_partial(
        const float* __restrict__ in,
        float* __restrict__ out,
        const long long n) {
        const long long stride = (long long)blockDim.x * gridDim.x;
        float acc = 0.0f;
        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
            const float x0 = in[i];
            acc = total_combine(acc, x0);
        }
        acc = total_block_reduce(acc);
        if (threadIdx.x == 0) {
            out[blockIdx.x] = acc;
        }
    }
    """
    subs = _reduce_subs(name, op, ctype)
    idx = index_type(index64)
    first = _fill(_GRID_REDUCE, kernel=f"{name}_partial", what="pass 1 of 2", idx=idx, map_expr=map_expr, **subs)
    second = _fill(_GRID_REDUCE, kernel=f"{name}_final", what="pass 2 of 2 (one block over the partials)",
                   idx=idx, map_expr="x0", **subs)
    return _fill(_REDUCE_HELPERS, **subs) + "\n" + first + "\n" + second


def two_pass_plan(name: str, n: int, block: int = 256, max_blocks: int = 1024) -> list[tuple[str, int, int, int]]:
    """The launches of `two_pass_reduce_kernels`: ``(kernel, grid, block, n_in)`` for each pass.

    The partials buffer needs ``grid`` elements of the first launch.

    >>> two_pass_plan("total", 10**9)
    [('total_partial', 1024, 256, 1000000000), ('total_final', 1, 256, 1024)]
    """
    if block % 32 or not 32 <= block <= 1024:
        raise ValueError(f"block={block} must be a multiple of 32 between 32 and 1024")
    grid = max(1, min(max_blocks, -(-n // block)))
    return [(f"{name}_partial", grid, block, n), (f"{name}_final", 1, block, grid)]
