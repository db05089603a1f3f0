"""Compiled graphs on a real GPU (marker ``cuda``; skipped without a device): fused kernels built by NVRTC for the
device's arch and launched through CuPy equal eager CUDA and eager CPU, launch the expected number of kernels, run on
the current stream (ordered with eager work on a side stream), and compile errors carry numbered source and log.

Run with ``bash bench/gpu_check.sh``; the oracle is jitorch's own eager result from the same NumPy data.
"""
from __future__ import annotations

import numpy as np
import pytest
from test_compile_cuda import PATTERNS, chain, gelu_tanh

import jitorch
from jitorch._compile import lower_cuda
from jitorch._compile.backend import CompiledGraph
from jitorch._compile.trace import trace
from jitorch.codegen import cuda_launch, nvrtc

pytestmark = pytest.mark.cuda


def _inputs(rng, shapes, dtype=np.float32):
    data = [rng.standard_normal(s).astype(dtype) for s in shapes]
    return [jitorch.from_numpy(d.copy()) for d in data], [jitorch.from_numpy(d.copy()).cuda() for d in data]


def _launches():
    return lower_cuda.cuda_kernel_stats()["launches"]


def _check(got, want, tol):
    got = got if isinstance(got, (tuple, list)) else [got]
    want = want if isinstance(want, (tuple, list)) else [want]
    for g, w in zip(got, want):
        assert g.device.type == "cuda" and g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g.cpu().numpy(), w.cpu().numpy(), rtol=tol, atol=tol)


class Recording:
    """The real device, recording the stream and function of every launch."""

    def __init__(self):
        self.inner, self.streams = lower_cuda.CupyDevice(), []
        self.xp = self.inner.xp

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def launch(self, function, grid, block, args, stream):
        self.streams.append(int(stream.ptr))
        self.inner.launch(function, grid, block, args, stream)


@pytest.fixture
def recording():
    rec = Recording()
    previous = lower_cuda.set_device_backend(rec)
    yield rec
    lower_cuda.set_device_backend(previous)


@pytest.mark.parametrize("name", PATTERNS)
def test_fusion_patterns_equal_eager_on_cuda_with_the_expected_launches(name, rng):
    fn, shapes, kernels, tol = PATTERNS[name]
    cpu, gpu = _inputs(rng, shapes)
    graph = CompiledGraph(trace(fn, tuple(gpu), {}).gm)
    before = _launches()
    got = graph(tuple(gpu))
    launched = _launches() - before
    assert len(graph.kernel_ops) == kernels
    assert launched == (2 if name == "full_sum_split" else 1) * kernels
    _check(got, fn(*gpu), tol)
    _check(got, fn(*cpu), tol)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.int32, 0), (np.int64, 0)])
def test_other_dtypes_fuse_and_match(dtype, tol, rng):
    cpu, gpu = _inputs(rng, [(257, 33), (257, 33)], dtype)
    fn = chain if dtype == np.float64 else (lambda a, b: (a * 3 - b).abs() + a)
    graph = CompiledGraph(trace(fn, tuple(gpu), {}).gm)
    got = graph(tuple(gpu))
    assert len(graph.kernel_ops) == 1
    _check(got, fn(*cpu), tol)


def test_transposed_broadcast_and_sliced_inputs(rng):
    cpu, gpu = _inputs(rng, [(40, 30), (30,)])
    fn = lambda a, b: (a.t()[::2] * b[::2, None]).tanh() + 1  # noqa: E731
    graph = CompiledGraph(trace(fn, tuple(gpu), {}).gm)
    _check(graph(tuple(gpu)), fn(*cpu), 1e-6)


def test_vectorized_kernel_and_its_misaligned_fallback_match(rng, recording):
    n = 4 * 4099 - 1  # a 3-element scalar tail after the float4 loop
    cpu, gpu = _inputs(rng, [(n + 1,)])
    lower_cuda.clear_cuda_kernel_cache()
    graph = CompiledGraph(trace(gelu_tanh, (gpu[0][:n],), {}).gm)
    for lo in (0, 1):  # a 16-byte aligned view, then one 4 bytes further
        _check(graph((gpu[0][lo:lo + n],)), gelu_tanh(cpu[0][lo:lo + n]), 1e-6)
    program, = lower_cuda._PROGRAMS.values()
    assert program.vector_launches and len(recording.streams) == 2


def test_compile_decorator_runs_cuda_kernels_not_eager(rng):
    cpu, gpu = _inputs(rng, [(1 << 16,)])
    compiled = jitorch.compile(gelu_tanh)
    before = _launches()
    for _ in range(3):
        got = compiled(gpu[0])
    assert _launches() - before == 3 and compiled.entries[0].kernel_ops
    _check(got, gelu_tanh(cpu[0]), 1e-6)


def test_training_step_on_cuda_matches_eager(rng):
    cpu, gpu = _inputs(rng, [(32, 16), (16, 8)])
    for t in cpu + gpu:
        t.requires_grad_(True)
    fn = lambda x, w: gelu_tanh(x @ w).sum(1)  # noqa: E731
    upstream = rng.standard_normal(32).astype(np.float32)
    compiled = jitorch.compile(fn)
    out_gpu = compiled(*gpu)
    out_gpu.backward(jitorch.from_numpy(upstream.copy()).cuda())
    out_cpu = fn(*cpu)
    out_cpu.backward(jitorch.from_numpy(upstream.copy()))
    _check(out_gpu, out_cpu, 1e-5)
    for g, c in zip(gpu, cpu):
        _check(g.grad, c.grad, 1e-4)


def test_kernels_run_on_the_current_stream_in_order_with_eager_work(rng, recording):
    cpu, gpu = _inputs(rng, [(1 << 22,)])
    graph = CompiledGraph(trace(lambda v: (v * 2).exp().sum(), tuple(gpu), {}).gm)
    side = jitorch.cuda.Stream()
    side.wait_stream(jitorch.cuda.current_stream())
    with jitorch.cuda.stream(side):
        shifted = gpu[0] * 0.5 - 1  # eager work queued on the side stream, read by the kernels right after
        got = graph((shifted,))
    side.synchronize()
    assert recording.streams and set(recording.streams) == {side.cuda_stream}
    assert side.cuda_stream != jitorch.cuda.current_stream().cuda_stream
    want = (((cpu[0] * 0.5 - 1) * 2).exp()).sum()
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=1e-4)


def test_cubins_are_built_for_the_device_arch(recording, rng):
    cpu, gpu = _inputs(rng, [(1000,)])
    lower_cuda.clear_cuda_kernel_cache()
    graph = CompiledGraph(trace(lambda v: v.sin() * 2, tuple(gpu), {}).gm)
    graph(tuple(gpu))
    major, minor = jitorch.cuda.get_device_capability()
    programs = list(lower_cuda._PROGRAMS.values())
    assert [p.arch for p in programs] == [f"sm_{major}{minor}"]


def test_compile_errors_carry_numbered_source_and_log(monkeypatch, rng):
    cpu, gpu = _inputs(rng, [(100,)])
    lower_cuda.clear_cuda_kernel_cache()
    real = cuda_launch.emit_cuda
    monkeypatch.setattr(cuda_launch, "emit_cuda", lambda k, name: real(k, name).replace("tanhf(", "tanhf_typo("))
    graph = CompiledGraph(trace(lambda v: v.tanh() + 3, tuple(gpu), {}).gm)
    with pytest.raises(nvrtc.CompileError) as info:
        graph(tuple(gpu))
    assert "tanhf_typo" in info.value.log and "offending lines:" in str(info.value)
    assert " | " in str(info.value).split("generated source:")[1]
