"""A kernel IR as a CUDA program: sources, cubins (NVRTC, cached) and launch plans; loading and launching via CuPy.

`build_program` does everything a launch needs except the launch itself, without a GPU: it emits CUDA C
(`cuda_emit`, or `cuda_split`'s two kernels for a huge reduction with few outputs), compiles each source to a
cubin for one SM arch through the compile cache (`cache.KernelCache`, keyed by the source, which embeds the
canonical IR, NVRTC's version, the arch, the options and jitorch's version), and plans the launches: which
function, grid, block and argument list (``buf<i>`` / ``ws<n>`` references) each launch takes. The plan is checked
against the parameter list parsed from the source, so a mismatch fails at build time, not as a bad launch.

Grid and block per kernel kind (all honour `cuda_emit`'s contract: ``blockDim.x`` a multiple of 32, at most
1024, and ``gridDim.x * blockDim.x <= 2**31``):

* ``elementwise``: 256 threads, a grid covering the points once, capped at `BLOCKS_PER_SM` blocks per SM (a
  grid-stride loop takes the rest: fewer, fuller blocks cost less to schedule than one block per 256 points).
  A contiguous float32/int32 kernel also gets ``<name>_v4`` (`cuda_vector`: 16-byte accesses, a quarter of the
  threads) in the same cubin; `CudaProgram.launches_for` picks it when the pointers are 16-byte aligned;
* ``block_reduce``: one block per output point (capped likewise; the kernel strides over outputs), 32 to 1024
  threads so that each thread folds about `POINTS_PER_THREAD` reduced points before the shuffles;
* ``thread_reduce``: 256 threads, each owning output points;
* ``split_reduce``: `cuda_split.SPLIT` blocks of 256 for the partials, then one block per output point.

`load_functions` and `launch` are the only parts that need CuPy and a device.

>>> from jitorch.codegen.ir import Buffer, Kernel, Store, load, op
>>> k = Kernel((1000,), (Buffer("f32", (1,)), Buffer("f32", (1,))), (Store(1, op("exp", load(0, "f32"))),))
>>> program = build_program(k, "exp1000", "sm_90", sm_count=132, cache=None)
>>> program.strategy, program.launches
('elementwise', (Launch(function='exp1000', cubin=0, grid=4, block=256, args=('buf0', 'buf1')),))
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from . import nvrtc
from .cuda_emit import emit_cuda, strategy as emit_strategy
from .cuda_ops import C_TYPES
from .cuda_split import SPLIT, emit_cuda_split, split_needed
from .cuda_vector import emit_cuda_vector, vector_buffers, vectorizable
from .ir import collapse

__all__ = ["BLOCK", "BLOCKS_PER_SM", "POINTS_PER_THREAD", "OPTIONS", "Launch", "CudaProgram", "build_program",
           "plan_launches", "kernel_parameters", "load_functions", "launch"]

BLOCK = 256
BLOCKS_PER_SM = 16  # 8 resident blocks of 256 per SM on sm_80/sm_90, twice that to cover tail effects
POINTS_PER_THREAD = 8  # reduced points each thread of a block_reduce folds serially before the shuffles
OPTIONS: tuple[str, ...] = ()  # exact libm math, as the LLVM backend: no --use_fast_math
_INDEX32_THREADS = 2**31


@dataclass(frozen=True)
class Launch:
    """One kernel launch: ``function`` of cubin number ``cubin``, a 1-D grid and block, and the arguments as
    parameter names: ``buf<i>`` (IR buffer i, as a pointer to its element 0) or ``ws<n>`` (workspace n)."""

    function: str
    cubin: int
    grid: int
    block: int
    args: tuple


@dataclass(frozen=True)
class CudaProgram:
    """The launches of one IR kernel on one arch: ``sources[i]`` compiles to ``cubins[i]`` defining the kernels
    named in ``functions[i]``; ``workspaces`` are ``(dtype, element count)`` scratch buffers the launches share;
    ``vector_launches`` replace ``launches`` when the ``vector_args`` pointers are 16-byte aligned; ``kernel`` is
    the IR it was built from."""

    name: str
    arch: str
    strategy: str
    sources: tuple
    functions: tuple
    cubins: tuple
    launches: tuple
    workspaces: tuple
    kernel: object = None
    vector_launches: tuple = ()
    vector_args: tuple = ()

    def launches_for(self, pointers):
        """The launches for these argument pointers (``{"buf0": address, ...}``): the vectorized kernel when it
        exists and every pointer it accesses 16 bytes at a time is 16-byte aligned, else the scalar kernels.

        >>> p = CudaProgram("k", "sm_90", "elementwise", (), ((),), (), ("scalar",), (), None, ("vector",), ("buf0",))
        >>> p.launches_for({"buf0": 4096}), p.launches_for({"buf0": 4100})
        (('vector',), ('scalar',))
        """
        if self.vector_launches and all(pointers[a] % 16 == 0 for a in self.vector_args):
            return self.vector_launches
        return self.launches


def _size(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _grid(units, block, sm_count):
    """Blocks for ``units`` units of work done ``block`` at a time, capped for a grid-stride loop."""
    cap = max(1, min(sm_count * BLOCKS_PER_SM, _INDEX32_THREADS // block))
    return max(1, min(-(-units // block), cap))


def _reduce_block(reduced):
    """Threads per block for ``reduced`` points per output: a power of two in [32, 1024].

    >>> _reduce_block(100), _reduce_block(4096), _reduce_block(10**6)
    (32, 512, 1024)
    """
    block = 32
    while block < 1024 and block * POINTS_PER_THREAD < reduced:
        block *= 2
    return block


def plan_launches(kernel, name, sm_count):
    """``(strategy, launches, workspaces)`` for ``kernel`` emitted under ``name`` (see the module docstring).

    >>> from jitorch.codegen.ir import Buffer, Kernel, Store, load
    >>> rows = Kernel((64, 4096), (Buffer("f32", (4096, 1)), Buffer("f32", (1, 0))),
    ...               (Store(1, load(0, "f32"), "sum"),), 1)
    >>> plan_launches(rows, "rowsum", 132)
    ('block_reduce', (Launch(function='rowsum', cubin=0, grid=64, block=512, args=('buf0', 'buf1')),), ())
    """
    k = collapse(kernel)
    args = tuple(f"buf{i}" for i in range(len(k.buffers)))
    nouter = len(k.outer_shape)
    outer_n, red_n = _size(k.shape[:nouter]), _size(k.shape[nouter:])
    if split_needed(kernel):
        reducing = [(j, s) for j, s in enumerate(k.stores) if s.reduce]
        workspaces = tuple((s.value.dtype, outer_n * SPLIT) for _, s in reducing)
        ws = tuple(f"ws{n}" for n in range(len(workspaces)))
        return "split_reduce", (Launch(f"{name}_partial", 0, SPLIT, BLOCK, args + ws),
                                Launch(f"{name}_final", 1, _grid(outer_n, 1, sm_count), BLOCK, args + ws)), workspaces
    kind = emit_strategy(kernel)
    if kind == "elementwise":
        return kind, (Launch(name, 0, _grid(_size(k.shape), BLOCK, sm_count), BLOCK, args),), ()
    if kind == "block_reduce":
        block = _reduce_block(red_n)
        return kind, (Launch(name, 0, _grid(outer_n, 1, sm_count * (1024 // block)), block, args),), ()
    return kind, (Launch(name, 0, _grid(outer_n, BLOCK, sm_count), BLOCK, args),), ()


def kernel_parameters(source, function):
    """The ``(C type, name)`` parameters of ``extern "C" __global__ void function(...)`` in ``source``.

    >>> kernel_parameters('extern "C" __global__ void k(const float* __restrict__ buf0, double* buf1) {}', "k")
    [('const float*', 'buf0'), ('double*', 'buf1')]
    """
    match = re.search(rf'extern "C" __global__ void {re.escape(function)}\((.*?)\)\s*{{', source, re.S)
    if match is None:
        raise ValueError(f"no kernel {function!r} in the source")
    params = []
    for text in match.group(1).split(","):
        words = text.replace("__restrict__", "").split()
        params.append((" ".join(words[:-1]), words[-1]))
    return params


def _check_plan(kernel, sources, launches, workspaces):
    """Each launch passes exactly its function's parameters, in order, with the buffers' element types."""
    types = [C_TYPES[b.dtype] for b in kernel.buffers] + [C_TYPES[dt] for dt, _ in workspaces]
    for launch in launches:
        params = kernel_parameters(sources[launch.cubin], launch.function)
        names = tuple(p for _, p in params)
        if names != launch.args:
            raise AssertionError(f"launch of {launch.function} passes {launch.args}, the kernel takes {names}")
        for ctype, pname in params:
            kind, number = re.fullmatch(r"(buf|ws)(\d+)", pname).groups()
            index = int(number) + (len(kernel.buffers) if kind == "ws" else 0)
            if ctype.replace("const ", "") != types[index] + "*":
                raise AssertionError(f"{launch.function}: parameter {pname} is {ctype}, expected {types[index]}*")
        if launch.block % 32 or not 32 <= launch.block <= 1024 or launch.grid * launch.block > _INDEX32_THREADS:
            raise AssertionError(f"{launch.function}: grid {launch.grid} x block {launch.block} breaks the contract")


def build_program(kernel, name, arch, *, sm_count, cache, extra_key=None, options=OPTIONS):
    """Emit, compile (through ``cache``, a `cache.KernelCache`, or None for no cache) and plan ``kernel`` for
    ``arch``. Raises `cuda_ops.UnsupportedPrimitive` when the kernel cannot be emitted and `nvrtc.CompileError`
    (numbered source and NVRTC's log) when NVRTC rejects it. ``extra_key`` adds parts to the cache key.

    >>> from jitorch.codegen.ir import Buffer, Kernel, Store, load
    >>> total = Kernel((1 << 22,), (Buffer("f32", (1,)), Buffer("f32", (0,))), (Store(1, load(0, "f32"), "sum"),), 1)
    >>> p = build_program(total, "total", 80, sm_count=108, cache=None)
    >>> p.strategy, p.workspaces
    ('split_reduce', (('f32', 256),))
    >>> [(x.function, x.grid, x.args) for x in p.launches]
    [('total_partial', 256, ('buf0', 'buf1', 'ws0')), ('total_final', 1, ('buf0', 'buf1', 'ws0'))]
    """
    arch = nvrtc.normalize_arch(arch)
    kind, launches, workspaces = plan_launches(kernel, name, sm_count)
    vector_launches, vector_args = (), ()
    if kind == "split_reduce":
        split = emit_cuda_split(kernel, name)
        sources, functions = (split.partial, split.final), tuple((n,) for n in split.names)
    elif kind == "elementwise" and vectorizable(kernel):
        sources = (emit_cuda(kernel, name) + "\n" + emit_cuda_vector(kernel, f"{name}_v4"),)
        functions = ((name, f"{name}_v4"),)
        n = _size(collapse(kernel).shape)
        vector_launches = (Launch(f"{name}_v4", 0, _grid(-(-n // 4), BLOCK, sm_count), BLOCK, launches[0].args),)
        vector_args = tuple(f"buf{i}" for i in vector_buffers(kernel))
    else:
        sources, functions = (emit_cuda(kernel, name),), ((name,),)
    _check_plan(collapse(kernel), sources, launches + vector_launches, workspaces)
    cubins = []
    for source, names in zip(sources, functions):
        def compile_one(source=source, names=names):
            cubin = nvrtc.compile(source, names[0], arch, options).cubin
            missing = set(names) - nvrtc.cubin_function_symbols(cubin)
            if missing:
                raise nvrtc.CompileError(names[0], source, f"entry symbols {sorted(missing)} are not defined in "
                                         "the cubin", (f"--gpu-architecture={arch}", *options))
            return cubin

        if cache is None:
            cubins.append(compile_one())
        else:
            parts = {**nvrtc.key_parts(source, arch, options), "ir": str(kernel), **(extra_key or {})}
            cubins.append(cache.get_or_compile(parts, compile_one))
    return CudaProgram(name, arch, kind, sources, functions, tuple(cubins), launches, workspaces, kernel,
                       vector_launches, vector_args)


def load_functions(program):
    """Load ``program``'s cubins into the current CUDA context (CuPy's driver module) and return ``{name: CuPy
    Function}`` for every kernel; a cubin for another arch fails here with CUDA's ``no kernel image`` error."""
    from cupy.cuda import function as cuda_function

    handles = {}
    for cubin, names in zip(program.cubins, program.functions):
        module = cuda_function.Module()
        module.load(cubin)
        for name in names:
            handles[name] = module.get_function(name)  # a Function keeps its Module loaded
    return handles


def launch(function, grid, block, args, stream):
    """Enqueue ``function`` on ``stream`` with device pointers ``args`` (ints, passed as 64-bit values)."""
    function((grid,), (block,), args, shared_mem=0, stream=stream)
