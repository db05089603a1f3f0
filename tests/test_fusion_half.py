"""float16 and bfloat16 in fused kernels: storage-only IR dtypes, computed in float32 and rounded once per row.

A fused row of a half or bfloat16 result computes in float32 and rounds its result once, as eager's (and ATen's)
kernels do, so a fused chain gives eager's bits exactly for the rows whose eager kernel rounds once; every test
here proves fused == eager (bits, or NaN where NaN), counts the kernels, checks the IR interpreter against the
compiled kernel, and compiles the CUDA source of every kernel to cubins with NVRTC.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from test_compile_cuda import FakeDevice, _check_launches, _run as run_on_fake_device

import jitorch
from jitorch._compile import lower_cuda
from jitorch._compile.backend import CompiledGraph
from jitorch._compile.trace import trace
from jitorch.codegen import interp, nvrtc
from jitorch.codegen.cuda_emit import emit_cuda
from jitorch.codegen.ir import NP_TYPES, Buffer, Kernel, Store, const, load, op
from jitorch.codegen.llvm_compile import compile_kernel
from jitorch.codegen.llvm_host import storage_dtypes

F = jitorch.nn.functional
NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
DTYPES = {"f16": (jitorch.float16, torch.float16), "bf16": (jitorch.bfloat16, torch.bfloat16)}
STORAGE = [pytest.param(s, marks=pytest.mark.xfail(s not in storage_dtypes(), reason="no F16C", strict=True))
           for s in ("f16", "bf16")]


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint16)


def _run(kernel, arrays):
    compile_kernel(kernel).run(arrays)


# -- the casts ---------------------------------------------------------------------------------------------------
def _float32_patterns():
    rng = np.random.default_rng(0)
    edges = [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF812345, 1, 0x8000, 0x18000, 0x3F808000, 0x3F818000, 0x7F7FFFFF,
             0x7F800000, 0xFF800000, 0x80000000, 0x477FF000, 0x477FEFFF, 0x387FC000, 0x33000000, 0x33000001,
             0x00800000, 0x807FFFFF]
    return np.concatenate([rng.integers(0, 1 << 32, 100_000, dtype=np.uint64).astype(np.uint32),
                           np.array(edges, np.uint32)]).view(np.float32)


@pytest.mark.parametrize("storage", STORAGE)
def test_narrowing_rounds_to_nearest_even_as_numpy_and_ml_dtypes(storage):
    f = _float32_patterns()
    k = Kernel((f.size,), (Buffer(storage, (1,)), Buffer("f32", (1,))),
               (Store(0, op("cast", load(1, "f32"), dtype=storage)),))
    out = np.empty(f.size, NP[storage])
    _run(k, [out, f])
    want = f.astype(NP[storage])
    nan = np.isnan(f)
    np.testing.assert_array_equal(_bits(out)[~nan], _bits(want)[~nan])  # subnormals and ties included
    assert np.isnan(out[nan].astype(np.float32)).all()
    if storage == "bf16":  # its NaN keeps the sign and turns quiet, as ml_dtypes (eager's conversion) does
        np.testing.assert_array_equal(_bits(out)[nan], _bits(want)[nan])
    ref = np.empty_like(out)
    interp.run(k, [ref, f])
    np.testing.assert_array_equal(_bits(ref)[~nan], _bits(out)[~nan])


@pytest.mark.parametrize("storage", STORAGE)
def test_widening_is_exact_for_every_bit_pattern(storage):
    every = np.arange(1 << 16, dtype=np.uint16).view(NP[storage])
    k = Kernel((every.size,), (Buffer("f32", (1,)), Buffer(storage, (1,))),
               (Store(0, op("cast", load(1, storage), dtype="f32")),))
    out = np.empty(every.size, np.float32)
    _run(k, [out, every])
    want = every.astype(np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(out[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert np.isnan(out[nan]).all()


def test_the_ir_computes_only_in_compute_dtypes():
    h = load(0, "f16")
    with pytest.raises(TypeError, match="add: f16 is a storage-only dtype; cast it to f32 first"):
        op("add", h, h)
    with pytest.raises(TypeError, match="storage-only dtypes convert to and from f32 only"):
        op("cast", h, dtype="f64")
    with pytest.raises(TypeError, match="const: bf16 is a storage-only dtype"):
        const(1.0, "bf16")
    with pytest.raises(TypeError, match="reduce its f32 cast"):
        Kernel((4, 3), (Buffer("f16", (1, 0)), Buffer("f16", (3, 1))), (Store(0, load(1, "f16"), "sum"),), 1)


# -- compiled functions ------------------------------------------------------------------------------------------
CASES = {
    "chain": lambda x, y: (x * y + 1).relu() * 0.5,
    "numbers": lambda x, y: x * 0.1 + y / 0.3 - 0.7,
    "sigmoid": lambda x, y: x.sigmoid() * y,
    "gelu": lambda x, y: F.gelu(x) + y,
    "where": lambda x, y: jitorch.where(x > y, x, y * 2),
    "sum": lambda x, y: (x * y).sum(-1),
    "amax": lambda x, y: (x + y).amax(-1),
    "argmax": lambda x, y: (x - y).argmax(-1),
    "to_float": lambda x, y: x.float() * 2 + y.float(),
    "exp_tanh": lambda x, y: (x.exp() * y).tanh(),
    "clamp": lambda x, y: (x - y).clamp(-0.3, 0.7) + 1,
    "casts": lambda x, y: (x.float() * 3).to(x.dtype) + (y * 3).bfloat16().half().to(x.dtype),
}


def _graph(fn, *args):
    return CompiledGraph(trace(fn, args, {}).gm)


def _inputs(storage, shape, seed=0, layout="contiguous"):
    rng = np.random.default_rng(seed)
    jd = DTYPES[storage][0]
    x = jitorch.tensor((rng.standard_normal(shape) * 2).astype(np.float32)).to(jd)
    y = jitorch.tensor((rng.standard_normal(shape) * 2).astype(np.float32)).to(jd)
    if layout == "transposed":
        x, y = x.t().contiguous().t(), y.t().contiguous().t()
    elif layout == "broadcast":
        y = y[:1]
    return x, y


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = got.numpy(), want.numpy()
    if g.dtype in (np.float16, ml_dtypes.bfloat16, np.float32):
        gf, wf = g.astype(np.float32), w.astype(np.float32)
        nan = np.isnan(wf)
        assert (np.isnan(gf) == nan).all()
        np.testing.assert_array_equal(gf[~nan].view(np.uint32), wf[~nan].view(np.uint32))
    else:
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("storage", STORAGE)
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("shape,layout", [((37, 129), "contiguous"), ((16, 64), "transposed"),
                                          ((9, 33), "broadcast"), ((1, 1), "contiguous"), ((0, 5), "contiguous")])
def test_fused_equals_eager_bit_for_bit_in_the_kernels_float32_gets(storage, case, shape, layout):
    fn = CASES[case]
    x, y = _inputs(storage, shape, layout=layout)
    want = fn(x, y)
    graph = _graph(fn, x, y)
    if case not in ("to_float", "casts"):  # (their casts are no ops in float32)
        assert graph.kernel_ops == _graph(fn, x.float(), y.float()).kernel_ops
    if layout != "broadcast" and shape[0]:
        assert len(graph.kernel_ops) == 1, graph.kernel_ops
    _same(graph([x, y]), want)
    _same(jitorch.compile(fn)(x, y), want)


@pytest.mark.parametrize("storage", STORAGE)
@pytest.mark.parametrize("case", ["chain", "numbers", "where", "clamp", "sum", "to_float"])
def test_fused_arithmetic_gives_torchs_bits(storage, case):
    fn = CASES[case]
    x, y = _inputs(storage, (31, 77), seed=1)
    tx, ty = (torch.from_numpy(t.float().numpy()).to(DTYPES[storage][1]) for t in (x, y))
    if case == "where":
        want = torch.where(tx > ty, tx, ty * 2)
    else:
        want = fn(tx, ty)
    got = jitorch.compile(fn)(x, y)
    if case == "sum":  # float32 accumulation in another order: torch's sum rounds to the same half or one ulp off
        np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=2 ** -7, atol=0)
        return
    np.testing.assert_array_equal(got.float().numpy().view(np.uint32), want.float().numpy().view(np.uint32))


@pytest.mark.parametrize("storage", STORAGE)
def test_a_half_tensor_meeting_a_float32_tensor_promotes_inside_the_kernel(storage):
    x, _ = _inputs(storage, (5, 40))
    z = jitorch.randn(5, 40)

    def fn(x, z):
        return (x * z + x).sigmoid()
    graph = _graph(fn, x, z)
    assert len(graph.kernel_ops) == 1
    _same(graph([x, z]), fn(x, z))


@pytest.mark.parametrize("storage", STORAGE)
def test_interpreter_agrees_with_each_compiled_kernel_and_cuda_source_compiles(storage):
    for name in ("chain", "numbers", "where", "sum", "argmax", "to_float"):
        fn = CASES[name]
        x, y = _inputs(storage, (6, 70))
        graph = _graph(fn, x, y)
        for gk, _ in (s for s in graph.steps if s[0] is not None):
            arrays = [x._data, y._data][:len(gk.group.inputs)]
            views = gk._slot_views(arrays)
            kernel = gk.build(tuple(st for _, st in views))
            outs = [np.zeros(int(np.prod(shape)), NP_TYPES[dt]) for shape, dt in zip(gk.out_shapes, gk.out_dtypes)]
            ref = [o.copy() for o in outs]
            # Both read flat buffers through the IR's strides: the inputs' (contiguous) base arrays.
            ins = [arrays[pos].ravel() for (pos, *_), _ in sorted(gk.slots.items(), key=lambda kv: kv[1])]
            interp.run(kernel, ref + ins)
            compile_kernel(kernel).run(outs + ins)
            for got, want in zip(outs, ref):
                np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
            if name == "argmax":
                continue  # (the CUDA backend leaves index reductions to CuPy)
            source = emit_cuda(kernel)
            assert f"jt_f32_to_{storage}" in source or f"jt_{storage}_to_f32" in source
            for arch in ("sm_80", "sm_90"):
                assert nvrtc.compile_cubin(source, "kernel", arch)[:4] == b"\x7fELF"


@pytest.mark.parametrize("storage", STORAGE)
def test_compiled_training_on_half_tensors_matches_eager_gradients(storage):
    jd = DTYPES[storage][0]
    rng = np.random.default_rng(3)
    w0 = (rng.standard_normal((8, 24)) * 0.5).astype(np.float32)
    g = jitorch.tensor(rng.standard_normal((8, 24)).astype(np.float32)).to(jd)

    def fn(w, x):
        return (w * x + 1).sigmoid() * w

    x = jitorch.tensor(rng.standard_normal((8, 24)).astype(np.float32)).to(jd)
    grads = []
    for run in (fn, jitorch.compile(fn)):
        w = jitorch.tensor(w0).to(jd).requires_grad_()
        out = run(w, x)
        out.backward(g)
        grads.append((out.detach(), w.grad))
    _same(grads[1][0], grads[0][0])
    np.testing.assert_allclose(grads[1][1].float().numpy(), grads[0][1].float().numpy(),
                               rtol=2 ** -7 if storage == "bf16" else 2 ** -10, atol=1e-3)


@pytest.fixture
def device(request):
    """`test_compile_cuda`'s fake device: host memory as device memory, each launch's IR run by the interpreter."""
    fake = FakeDevice(request.param)
    previous = lower_cuda.set_device_backend(fake)
    lower_cuda.clear_cuda_kernel_cache()
    yield fake
    lower_cuda.set_device_backend(previous)
    lower_cuda.clear_cuda_kernel_cache()


@pytest.mark.parametrize("device", ["sm_80", "sm_90"], indirect=True)
@pytest.mark.parametrize("storage", STORAGE)
@pytest.mark.parametrize("case", ["chain", "numbers", "where", "casts", "sum"])
def test_the_cuda_path_builds_cubins_for_half_groups_and_launches_them_as_planned(case, storage, device):
    x, y = _inputs(storage, (9, 70), seed=2)
    got, want, graph = run_on_fake_device(CASES[case], x, y)
    assert len(graph.kernel_ops) == 1
    _check_launches(device, graph)
    _same(jitorch.Tensor._make(np.asarray(got._data)), want)  # (the fake device ran the IR with the interpreter)
