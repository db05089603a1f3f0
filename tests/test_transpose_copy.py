"""Transposing copies: eager ``contiguous``/``reshape``/``clone``/``copy_`` of permuted views through the tiled copy
kernel (`jitorch.ops.native_transpose`), and the tiled loops of generated kernels with a transposed operand
(`codegen.llvm_tiled`), against torch and against the plain loop nest."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.codegen import llvm_emit
from jitorch.codegen.ir import Buffer, Kernel, Store, load, op
from jitorch.codegen.ir_params import parametrize
from jitorch.codegen.llvm_compile import CompiledKernel, compile_kernel
from jitorch.codegen.llvm_emit import emit_kernel
from jitorch.ops import native_transpose

from helpers import assert_same, check_op

DTYPES = {"float32": (np.float32, torch.float32), "float64": (np.float64, torch.float64),
          "int64": (np.int64, torch.int64), "int32": (np.int32, torch.int32), "bool": (np.bool_, torch.bool)}


def _values(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        return rng.integers(-1000, 1000, shape).astype(DTYPES[dtype][0])
    return rng.standard_normal(shape).astype(DTYPES[dtype][0])


@pytest.fixture
def small_routed(monkeypatch):
    """Route views of any size through the kernel, so odd and small shapes exercise its edges."""
    monkeypatch.setattr(native_transpose, "MIN_SIZE", 0)
    monkeypatch.setattr(native_transpose, "_MIN_SIDE", 1)
    native_transpose._plans.clear()
    yield
    native_transpose._plans.clear()


PERMUTED = [((300, 200), (1, 0)), ((17, 33), (1, 0)), ((1, 5000), (1, 0)), ((5000, 1), (1, 0)), ((0, 40), (1, 0)),
            ((6, 70, 90), (0, 2, 1)), ((70, 6, 90), (2, 1, 0)), ((33, 40, 17), (1, 2, 0)),
            ((16, 64, 4, 32), (0, 2, 1, 3)), ((4, 40, 3, 50), (0, 3, 1, 2)), ((5, 6, 7, 8), (3, 2, 1, 0))]


@pytest.mark.parametrize("routed", [False, True])
@pytest.mark.parametrize("shape,perm", PERMUTED)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_permute_contiguous_matches_torch(shape, perm, dtype, routed, request):
    if routed:
        request.getfixturevalue("small_routed")
    a = _values(shape, dtype)
    jt = jitorch.from_numpy(a.copy()).permute(*perm).contiguous()
    th = torch.from_numpy(a.copy()).permute(*perm).contiguous()
    assert jt.is_contiguous()
    assert_same(jt, th)


def test_large_transposes_take_the_kernel():
    """Views large enough take the kernel path (a plan is made), and copy exactly."""
    native_transpose._plans.clear()
    for shape, perm in [((257, 129), (1, 0)), ((16, 64, 4, 32), (0, 2, 1, 3)), ((9, 130, 111), (0, 2, 1))]:
        a = _values(shape, "float32", seed=1)
        v = a.transpose(perm)
        out = native_transpose.transposed_copy(v)
        assert out is not None and out.flags.c_contiguous
        assert out.tobytes() == np.ascontiguousarray(v).tobytes()
    assert native_transpose.transposed_copy(_values((300, 300), "float32")[::2]) is None  # a slice: NumPy's
    assert native_transpose.transposed_copy(_values((300, 300), "float32").astype(np.float16).T) is None  # 2 bytes


def test_nan_payloads_and_complex_copied_bit_for_bit(small_routed):
    bits = np.random.default_rng(2).integers(0, 2 ** 32, (40, 70), dtype=np.uint64).astype(np.uint32)
    bits[::3, ::5] = 0x7FA00001  # signalling NaNs survive a copy as integers
    a = bits.view(np.float32)
    assert native_transpose.transposed_copy(a.T).tobytes() == np.ascontiguousarray(a.T).tobytes()
    c = (_values((30, 50), "float32") + 1j * _values((30, 50), "float32", 3)).astype(np.complex64)
    assert np.array_equal(native_transpose.transposed_copy(c.T), c.T)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
def test_strided_and_negative_views(small_routed, dtype):
    a = _values((90, 120), dtype, seed=4)
    views = [a[::2, ::3].T, a[::-1].T, a[:, ::-1].T, a[::-2, 1::2].T, a.reshape(9, 10, 120)[:, ::-1].transpose(2, 0, 1)]
    for v in views:
        out = native_transpose.transposed_copy(v)
        want = np.ascontiguousarray(v)
        assert out is None or (out.flags.c_contiguous and np.array_equal(out, want))
    t = jitorch.from_numpy(a.copy())
    th = torch.from_numpy(a.copy())
    assert_same(t[::2, ::3].t().contiguous(), th[::2, ::3].t().contiguous())
    assert_same(t.flip(0).t().contiguous(), th.flip(0).t().contiguous())


@pytest.mark.parametrize("shape", [(130, 200), (17, 33)])
def test_reshape_clone_copy_match_torch(shape, small_routed):
    a = _values((4,) + shape, "float32", seed=5)
    check_op(lambda x: x.transpose(1, 2).reshape(4, -1), lambda x: x.transpose(1, 2).reshape(4, -1), [a], atol=0,
             rtol=0)
    check_op(lambda x: x.transpose(1, 2).clone(memory_format=jitorch.contiguous_format),
             lambda x: x.transpose(1, 2).clone(memory_format=torch.contiguous_format), [a], atol=0, rtol=0)
    dst_j = jitorch.zeros(4, shape[1], shape[0])
    dst_t = torch.zeros(4, shape[1], shape[0])
    dst_j.copy_(jitorch.from_numpy(a.copy()).transpose(1, 2))
    dst_t.copy_(torch.from_numpy(a.copy()).transpose(1, 2))
    assert_same(dst_j, dst_t)


@pytest.mark.parametrize("shape", [(300, 200), (17, 33)])
def test_gradient_of_transposed_contiguous(shape, small_routed):
    a = _values(shape, "float64", seed=6)
    check_op(lambda x: x.t().contiguous() * 2, lambda x: x.t().contiguous() * 2, [a], atol=0, rtol=0)
    b = _values((2, 8, 40, 16), "float32", seed=7)  # attention's head merge and its backward
    check_op(lambda x: x.transpose(1, 2).reshape(2, 40, 128), lambda x: x.transpose(1, 2).reshape(2, 40, 128), [b],
             atol=0, rtol=0)


def test_threads_give_the_same_copy():
    a = _values((1024, 700), "float32", seed=8)
    before = jitorch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2, 3):
            jitorch.set_num_threads(threads)
            outs.append(jitorch.from_numpy(a).t().contiguous().numpy())
            outs.append(jitorch.from_numpy(a.reshape(8, 128, 700)).transpose(1, 2).contiguous().numpy())
    finally:
        jitorch.set_num_threads(before)
    for i in range(2, len(outs)):
        assert np.array_equal(outs[i], outs[i % 2])
    assert np.array_equal(outs[0], a.T)


# -- the generated kernels --------------------------------------------------------------------------------------------
def _untiled(kernel, monkeypatch, tag):
    """``kernel`` compiled with the tiled path switched off (the plain loop nest), under a name of its own."""
    with monkeypatch.context() as m:
        m.setattr(llvm_emit, "transposed_dims", lambda k: None)
        return CompiledKernel(kernel, name=f"untiled_{tag}")


def _run(compiled, arrays):
    compiled(0, compiled.outer, *compiled.addresses(arrays))


def test_transposed_kernel_emits_tiles():
    k = Kernel((16, 64, 128), (Buffer("f32", (8192, 128, 1)), Buffer("f32", (8192, 1, 64))),
               (Store(0, load(1, "f32")),))
    text = emit_kernel(parametrize(k)[0])
    assert "shufflevector <16 x float>" in text and "u2.full" in text
    plain = Kernel((16, 64, 128), (Buffer("f32", (8192, 128, 1)),) * 2, (Store(0, load(1, "f32")),))
    assert "shufflevector" not in emit_kernel(parametrize(plain)[0])
    strided = Kernel((64, 128), (Buffer("f32", (128, 1)), Buffer("f32", (256, 2))), (Store(0, load(1, "f32")),))
    assert "u1.full" not in emit_kernel(parametrize(strided)[0])


@pytest.mark.parametrize("seed", range(6))
def test_tiled_kernel_matches_untiled(seed, monkeypatch):
    """Random shapes and bodies (a transposed operand beside a broadcast and a contiguous one, a cast, a flipped
    transposed operand) give the same bits tiled and untiled."""
    rng = np.random.default_rng(seed)
    rows, cols = (int(n) for n in rng.integers(1, 90, 2))
    dt = ["f32", "f64", "i32", "i64", "bool"][seed % 5]
    np_dt = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "bool": np.bool_}[dt]
    x = (rng.standard_normal(rows * cols) * 50).astype(np_dt)
    y = (rng.standard_normal(rows * cols) * 50).astype(np_dt)
    bias = (rng.standard_normal(cols) * 50).astype(np_dt)
    combine = "or" if dt == "bool" else "add"
    value = op(combine, op(combine, load(1, dt), load(2, dt)), load(3, dt))
    if seed % 2:  # the transposed operand flipped along its contiguous dim keeps element loads
        value = op(combine, value, load(4, dt))
    buffers = (Buffer(dt, (cols, 1)), Buffer(dt, (1, rows)), Buffer(dt, (cols, 1)), Buffer(dt, (0, 1)),
               Buffer(dt, (-1, rows), rows - 1))
    k = Kernel((rows, cols), buffers, (Store(0, value),))
    arrays = [np.zeros(rows * cols, np_dt), x, y, bias, x[::-1].copy()]
    tiled = compile_kernel(k)
    assert rows < 2 or cols < 2 or "full" in tiled.llvm_ir
    out_tiled = arrays[0].copy()
    _run(tiled, [out_tiled] + arrays[1:])
    out_plain = arrays[0].copy()
    _run(_untiled(k, monkeypatch, f"{seed}_{rows}_{cols}"), [out_plain] + arrays[1:])
    assert out_tiled.tobytes() == out_plain.tobytes()


def test_copy_kernel_of_a_captured_step_and_its_split(monkeypatch):
    """The (16, 64, 128) copy from strides (8192, 1, 64): exact, and the same split over the range as whole."""
    k = Kernel((16, 64, 128), (Buffer("f32", (8192, 128, 1)), Buffer("f32", (8192, 1, 64))),
               (Store(0, load(1, "f32")),))
    src = np.random.default_rng(9).standard_normal(16 * 8192).astype(np.float32)
    want = np.lib.stride_tricks.as_strided(src, (16, 64, 128), (8192 * 4, 4, 256)).ravel()
    compiled = compile_kernel(k)
    out = np.zeros_like(src)
    _run(compiled, [out, src])
    assert np.array_equal(out, want)
    parts = np.zeros_like(src)
    addresses = compiled.addresses([parts, src])
    for start, stop in ((0, 5), (5, 11), (11, 16)):
        compiled(start, stop, *addresses)
    assert np.array_equal(parts, want)
