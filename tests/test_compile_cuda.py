"""The CUDA path of compiled graphs without a GPU: every canonical fused pattern goes through lowering, NVRTC (a real
cubin for sm_80 and sm_90) and launch planning, and a recording fake device proves `CompiledGraph` takes that path
for device arrays, passes the arguments the kernel signature expects, and computes what eager computes.

The fake device's arrays are NumPy memory marked as device memory (``__cuda_array_interface__``, ``.device``). Its
"launch" runs the program's IR kernel with the IR interpreter on the very pointers the launch passes (flat arrays
rebuilt from the addresses), so a wrong pointer, offset, stride or argument order gives a wrong answer here.
"""
from __future__ import annotations

import contextlib
import ctypes
import doctest
import types

import numpy as np
import pytest

import jitorch
from jitorch._compile import lower_cuda
from jitorch._compile.backend import CompiledGraph
from jitorch._compile.trace import trace
from jitorch.codegen import cache as kcache, cuda_launch, cuda_vector, interp, nvrtc
from jitorch.codegen.cuda_ops import UnsupportedPrimitive
from jitorch.codegen.ir import Buffer, Kernel, Store, load, op
from jitorch.ops import activation_ops

ARCHS = ("sm_80", "sm_90")


class DeviceArray(np.ndarray):
    """Host memory standing for device memory: CuPy's marker attribute and ``.device``."""

    device = types.SimpleNamespace(id=0)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ctypes.data, False), "version": 3}


def _dev(a):
    return np.asarray(a).view(DeviceArray)


FAKE_XP = types.SimpleNamespace(
    empty=lambda shape, dtype: _dev(np.empty(shape, dtype)),
    asarray=lambda a: _dev(np.array(a)),
    broadcast_to=lambda a, shape: np.broadcast_to(a, shape, subok=True),
    ascontiguousarray=lambda a: _dev(np.ascontiguousarray(a)),
)


class FakeDevice:
    """Records loads and launches; runs each program's IR on the launched pointers with the interpreter."""

    xp = FAKE_XP

    def __init__(self, arch="sm_90", sms=132):
        self._arch, self.sms = arch, sms
        self.loaded, self.launches, self.current = [], [], "stream-0"

    def scope(self, index):
        assert index == 0
        return contextlib.nullcontext()

    def arch(self, index):
        return self._arch

    def sm_count(self, index):
        return self.sms

    def stream(self):
        return self.current

    def pointer(self, array):
        return array.__array_interface__["data"][0]

    def load(self, program):
        self.loaded.append(program)
        return {name: (program, i, name) for i, names in enumerate(program.functions) for name in names}

    def launch(self, function, grid, block, args, stream):
        program, cubin, name = function
        self.launches.append((program, name, grid, block, tuple(args), stream))
        if cubin == 0:  # a split reduction's final kernel only combines what the interpreter already wrote
            k = program.kernel
            interp.run(k, [_flat(ptr, b, k.shape) for ptr, b in zip(args, k.buffers)])


def _flat(pointer, buffer, shape):
    """The flat array a kernel reaches from ``pointer`` through ``buffer``'s offset and strides."""
    span = buffer.offset + sum(max(0, s * (n - 1)) for s, n in zip(buffer.strides, shape) if n > 0) + 1
    dtype = np.dtype(lower_cuda._NP[buffer.dtype])
    return np.frombuffer((ctypes.c_char * (span * dtype.itemsize)).from_address(pointer), dtype)


@pytest.fixture
def device(request):
    fake = FakeDevice(getattr(request, "param", "sm_90"))
    previous = lower_cuda.set_device_backend(fake)
    lower_cuda.clear_cuda_kernel_cache()
    yield fake
    lower_cuda.set_device_backend(previous)
    lower_cuda.clear_cuda_kernel_cache()


def _run(fn, *args):
    """(device outputs, eager CPU outputs, CompiledGraph) for ``fn`` traced on CPU and run on fake device arrays."""
    graph = CompiledGraph(trace(fn, args, {}).gm)
    on_device = tuple(jitorch.Tensor._make(_dev(a._data)) if isinstance(a, jitorch.Tensor) else a for a in args)
    got = graph(on_device)
    want = fn(*args)
    return got, want, graph


def _check_launches(device, graph):
    """Every recorded launch matches its program's plan, and passes one pointer per kernel parameter."""
    assert device.launches, "the CUDA path launched nothing"
    for program, name, grid, block, args, stream in device.launches:
        assert stream == device.current
        assert program.arch == device._arch and nvrtc.normalize_arch(program.arch) == program.arch
        launch = next(x for x in program.launches + program.vector_launches if x.function == name)
        assert (grid, block) == (launch.grid, launch.block) and name in program.functions[launch.cubin]
        params = cuda_launch.kernel_parameters(program.sources[launch.cubin], name)
        assert [p for _, p in params] == list(launch.args) and len(args) == len(params)
        assert all(isinstance(a, int) and a > 0 for a in args)
        cubin_bytes = program.cubins[launch.cubin]
        assert cubin_bytes[:4] == b"\x7fELF" and name in nvrtc.cubin_function_symbols(cubin_bytes)


def _close(got, want, tol):
    got = got if isinstance(got, (tuple, list)) else [got]
    want = want if isinstance(want, (tuple, list)) else [want]
    for g, w in zip(got, want):
        assert isinstance(g._data, DeviceArray) and g.device.type == "cuda"
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(np.asarray(g._data), w.numpy(), rtol=tol, atol=tol)


def chain(x, y):
    return jitorch.maximum((x * y + 1.5) / (y.abs() + 1) - x, x.neg()).relu() * 2


def gelu_tanh(x):
    return 0.5 * x * (1 + jitorch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


PATTERNS = {
    "chain": (chain, [(33, 17), (33, 17)], 1, 1e-6),
    "broadcast": (lambda a, b, c: (a * b + c).tanh() - c, [(15, 20), (15, 1), (1, 20)], 1, 1e-6),
    "gelu": (gelu_tanh, [(4097,)], 1, 1e-6),
    # The activation rows and their backward rows (jitorch/ops/activation_ops.py): two independent groups.
    "gelu_rows": (lambda x, g: (activation_ops.gelu(x), activation_ops.gelu_backward(g, x)), [(4097,)] * 2, 2, 1e-6),
    "gelu_tanh_rows": (lambda x, g: (activation_ops.gelu_tanh(x), activation_ops.gelu_tanh_backward(g, x)),
                       [(4097,)] * 2, 2, 1e-6),
    "silu_rows": (lambda x, g: (activation_ops.silu(x), activation_ops.silu_backward(g, x)), [(4097,)] * 2, 2, 1e-6),
    "row_sum_epilogue": (lambda v: (v.exp() - v.exp().sum(1, keepdim=True)).relu() * 2, [(6, 5)], 1, 1e-5),
    "row_sum_block": (lambda v: (v * v).sum(1), [(8, 3000)], 1, 1e-4),
    "softmax": (lambda v: jitorch.softmax(v, dim=-1), [(16, 77)], 1, 1e-6),
    "log_softmax": (lambda v: jitorch.log_softmax(v * 2, dim=-1), [(9, 300)], 1, 1e-5),
    "layer_norm": (lambda v, w, b: jitorch.nn.functional.layer_norm(v, (64,), w, b), [(12, 64), (64,), (64,)], 1,
                   1e-5),
    "full_sum_split": (lambda v: (v * 0.5).sum(), [(1 << 20,)], 1, 1e-3),
}


@pytest.mark.parametrize("device", ARCHS, indirect=True)
@pytest.mark.parametrize("name", PATTERNS)
def test_canonical_patterns_compile_to_cubins_and_launch_as_planned(name, device, rng):
    fn, shapes, kernels, tol = PATTERNS[name]
    args = [jitorch.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    got, want, graph = _run(fn, *args)
    assert len(graph.kernel_ops) == kernels
    _close(got, want, tol)
    _check_launches(device, graph)
    programs = {id(p): p for p, *_ in device.launches}
    assert len(programs) == kernels == len(device.loaded)
    launched = sum(len(p.launches_for(dict(zip(p.launches[0].args, args)))) for p, _, _, _, args, _ in
                   {id(x[0]): x for x in device.launches}.values())
    assert len(device.launches) == launched == lower_cuda.cuda_kernel_stats()["launches"]
    if name == "full_sum_split":
        program, = programs.values()
        assert program.strategy == "split_reduce" and [x.function.rsplit("_", 1)[1] for x in program.launches] == \
            ["partial", "final"] and program.workspaces == (("f32", cuda_launch.SPLIT),)


@pytest.mark.parametrize("device", ["sm_90"], indirect=True)
def test_second_call_reuses_the_loaded_program_and_new_strides_build_another(device, rng):
    x = jitorch.from_numpy(rng.standard_normal((20, 30)).astype(np.float32))
    graph = CompiledGraph(trace(lambda v: (v * 3).exp() + 1, (x,), {}).gm)
    base = _dev(x._data)
    for arr in (base, base, base.T.copy().T, base[:, ::-1]):  # contiguous twice, column-major, negative stride
        out = graph((jitorch.Tensor._make(arr),))
        np.testing.assert_allclose(np.asarray(out._data), np.exp(np.asarray(arr) * 3) + 1, rtol=1e-6)
    assert len(device.loaded) == 3 and len(device.launches) == 4
    flipped = device.loaded[-1].kernel.buffers[1]
    assert flipped.strides == (30, -1) and flipped.offset == 29  # pointer at the lowest element, offset back up


@pytest.mark.parametrize("device", ["sm_90"], indirect=True)
def test_layer_norm_of_constant_rows_reads_each_rows_first_element(device, rng):
    # The sums are shifted by the row's first element (lower_rows.layer_norm), a buffer with stride 0 along the row:
    # constant rows give exactly the bias, also through negative strides (a wrong first element would not).
    rows = _dev(np.repeat(np.array([[0.3], [-2.7], [0.1], [1e4]], np.float32), 7, axis=1))
    w, b = (jitorch.from_numpy(rng.standard_normal(7).astype(np.float32)) for _ in range(2))
    graph = CompiledGraph(trace(lambda v, w, b: jitorch.nn.functional.layer_norm(v * 2, (7,), w, b), (
        jitorch.from_numpy(np.asarray(rows).copy()), w, b), {}).gm)
    params = [jitorch.Tensor._make(_dev(t._data)) for t in (w, b)]
    for arr in (rows, rows[::-1, ::-1]):
        out = graph((jitorch.Tensor._make(arr), *params))
        assert (np.asarray(out._data) == b.numpy()).all()
    assert device.loaded[-1].kernel.buffers[-1].strides[-1] == 0
    _check_launches(device, graph)


@pytest.mark.parametrize("device", ARCHS, indirect=True)
def test_aligned_contiguous_float_kernels_take_the_vectorized_launch(device, rng):
    base = _dev(rng.standard_normal(4 * 4099 + 1).astype(np.float32))
    x = jitorch.from_numpy(np.asarray(base[:4 * 4099 - 1]).copy())
    graph = CompiledGraph(trace(gelu_tanh, (x,), {}).gm)
    aligned, shifted = base[:x.numel()], base[1:1 + x.numel()]  # the second starts 4 bytes into the allocation
    assert aligned.ctypes.data % 16 == 0 and shifted.ctypes.data % 16 == 4
    for arr in (aligned, shifted):
        out = graph((jitorch.Tensor._make(arr),))
        want = gelu_tanh(jitorch.from_numpy(np.asarray(arr).copy()))
        np.testing.assert_allclose(np.asarray(out._data), want.numpy(), rtol=1e-6, atol=1e-6)
    (program, vector, *rest), (_, scalar, *_) = device.launches
    assert vector == program.vector_launches[0].function == f"{program.name}_v4" and scalar == program.name
    assert rest[:2] == [program.vector_launches[0].grid, 256] and program.vector_launches[0].grid == 4099 // 256 + 1
    assert "float4" in program.sources[0] and program.vector_args == ("buf0", "buf1")
    _check_launches(device, graph)


@pytest.mark.parametrize("device", ["sm_90"], indirect=True)
def test_cpu_arrays_keep_the_llvm_path(device):
    x = jitorch.randn(10)
    graph = CompiledGraph(trace(lambda v: v * 2 + 1, (x,), {}).gm)
    out = graph((x,))
    assert type(out._data) is np.ndarray and not device.launches
    np.testing.assert_allclose(out.numpy(), x.numpy() * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize("device", ["sm_90"], indirect=True)
def test_a_cpu_scalar_moves_and_a_cpu_tensor_raises_like_eager(device, rng):
    x = jitorch.from_numpy(rng.standard_normal(7).astype(np.float32))
    s = jitorch.tensor(3.0)
    got, want, _ = _run(lambda a, b: a * b + 1, x, s)
    _close(got, want, 1e-6)
    y = x * 2
    graph = CompiledGraph(trace(lambda a, b: a * b + 1, (x, y), {}).gm)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*cuda:0 and cpu"):
        graph((jitorch.Tensor._make(_dev(x._data)), y))


@pytest.mark.parametrize("device", ["sm_90"], indirect=True)
def test_a_group_the_emitter_cannot_express_runs_eagerly_once_and_for_all(device, monkeypatch):
    x = jitorch.randn(5, 8)
    graph = CompiledGraph(trace(lambda v: (v * 2).exp() + 1, (x,), {}).gm)

    def refuse(*args, **kwargs):
        raise UnsupportedPrimitive("cuda backend: primitive 'exp' is not supported (test)")

    eager = []
    monkeypatch.setattr(cuda_launch, "emit_cuda", refuse)
    monkeypatch.setattr(lower_cuda, "_run_eagerly", lambda group, arrays: eager.append(group) or
                        [_dev(np.exp(np.asarray(arrays[0]) * 2) + 1)])
    for _ in range(2):
        out = graph((jitorch.Tensor._make(_dev(x._data)),))
        np.testing.assert_allclose(np.asarray(out._data), np.exp(x.numpy() * 2) + 1, rtol=1e-6)
    kernel = next(iter(lower_cuda._KERNELS.values()))
    assert "not supported" in kernel.eager_reason and len(eager) == 2 and not device.launches
    assert lower_cuda.cuda_kernel_stats()["eager_groups"] == 1


def _kernel(shape, reduce_axes=0, dtype="f32"):
    n = len(shape)
    contiguous = tuple(int(np.prod(shape[d + 1:])) for d in range(n))
    kept = shape[:n - reduce_axes]
    out = tuple(int(np.prod(kept[d + 1:])) for d in range(len(kept))) + (0,) * reduce_axes
    if reduce_axes:
        stores = (Store(1, op("mul", load(0, dtype), load(0, dtype)), "sum"),)
    else:
        stores = (Store(1, op("tanh", load(0, dtype))),)
    return Kernel(shape, (Buffer(dtype, contiguous), Buffer(dtype, out)), stores, reduce_axes)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("shape, red, kind, grid, block", [
    ((1 << 24,), 0, "elementwise", 132 * 16, 256),
    ((1000,), 0, "elementwise", 4, 256),
    ((4096, 4096), 1, "block_reduce", 4096, 512),
    ((100000, 16), 1, "thread_reduce", 391, 256),
    ((3, 1 << 21), 1, "split_reduce", 256, 256),
])
def test_launch_plans_per_kernel_kind(arch, shape, red, kind, grid, block):
    program = cuda_launch.build_program(_kernel(shape, red), "k", arch, sm_count=132, cache=None)
    assert program.strategy == kind and program.arch == arch
    first = program.launches[0]
    assert (first.grid, first.block) == (grid, block)
    assert all(x.grid * x.block <= 2**31 and x.block % 32 == 0 for x in program.launches)


@pytest.mark.parametrize("arch", ARCHS)
def test_64_bit_indexing_past_two_to_the_31_elements(arch):
    program = cuda_launch.build_program(_kernel((2**31 + 7,)), "big", arch, sm_count=132, cache=None)
    source, = program.sources
    assert "long long i = " in source and "2147483655LL" in source
    assert program.launches[0].grid * program.launches[0].block <= 2**31
    small = cuda_launch.build_program(_kernel((2**20,)), "small", arch, sm_count=132, cache=None)
    assert "unsigned int i = " in small.sources[0]


def test_cubins_are_cached_by_source_arch_and_versions(tmp_path):
    cache = kcache.KernelCache(tmp_path)
    k = _kernel((64, 100), 1)
    first = cuda_launch.build_program(k, "rows", "sm_80", sm_count=108, cache=cache)
    assert cache.stats()["compiles"] == 1
    again = cuda_launch.build_program(k, "rows", "sm_80", sm_count=108, cache=cache)
    assert again.cubins == first.cubins and cache.stats()["hits"] == 1
    cache.clear_memory()
    cuda_launch.build_program(k, "rows", "sm_80", sm_count=108, cache=cache)
    assert cache.stats()["disk_hits"] == 1
    other = cuda_launch.build_program(k, "rows", "sm_90", sm_count=132, cache=cache)
    assert cache.stats()["compiles"] == 2 and other.cubins != first.cubins
    source = first.sources[0]
    parts = {**nvrtc.key_parts(source, "sm_80"), "ir": str(k)}
    assert cache.path_for(parts).exists()


def test_compile_errors_carry_the_numbered_source_and_nvrtc_log(monkeypatch):
    real = cuda_launch.emit_cuda
    monkeypatch.setattr(cuda_launch, "emit_cuda", lambda k, name: real(k, name).replace("tanhf(", "tanhf_typo("))
    with pytest.raises(nvrtc.CompileError) as info:
        cuda_launch.build_program(_kernel((100,)), "broken", "sm_90", sm_count=132, cache=None)
    message = str(info.value)
    assert "tanhf_typo" in info.value.log and "offending lines:" in message
    assert any(line.strip().startswith(tuple(f"{n} |" for n in range(1, 99))) and "tanhf_typo" in line
               for line in message.splitlines())


def test_doctests_of_the_cuda_path():
    for module in (cuda_launch, cuda_vector, lower_cuda):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0 and result.attempted > 0
