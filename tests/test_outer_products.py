"""Products over one term (``k == 1``) skip BLAS, which is slow there: eagerly as a broadcast multiply
(`jitorch.ops.host_matmul`), in native programs as an elementwise kernel (`codegen.llvm_gemm.gemm_outer_kernel`).
Both must give exactly what the product gives, for any strides and batch broadcasting; the layers that make such
products (batch-1 weight gradients, ``Linear(1, n)``, a recurrent cell at batch 1) match torch, compiled too."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.codegen.llvm_gemm import gemm_outer_kernel
from jitorch.codegen.llvm_program import Gemm, Ref, compile_program
from jitorch.ops.host_matmul import matmul


@pytest.mark.parametrize("shapes", [((5, 1), (1, 7)), ((2, 3, 1), (1, 4)), ((3, 1), (4, 1, 6)), ((0, 1), (1, 3)),
                                    ((4, 1), (1, 0)), ((2, 1, 1), (2, 1, 5))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_host_outer_product_equals_matmul_bit_for_bit(shapes, dtype):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(dtype) for s in shapes)
    got, want = matmul(np, a, b), np.matmul(a, b)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_host_outer_product_of_strided_views_and_other_shapes_pass_through():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((6, 4)).astype(np.float32)[::2, 1:2]  # (3, 1), strided
    b = rng.standard_normal((3, 8)).astype(np.float32)[1:2, ::2]  # (1, 4), strided
    np.testing.assert_array_equal(matmul(np, a, b), np.matmul(a, b))
    with pytest.raises(ValueError):  # k mismatch still refused, not broadcast
        matmul(np, np.ones((3, 1)), np.ones((2, 4)))
    np.testing.assert_array_equal(matmul(np, np.ones((2, 3)), np.ones((3, 2))), np.full((2, 2), 3.0))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_program_outer_product_any_strides(dtype):
    np_dt = {"f32": np.float32, "f64": np.float64}[dtype]
    rng = np.random.default_rng(2)
    m, n = 37, 301  # past a register chunk, odd
    a = rng.standard_normal((m, 3)).astype(np_dt)  # column 1 is the (m, 1) operand: row stride 3
    b = rng.standard_normal((2, n)).astype(np_dt)  # row 1 is the (1, n) operand
    c = np.zeros((n, m), np_dt)  # written transposed: strides (1, m)
    item = a.itemsize
    call = Gemm(dtype, m, n, 1, Ref(0, item), (3, 1), Ref(1, n * item), (n, 1), Ref(2), (1, m))
    kernel = gemm_outer_kernel(call)
    assert kernel.shape == (m, n) and kernel.reduce_axes == 0
    table = np.array([a.ctypes.data, b.ctypes.data, c.ctypes.data], np.uint64)
    compile_program([call])(table.ctypes.data)
    np.testing.assert_array_equal(c.T, np.matmul(a[:, 1:2], b[1:2]))


def _linear_case(lib, x, w, b, g):
    xt, wt, bt = (lib.tensor(v, requires_grad=True) for v in (x, w, b))
    out = lib.nn.functional.linear(xt, wt, bt)
    out.backward(lib.tensor(g))
    return [out.detach().numpy(), xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()]


@pytest.mark.parametrize("sizes", [(1, 784, 64), (50, 1, 16), (8, 16, 1)])  # batch 1, Linear(1, n), Linear(n, 1)
def test_linear_products_over_one_term_match_torch(sizes):
    batch, fin, fout = sizes
    rng = np.random.default_rng(3)
    x, w, b, g = (rng.standard_normal(s).astype(np.float32) for s in ((batch, fin), (fout, fin), (fout,),
                                                                      (batch, fout)))
    for got, want in zip(_linear_case(jitorch, x, w, b, g), _linear_case(torch, x, w, b, g)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_compiled_batch_one_training_matches_eager():
    jitorch.manual_seed(0)
    model = jitorch.nn.Sequential(jitorch.nn.Linear(300, 200), jitorch.nn.ReLU(), jitorch.nn.Linear(200, 3))
    compiled = jitorch.compile(model)
    rng = np.random.default_rng(4)
    x, g = jitorch.tensor(rng.standard_normal((1, 300)).astype(np.float32)), jitorch.tensor(
        rng.standard_normal((1, 3)).astype(np.float32))
    grads = []
    for run in (model, compiled):
        model.zero_grad()
        run(x).backward(g)
        grads.append([p.grad.numpy().copy() for p in model.parameters()])
    for got, want in zip(*grads):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_lstm_cell_batch_one_matches_torch():
    rng = np.random.default_rng(5)
    cells = [lib.nn.LSTMCell(8, 16) for lib in (jitorch, torch)]
    with torch.no_grad():
        for name, p in cells[1].named_parameters():
            p.copy_(torch.from_numpy(getattr(cells[0], name).detach().numpy()))
    x, h, c, g = (rng.standard_normal(s).astype(np.float32) for s in ((1, 8), (1, 16), (1, 16), (1, 16)))
    results = []
    for lib, cell in zip((jitorch, torch), cells):
        xt = lib.tensor(x, requires_grad=True)
        hn, _ = cell(xt, (lib.tensor(h), lib.tensor(c)))
        hn.backward(lib.tensor(g))
        results.append([hn.detach().numpy(), xt.grad.numpy(), cell.weight_hh.grad.numpy(),
                        cell.weight_ih.grad.numpy()])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows", [1, 3, 4, 8, 32, 33])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("features", [(96, 70), (256, 300)], ids=str)  # the direct product, then the transposed one
def test_few_rows_times_a_transposed_matrix(rows, dtype, features):
    rng = np.random.default_rng(rows)
    k, n = features
    x = rng.standard_normal((rows, k)).astype(dtype)
    w = rng.standard_normal((n, k)).astype(dtype)
    got = matmul(np, x, w.T)
    assert got.shape == (rows, n) and got.flags.c_contiguous and got.dtype == dtype
    np.testing.assert_allclose(got, x.astype(np.float64) @ w.T.astype(np.float64),
                               rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-4 if dtype == np.float32 else 1e-12)
