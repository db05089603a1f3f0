"""Eager float32 products split over jitorch's threads (`jitorch.ops.threaded_matmul`): values and gradients against
torch, at one and two threads, for shapes that take the tiled items (split or not) and shapes that keep BLAS; the
answer is the same at every thread count and on every run."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import assert_same

import jitorch
import jitorch.ops.threaded_matmul as threaded
from jitorch.codegen.llvm_pool import available

pytestmark = pytest.mark.skipif(not available(), reason="the native pool needs Linux on x86-64 or AArch64")


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    before = jitorch.get_num_threads()
    jitorch.set_num_threads(request.param)
    yield request.param
    jitorch.set_num_threads(before)


@pytest.fixture
def threaded_calls(monkeypatch):
    """The products `tiled_matmul` answered (not None), as ``(a.shape, b.shape)``."""
    calls = []
    real = threaded.threaded_matmul

    def spy(a, b):
        out = real(a, b)
        if out is not None:
            calls.append((a.shape, b.shape))
        return out

    import jitorch.ops.host_matmul as host

    monkeypatch.setattr(host, "threaded_matmul", spy)
    return calls


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _close(jt, tt, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(jt.detach().numpy(), tt.detach().numpy(), rtol=rtol, atol=atol)


# (x shape, weight (out, in)) -> products `threaded_matmul` answers at (1, 2) threads, of the forward (x @ W.T) and the
# two gradient products: from 32 rows all three take the tiles (split at two threads); an MLP's 10-wide output layer
# is BLAS items at two threads (OpenBLAS would thread each product itself) and NumPy's at one; 8 rows keep NumPy's.
LINEAR_SHAPES = {((16, 64, 128), (384, 128)): (3, 3), ((1024, 512), (128, 512)): (3, 3),
                 ((200, 96), (300, 96)): (3, 3), ((128, 512), (10, 512)): (0, 3), ((8, 128), (64, 128)): (0, 0)}


@pytest.mark.parametrize("x_shape,w_shape", list(LINEAR_SHAPES))
def test_linear_values_and_gradients(threads, threaded_calls, x_shape, w_shape):
    rng = np.random.default_rng(1)
    x, w, b = _f32(rng, *x_shape), _f32(rng, *w_shape), _f32(rng, w_shape[0])
    g = _f32(rng, *x_shape[:-1], w_shape[0])
    outs = []
    for lib in (jitorch, torch):
        args = [lib.tensor(a, requires_grad=True) for a in (x, w, b)]
        y = lib.nn.functional.linear(*args)
        y.backward(lib.tensor(g))
        outs.append((y, *(a.grad for a in args)))
    for jt, tt in zip(*outs):
        _close(jt, tt, rtol=1e-4, atol=1e-4)
    assert len(threaded_calls) == LINEAR_SHAPES[x_shape, w_shape][threads - 1]


# 4 x 4 heads: the two products with a transposed right operand (q @ k.T, go @ v.T) take the tiles at every thread
# count, the other four BLAS items at two threads; 1 x 4 heads: too little work to split, only the tiles.
@pytest.mark.parametrize("batch", [4, 1])
def test_attention_products_values_and_gradients(threads, threaded_calls, batch):
    """q @ k.T and att @ v of heads split from one projection (row stride 3 * 128), and their four gradients."""
    rng = np.random.default_rng(2)
    qkv = _f32(rng, batch, 64, 384)
    att = _f32(rng, batch, 4, 64, 64)
    gs, go = _f32(rng, batch, 4, 64, 64), _f32(rng, batch, 4, 64, 32)
    outs = []
    for lib in (jitorch, torch):
        qkv_t, att_t = lib.tensor(qkv, requires_grad=True), lib.tensor(att, requires_grad=True)
        q, k, v = (z.view(batch, 64, 4, 32).transpose(1, 2) for z in qkv_t.split(128, dim=-1))
        scores = q @ k.transpose(-2, -1)
        out = att_t @ v
        lib.autograd.backward([scores, out], [lib.tensor(gs), lib.tensor(go)])
        outs.append((scores, out, qkv_t.grad, att_t.grad))
    for jt, tt in zip(*outs):
        _close(jt, tt, rtol=1e-4, atol=1e-4)
    assert len(threaded_calls) == (6 if threads == 2 and batch == 4 else 2)


def test_broadcast_batch_and_strided_operands(threads):
    rng = np.random.default_rng(4)
    a = _f32(rng, 1, 4, 64, 48)[..., ::-1, :]  # a negative row stride, a batch dim broadcast over 8
    b = _f32(rng, 8, 1, 96, 48).swapaxes(-1, -2)  # b with a unit ROW stride
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    out = jitorch.matmul(jitorch.tensor(a.copy()), jitorch.tensor(b.copy()).contiguous().transpose(-2, -1)
                         .transpose(-2, -1))
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)
    direct = threaded.threaded_matmul(a, b)
    if threads == 2:
        assert direct is not None
        np.testing.assert_allclose(direct, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("a_shape,b_shape", [((128, 1024), (1024, 512)), ((1024, 128), (128, 384)),
                                             ((4, 4, 64, 32), (4, 4, 32, 64))])
def test_same_answer_at_every_thread_count_and_run(a_shape, b_shape):
    """Each element of c is one item's sum over all of k, in a fixed order: the bits do not depend on the split."""
    rng = np.random.default_rng(5)
    a, b = _f32(rng, *a_shape), _f32(rng, *b_shape)
    if len(a_shape) == 2:
        a = np.ascontiguousarray(a.T).T  # the weight gradient's g.T: a column-major left operand
    before = jitorch.get_num_threads()
    answers = []
    try:
        for n in (2, 2, 2, 1, 3):
            jitorch.set_num_threads(n)
            out = threaded.threaded_matmul(a, b)
            if out is None:  # a batch splits only where there are threads to split it over
                assert n == 1 and len(a_shape) == 4
                continue
            answers.append(out)
    finally:
        jitorch.set_num_threads(before)
    for other in answers[1:]:
        assert np.array_equal(answers[0], other)
    np.testing.assert_allclose(answers[0], np.matmul(a.astype(np.float64), b.astype(np.float64)), rtol=1e-4,
                               atol=1e-4)


def test_special_values_propagate_as_blas():
    rng = np.random.default_rng(6)
    a, b = _f32(rng, 96, 64), _f32(rng, 64, 128)
    a[3, 5], a[7, :] = np.inf, 0.0
    b[5, 9], b[2, 7] = 0.0, np.nan
    out = threaded.threaded_matmul(a, b)
    assert out is not None
    ref = np.matmul(a, b)
    assert np.array_equal(np.isnan(out), np.isnan(ref)) and np.array_equal(np.isinf(out), np.isinf(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(out[finite], ref[finite], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("a_shape,b_shape", [((0, 64), (64, 128)), ((64, 0), (0, 128)), ((64, 64), (64, 0)),
                                             ((0, 64, 64), (0, 64, 64))])
def test_empty_products_keep_numpy(threads, a_shape, b_shape):
    rng = np.random.default_rng(7)
    a, b = _f32(rng, *a_shape), _f32(rng, *b_shape)
    assert threaded.threaded_matmul(a, b) is None
    out = jitorch.matmul(jitorch.tensor(a), jitorch.tensor(b))
    ref = torch.matmul(torch.tensor(a), torch.tensor(b))
    assert tuple(out.shape) == tuple(ref.shape) and bool((out.numpy() == 0).all())


def test_other_dtypes_keep_numpy(threads):
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((128, 256)), rng.standard_normal((256, 128))
    assert threaded.threaded_matmul(a, b) is None
    assert threaded.threaded_matmul(a.astype(np.float32), b) is None


def test_aliased_and_expanded_operands(threads):
    """x @ x.T reads one buffer twice; an expanded operand has stride-0 rows: values and gradients as torch's."""
    rng = np.random.default_rng(9)
    x, row, g1, g2 = _f32(rng, 96, 128), _f32(rng, 1, 128), _f32(rng, 96, 96), _f32(rng, 64, 96)
    outs = []
    for lib in (jitorch, torch):
        xt, rt = lib.tensor(x, requires_grad=True), lib.tensor(row, requires_grad=True)
        gram = xt @ xt.t()
        expanded = rt.expand(64, 128) @ xt.t()
        lib.autograd.backward([gram, expanded], [lib.tensor(g1), lib.tensor(g2)])
        outs.append((gram, expanded, xt.grad, rt.grad))
    for jt, tt in zip(*outs):
        _close(jt, tt, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("transposed_a", [False, True])
def test_blas_items_with_an_lp64_blas(transposed_a):
    """The BLAS loop with 32-bit Fortran integers (SciPy's ``sgemm``; NumPy's own is ILP64), row blocks as items."""
    import ctypes

    from jitorch.codegen.llvm_gemm import blas_operands
    from jitorch.codegen.llvm_gemm_items import BLAS_ITEMS_TYPES, blas_items_address
    from jitorch.runtime.host_blas import _scipy_gemm

    sgemm = _scipy_gemm("s")
    rng = np.random.default_rng(10)
    a, b = _f32(rng, 50, 70), _f32(rng, 70, 30)
    if transposed_a:
        a = np.ascontiguousarray(a.T).T
    shape = threaded._Shape("f32", 50, 30, 70, tuple(s // 4 for s in a.strides), (30, 1), (30, 1))
    transb, transa, ldb, lda, _ = blas_operands(shape)
    assert transa == ("T" if transposed_a else "N")
    loop = blas_items_address("f32", transb, transa, sgemm.int_bits)
    items = np.zeros((3, 6), np.int64)
    for i, (first, rows) in enumerate(((0, 20), (20, 20), (40, 10))):
        items[i, :4] = first * shape.a_strides[0], 0, first * 30, rows
    c = np.full((50, 30), np.nan, np.float32)
    call = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64,
                            *[ctypes.c_void_p if t == "ptr" else ctypes.c_int64 for t in BLAS_ITEMS_TYPES])(loop)
    call(0, 3, a.ctypes.data, b.ctypes.data, c.ctypes.data, items.ctypes.data, sgemm.address, 30, 70, ldb, lda, 30)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_a_batch_past_the_item_limit_keeps_numpy(threads):
    rng = np.random.default_rng(11)
    count = threaded.MAX_ITEMS + 1
    a, b = _f32(rng, count, 8, 16), _f32(rng, count, 16, 8)
    assert threaded.threaded_matmul(a, b) is None
    small = threaded.threaded_matmul(a[:2048], b[:2048])  # 2048 x 8 x 8 x 16 multiply-adds: split at two threads
    assert (small is not None) == (threads == 2)
    if small is not None:
        np.testing.assert_array_equal(small, np.matmul(a[:2048], b[:2048]))  # the same BLAS call per matrix


def test_meta_products_compute_nothing():
    # A meta array is an ndarray subclass with no data: the items would read its zero pages and allocate c.
    big = jitorch.empty(1 << 15, 1 << 15, device="meta")
    out = big @ big.t()
    assert out.is_meta and tuple(out.shape) == (1 << 15, 1 << 15)


@pytest.mark.parametrize("shape", [(1, 300, 96), (2, 3, 70, 96), (4, 1, 96)])
def test_a_batch_times_one_matrix_folds_into_rows_as_torch(shape):
    # ATen folds (..., m, k) @ (k, n) into one product: its rows split over threads, not one item per matrix.
    rng = np.random.default_rng(7)
    a = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((96, 80)).astype(np.float32)
    ja, ta = jitorch.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    jw, tw = jitorch.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    jy, ty = ja @ jw, ta @ tw
    assert_same(jy, ty, atol=1e-4, rtol=1e-5)
    up = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
    jg = jitorch.autograd.grad(jy, (ja, jw), jitorch.tensor(up))
    tg = torch.autograd.grad(ty, (ta, tw), torch.tensor(up))
    for j, t in zip(jg, tg):
        assert_same(j, t, atol=1e-3, rtol=1e-4)
    folded = threaded.threaded_matmul(a, w)
    if folded is not None:  # the tiles take it: the same bits as the 2-D product of the rows
        flat = threaded.threaded_matmul(a.reshape(-1, 96), w)
        assert np.array_equal(folded, flat.reshape(folded.shape))
