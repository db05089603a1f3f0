"""Multi-pass reducing kernels (phases, accumulators read by later passes, row stores, read-back of an earlier
pass's store): validation, the LLVM backend against the IR interpreter, and the CUDA C compiled by NVRTC."""
from __future__ import annotations

import numpy as np
import pytest
from codegen_helpers import random_view, strided

from jitorch.codegen import interp, nvrtc
from jitorch.codegen.cuda_emit import emit_cuda, strategy
from jitorch.codegen.ir import Buffer, Kernel, Store, const, load, op, reduced
from jitorch.codegen.llvm_compile import compile_kernel


def _softmax(rows, cols, dt="f32", x=None):
    """max; exp stored in the output and summed; the output rescaled in place."""
    x = x or Buffer(dt, (cols, 1))
    v = load(1, dt)
    e = op("exp", op("sub", v, reduced(0, dt)))
    scale = op("mul", load(0, dt), op("div", const(1, dt), reduced(2, dt)))
    return Kernel((rows, cols), (Buffer(dt, (cols, 1)), x),
                  (Store(None, v, "max"), Store(0, e, phase=1), Store(None, e, "sum", 1), Store(0, scale, phase=2)), 1)


def _layer_norm(shape, red, dt="f64", x=None):
    """Two statistics passes, a write pass, and mean/rstd row stores; the weight broadcasts over the outer dims."""
    nout = len(shape) - red
    outer = shape[:nout]
    n = int(np.prod(shape[nout:]))
    contiguous = tuple(int(np.prod(shape[d + 1:])) for d in range(len(shape)))
    rows = tuple(int(np.prod(outer[d + 1:])) for d in range(nout)) + (0,) * red
    weight = Buffer(dt, (0,) * nout + tuple(int(np.prod(shape[nout + d + 1:])) for d in range(red)))
    v = load(3, dt)
    mean = op("div", reduced(0, dt), const(n, dt))
    centered = op("sub", v, mean)
    rstd = op("div", const(1, dt), op("sqrt", op("add", op("div", reduced(1, dt), const(n, dt)), const(1e-5, dt))))
    stores = (Store(None, v, "sum"), Store(None, op("mul", centered, centered), "sum", 1),
              Store(0, op("mul", op("mul", centered, rstd), load(4, dt)), phase=2),
              Store(1, mean, row=True), Store(2, rstd, row=True))
    bufs = (Buffer(dt, contiguous), Buffer(dt, rows), Buffer(dt, rows), x or Buffer(dt, contiguous), weight)
    return Kernel(shape, bufs, stores, red)


def test_accumulator_of_the_same_phase_is_rejected():
    with pytest.raises(ValueError, match="final only after its phase"):
        Kernel((2, 3), (Buffer("f32", (3, 1)), Buffer("f32", (3, 1))),
               (Store(None, load(0, "f32"), "max"), Store(1, reduced(0, "f32"))), 1)
    with pytest.raises(ValueError, match="varies along a reduced axis"):
        Kernel((2, 3), (Buffer("f32", (3, 1)), Buffer("f32", (1, 0))),
               (Store(None, load(0, "f32"), "max"), Store(1, load(0, "f32"), row=True)), 1)
    with pytest.raises(ValueError, match="need reduce_axes"):
        Kernel((3,), (Buffer("f32", (1,)),), (Store(0, load(0, "f32"), phase=1),))


def test_text_names_phases_rows_and_accumulators():
    text = str(_softmax(2, 3))
    assert "acc f32 store0" in text and "store none max" in text and "phase=2" in text


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 7), (5, 1000), (2, 5000), (0, 4), (4, 0)])
def test_softmax_kernel_equals_interpreter(rows, cols):
    rng = np.random.default_rng(rows * 31 + cols)
    k = _softmax(rows, cols)
    x = (rng.standard_normal(rows * cols) * 4).astype(np.float32)
    got, want = np.zeros_like(x), np.zeros_like(x)
    compile_kernel(k).run([got, x])
    interp.run(k, [want, x])
    np.testing.assert_allclose(got, want, rtol=4e-7, atol=1e-9)
    if rows and cols:
        ref = np.exp(x.reshape(rows, cols) - x.reshape(rows, cols).max(1, keepdims=True))
        np.testing.assert_allclose(got, (ref / ref.sum(1, keepdims=True)).ravel(), rtol=2e-6)


@pytest.mark.parametrize("kind", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("shape,red", [((4, 6, 5), 2), ((7, 9), 1), ((3, 2, 8), 1)])
def test_layer_norm_kernel_with_strided_input_equals_interpreter(shape, red, kind):
    rng = np.random.default_rng(len(shape) + red)
    base, view = random_view(rng, shape, np.float64, kind)
    k = _layer_norm(shape, red, x=strided(base, view, shape))
    n = int(np.prod(shape))
    nrows = int(np.prod(shape[:len(shape) - red]))
    weight = rng.standard_normal(int(np.prod(shape[len(shape) - red:])))
    outs_got = [np.zeros(n), np.zeros(nrows), np.zeros(nrows)]
    outs_want = [np.zeros(n), np.zeros(nrows), np.zeros(nrows)]
    compile_kernel(k).run(outs_got + [base, weight])
    interp.run(k, outs_want + [base, weight])
    for g, w in zip(outs_got, outs_want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    axes = tuple(range(len(shape) - red, len(shape)))
    np.testing.assert_allclose(outs_got[1], view.mean(axis=axes).ravel(), rtol=1e-12, atol=1e-12)


def test_threads_split_rows_identically():
    k = compile_kernel(_softmax(64, 300))
    x = np.random.default_rng(0).standard_normal(64 * 300).astype(np.float32)
    whole, parts = np.zeros_like(x), np.zeros_like(x)
    k(0, 64, whole.ctypes.data, x.ctypes.data)
    for a, b in [(0, 13), (13, 40), (40, 64)]:
        k(a, b, parts.ctypes.data, x.ctypes.data)
    np.testing.assert_array_equal(whole, parts)


CUDA_CASES = {"softmax_block": _softmax(8, 1000), "softmax_thread": _softmax(8, 30),
              "layer_norm_block": _layer_norm((4, 6, 50), 2), "layer_norm_thread": _layer_norm((7, 9), 1),
              "softmax_f64": _softmax(3, 4096, "f64")}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(CUDA_CASES))
def test_phased_kernels_compile_with_nvrtc(name, arch):
    source = emit_cuda(CUDA_CASES[name], name)
    assert ("bcast" in source) == (strategy(CUDA_CASES[name]) == "block_reduce")
    result = nvrtc.compile(source, name, arch=arch)
    assert result.log == "", f"NVRTC warnings:\n{result.log}\n{nvrtc.number_lines(source)}"
    assert name in nvrtc.cubin_function_symbols(result.cubin)
