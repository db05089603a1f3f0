"""The float32 register-tile product with its right operand packed as it goes (`codegen.llvm_gemm_tiled`): every
packing path (unit column stride, unit row stride by register transpose, gathers), ragged panels and term blocks,
the pool split, a column-major output, and the CPU graph's products taking it."""
import numpy as np
import pytest

import jitorch
from jitorch.codegen.llvm_gemm_packed import DEPTH, panel, rows_max
from jitorch.codegen.llvm_gemm_tiled import TILED_MIN_FLOPS, tiled_matmul, tiled_pays
from jitorch.codegen.llvm_objcache import default_cache
from jitorch.codegen.llvm_program import Gemm, Ref, compile_program
from jitorch.cpu._lower import product_call


def _layouts(x):
    """``x`` as C order, Fortran order, and a strided slice of a larger array (neither stride is 1)."""
    big = np.zeros((2 * x.shape[0] + 1, 3 * x.shape[1] + 2), np.float32)
    strided = big[1::2, 2::3][: x.shape[0], : x.shape[1]]
    strided[...] = x
    return {"C": x, "F": np.asfortranarray(x), "strided": strided}


SIZES = [(1, 1, 1), (7, 3, 70), (rows_max() + 1, DEPTH + 5, panel() + 1), (13, 0, 5),
         (2 * rows_max(), 2 * DEPTH, 2 * panel()), (3, 17, panel() - 1), (25, DEPTH + 3, 31)]


@pytest.mark.parametrize("m,k,n", SIZES)
def test_every_pack_path_matches_float64(m, k, n):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    for a_name, aa in _layouts(a).items():
        for b_name, bb in _layouts(b).items():
            got = tiled_matmul(aa, bb)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(k, 1), err_msg=f"a {a_name}, b {b_name}")


def test_nonfinite_values_propagate_per_row_and_column():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((9, 40)).astype(np.float32)
    b = rng.standard_normal((40, 70)).astype(np.float32)
    a[2, 5], b[7, 66] = np.nan, np.inf
    for bb in (b, np.asfortranarray(b)):
        got = tiled_matmul(a, bb)
        assert np.isnan(got[2]).all()
        want = a.astype(np.float64) @ b.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


def test_bad_operands_are_refused_with_shapes():
    with pytest.raises(ValueError, match=r"tiled_matmul: .*\(3, 4\).*\(5, 2\)"):
        tiled_matmul(np.zeros((3, 4), np.float32), np.zeros((5, 2), np.float32))


def _program_product(m, n, k, tiled, c_order="C", b_order="C"):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    b = np.asfortranarray(b) if b_order == "F" else b
    c = np.zeros((m, n), np.float32, order=c_order)
    spec = {"dtype": "f32", "m": m, "n": n, "k": k, "a_strides": (k, 1),
            "b_strides": tuple(s // 4 for s in b.strides), "c_strides": tuple(s // 4 for s in c.strides)}
    call = product_call(spec, Ref(0), Ref(1), Ref(2), None)
    if tiled is not None:  # the split asked for, whatever the thread count of this process
        call = Gemm(**{**call.__dict__, "tiled": tiled})
    table = np.array([a.ctypes.data, b.ctypes.data, c.ctypes.data], np.uint64)
    compile_program([call], default_cache())(table.ctypes.data)
    return call, c, a.astype(np.float64) @ b.astype(np.float64)


def test_products_of_a_program_take_the_tiles_and_a_split_changes_no_bit():
    m, n, k = 96, 5 * panel() + 3, 300
    assert m * n * k >= TILED_MIN_FLOPS
    call, one, want = _program_product(m, n, k, 1)
    assert call.tiled >= 1 and tiled_pays(call)
    np.testing.assert_allclose(one, want, rtol=1e-5, atol=1e-4)
    for threads in (2, 3):
        _, split, _ = _program_product(m, n, k, threads)
        np.testing.assert_array_equal(split, one)  # panels own their columns: the split cannot reorder a sum


def test_a_column_major_output_is_computed_transposed():
    m, n, k = 3 * panel() - 5, 70, 400
    call, c, want = _program_product(m, n, k, None, c_order="F", b_order="F")
    assert tiled_pays(call) and (call.m, call.n) == (n, m)  # c.T = b.T @ a.T
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)


def test_small_products_keep_the_other_paths():
    call, c, want = _program_product(8, 8, 8, None)
    assert not tiled_pays(call)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


def test_a_captured_linear_layer_runs_tiled_and_matches_eager():
    jitorch.manual_seed(0)
    layer = jitorch.nn.Linear(300, 200)
    x = jitorch.randn(64, 300)
    w, b = (t.detach().numpy().astype(np.float64) for t in (layer.weight, layer.bias))
    want = x.numpy().astype(np.float64) @ w.T + b
    g = jitorch.cpu.CPUGraph()
    with jitorch.cpu.graph(g):
        y = layer(x)
    g.replay()
    replay = g._build()
    assert any(isinstance(c, Gemm) and c.tiled and tiled_pays(c) for c in replay.program_calls)
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-5, atol=1e-5)


def test_values_the_other_path_loads_are_reloaded_after_it():
    # Two small products with a transposed right operand: the tiles fit but do not pay, so each runs the other path
    # (the reduction loop: no BLAS in this table), whose kernel address is first loaded inside that branch.
    rng = np.random.default_rng(5)
    a = rng.standard_normal((6, 5)).astype(np.float32)
    bt = rng.standard_normal((7, 5)).astype(np.float32)  # b = bt.T: unit row stride
    c1, c2 = np.zeros((6, 7), np.float32), np.zeros((6, 7), np.float32)
    spec = {"dtype": "f32", "m": 6, "n": 7, "k": 5, "a_strides": (5, 1), "b_strides": (1, 5), "c_strides": (7, 1)}
    calls = [product_call(spec, Ref(0), Ref(1), Ref(c), None) for c in (2, 3)]
    assert all(c.tiled and not tiled_pays(c) and c.blas is None for c in calls)
    table = np.array([a.ctypes.data, bt.ctypes.data, c1.ctypes.data, c2.ctypes.data], np.uint64)
    compile_program(calls, default_cache())(table.ctypes.data)
    for c in (c1, c2):
        np.testing.assert_allclose(c, a @ bt.T, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(8, 3, 4), (8, 2, 6), (16, 4, 6), (16, 2, 12)])
def test_every_geometry_is_right_whatever_the_host(shape):
    # AVX2 hosts get 8 lanes (3 vectors, or 2 by 6 rows for narrow products): their code runs here too.
    lanes, vectors, _ = shape
    rng = np.random.default_rng(lanes * vectors)
    m, k, n = 13, DEPTH + 7, 2 * lanes * vectors + 5
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    for bb in (b, np.asfortranarray(b)):
        np.testing.assert_allclose(tiled_matmul(a, bb, shape), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
