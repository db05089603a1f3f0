"""Eager softmax, log_softmax and layer norm through the generated row kernels (jitorch/ops/native_rows.py).

From 4096 contiguous float elements reduced over the last dimension(s) the rows run one generated kernel instead of
NumPy's passes; everything else keeps NumPy. Both must match torch, forward and backward.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as JF
import torch.nn.functional as TF
from jitorch.ops import native_rows

from helpers import check_op, make_array

SHAPES = [(64, 100), (3, 37, 129), (5000, 1), (2, 4096)]


def _kernels_for(name):
    return {k for k in native_rows._kernels if k[0] == name}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_rows_match_torch_forward_and_backward_through_the_kernels(fn, dtype, shape):
    x = make_array(shape, dtype, np.random.default_rng(len(shape)), -8.0, 8.0)
    tol = 2e-6 if dtype == "float32" else 1e-12
    native_rows._kernels.clear()
    check_op(lambda a: getattr(JF, fn)(a, dim=-1), lambda a: getattr(TF, fn)(a, dim=-1), [x], atol=tol, rtol=tol)
    assert _kernels_for(fn) and _kernels_for(f"{fn}_backward"), "the generated kernels did not run"


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_rows_keep_numpy_for_other_dims(fn):
    x = make_array((80, 90), "float32", np.random.default_rng(1), -5.0, 5.0)
    native_rows._kernels.clear()
    check_op(lambda a: getattr(JF, fn)(a, dim=0), lambda a: getattr(TF, fn)(a, dim=0), [x], atol=2e-6)
    assert not _kernels_for(fn)


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
@pytest.mark.parametrize("layout", ["transposed", "sliced"])
def test_softmax_rows_run_on_a_row_major_copy_of_other_layouts(fn, layout):
    # As ATen, the row computes on input.contiguous(): the kernels run, and the result is row-major as torch's.
    x = make_array((80, 90), "float32", np.random.default_rng(1), -5.0, 5.0)
    native_rows._kernels.clear()
    check_op(lambda a: getattr(JF, fn)(a, dim=-1), lambda a: getattr(TF, fn)(a, dim=-1), [x], layout=layout,
             atol=2e-6)
    assert _kernels_for(fn)
    t = jitorch.tensor(x).t()
    assert getattr(JF, fn)(t, dim=-1).is_contiguous() and getattr(JF, fn)(t, dim=0).is_contiguous()


@pytest.mark.parametrize("shape,k", [((64, 128), 1), ((16, 8, 40), 2), ((4097, 3), 1), ((8, 1024), 1)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_matches_torch_forward_and_backward_through_the_kernels(shape, k, dtype, affine):
    rng = np.random.default_rng(2)
    x = make_array(shape, dtype, rng, -4.0, 4.0) + 3.0  # an offset: the variance must not cancel
    params = [make_array(shape[-k:], dtype, rng) for _ in range(2)] if affine else [None, None]
    tol = 1e-5 if dtype == "float32" else 1e-11
    native_rows._kernels.clear()
    check_op(lambda a, w, b: JF.layer_norm(a, shape[-k:], w, b, eps=1e-4),
             lambda a, w, b: TF.layer_norm(a, shape[-k:], w, b, eps=1e-4), [x, *params], atol=tol, rtol=tol,
             grad_atol=4 * tol, grad_rtol=20 * tol)  # rows of 3 with a small variance amplify rounding
    assert _kernels_for("layer_norm")
    if affine:
        assert _kernels_for("layer_norm_backward")


def test_rows_with_nan_and_inf_match_torch():
    x = np.random.default_rng(3).standard_normal((64, 128)).astype(np.float32)
    x[1, 5], x[2, 7], x[3, :] = np.nan, np.inf, -np.inf
    x[4, 9] = -np.inf
    for jf, tf in ((JF.softmax, TF.softmax), (JF.log_softmax, TF.log_softmax)):
        got, want = jf(jitorch.tensor(x), dim=-1).numpy(), tf(torch.tensor(x), dim=-1).numpy()
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7, equal_nan=True)
    got = JF.layer_norm(jitorch.tensor(x), (128,)).numpy()
    np.testing.assert_allclose(got, TF.layer_norm(torch.tensor(x), (128,)).numpy(), rtol=1e-5, atol=1e-5,
                               equal_nan=True)


def test_row_kernels_give_the_same_answer_on_one_and_two_threads():
    x = np.random.default_rng(4).standard_normal((700, 300)).astype(np.float32)
    w = np.random.default_rng(5).standard_normal(300).astype(np.float32)
    old = jitorch.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            jitorch.set_num_threads(threads)
            y = native_rows.softmax(x)
            results.append([y, native_rows.log_softmax(x), native_rows.softmax_backward(x, y),
                            *native_rows.layer_norm(x, w, w, 1, 1e-5)])
    finally:
        jitorch.set_num_threads(old)
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("shape", [(4, 8), (1, 10), (2, 3), (10,), (128, 10)], ids=str)
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_small_softmax_rows_take_the_kernels(fn, shape):
    # The kernels win at every size (a short one runs through the held call); forward and backward match torch.
    x = make_array(shape, "float32", np.random.default_rng(6), -5.0, 5.0)
    native_rows._kernels.clear()
    check_op(lambda a: getattr(JF, fn)(a, dim=-1), lambda a: getattr(TF, fn)(a, dim=-1), [x], atol=2e-6, rtol=2e-6)
    assert _kernels_for(fn) and _kernels_for(f"{fn}_backward")


def test_small_and_mismatched_inputs_take_numpy():
    for x in (np.ones((4, 0), np.float32), np.ones((), np.float32), np.ones((4, 8), np.float16)):
        assert native_rows.softmax(x) is None  # empty, 0-d and half arrays keep their NumPy code
    # layer norm's NumPy form is eight passes: the kernel takes small rows too, and agrees with NumPy's formula
    out, mean, rstd = native_rows.layer_norm(np.arange(32, dtype=np.float32).reshape(4, 8), None, None, 1, 1e-5)
    rows = np.arange(32, dtype=np.float64).reshape(4, 8)
    want = (rows - rows.mean(1, keepdims=True)) / np.sqrt(rows.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    big = np.ones((64, 128), np.float32)
    assert native_rows.softmax(big, dim=0) is None
    assert native_rows.softmax_backward(big, big.astype(np.float64)) is None
    assert native_rows.layer_norm(big, np.ones(128, np.float64), None, 1, 1e-5) is None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(8, 32), (2, 3, 16), (1, 5)], ids=str)
def test_small_layer_norm_sum_backward_takes_the_kernels_with_a_broadcast_gradient(shape, dtype):
    # ``out.sum().backward()`` hands the backward row a broadcast scalar gradient: the row kernel reads its one value
    # (no copy, no NumPy passes), and every gradient matches torch's.
    rng = np.random.default_rng(5)
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in (shape, shape[-1:], shape[-1:]))
    native_rows._kernels.clear()
    grads = []
    for lib, F in ((jitorch, JF), (torch, TF)):
        leaves = [lib.tensor(a, requires_grad=True) for a in (x, w, b)]
        out = F.layer_norm(leaves[0], shape[-1:], leaves[1], leaves[2])
        out.sum().backward()
        grads.append([out.detach().numpy()] + [t.grad.numpy() for t in leaves])
    assert _kernels_for("layer_norm") and _kernels_for("layer_norm_backward")
    tol = 1e-5 if dtype == "float32" else 1e-12
    for got, want in zip(*grads):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(8, 32), (300, 64), (3, 5000)], ids=str)
@pytest.mark.parametrize("params", ["weight", "bias", "both"])
def test_layer_norm_gradients_of_a_lone_weight_or_bias(params, shape):
    # Few rows, many rows (BLAS column sums) and long rows (cascade sums); a bias without a weight once got zeros.
    rng = np.random.default_rng(7)
    x = make_array(shape, "float32", rng) + 2.0
    w, b = (make_array(shape[-1:], "float32", rng) for _ in range(2))
    pick = {"weight": (w, None), "bias": (None, b), "both": (w, b)}[params]
    check_op(lambda a, w, b: JF.layer_norm(a, shape[-1:], w, b), lambda a, w, b: TF.layer_norm(a, shape[-1:], w, b),
             [x, *pick], atol=1e-5, rtol=1e-5, grad_atol=1e-4, grad_rtol=1e-4)
    grads = []
    for lib, F in ((jitorch, JF), (torch, TF)):  # a scaled ``sum()``: a broadcast gradient of 3, not 1
        leaves = [lib.tensor(a, requires_grad=True) if a is not None else None for a in (x, *pick)]
        (F.layer_norm(leaves[0], shape[-1:], leaves[1], leaves[2]).sum() * 3).backward()
        grads.append([t.grad.numpy() for t in leaves if t is not None])
    for got, want in zip(*grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_row_kernels_read_each_calls_arrays():
    # The short-call trampoline keeps one argument block per kernel: every call must fill in its own arrays.
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal((4, 16)).astype(np.float32) for _ in range(3)]
    outs = [native_rows.layer_norm(x, None, None, 1, 1e-5)[0] for x in xs]
    for x, out in zip(xs, outs):
        want = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_layer_norm_without_a_node_keeps_no_scratch_statistics():
    # A call no node records writes its statistics to its plan's scratch arrays; a recorded call (and
    # native_layer_norm) must get statistics of its own, and earlier outputs must keep their values.
    rng = np.random.default_rng(8)
    xs = [rng.standard_normal((8, 32)).astype(np.float32) for _ in range(3)]
    first = JF.layer_norm(jitorch.tensor(xs[0]), (32,))
    kept = first.numpy().copy()
    native = [native_rows.layer_norm(x, None, None, 1, 1e-5) for x in xs[1:]]
    scratch = native_rows.layer_norm(xs[0], None, None, 1, 1e-5, stats=False)
    assert not np.shares_memory(native[0][1], native[1][1]) and not np.shares_memory(native[0][1], scratch[1])
    for x, (_, mean, rstd) in zip(xs[1:], native):
        np.testing.assert_allclose(mean[:, 0], x.mean(1), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(rstd[:, 0], 1 / np.sqrt(x.var(1) + 1e-5), rtol=1e-5)
    np.testing.assert_array_equal(first.numpy(), kept)
    for x in xs:
        leaf_j, leaf_t = jitorch.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        out = JF.layer_norm(leaf_j, (32,))
        JF.layer_norm(jitorch.tensor(x * 5 + 1), (32,))  # a no-grad call between forward and backward
        up = rng.standard_normal(x.shape).astype(np.float32)
        out.backward(jitorch.tensor(up))
        TF.layer_norm(leaf_t, (32,)).backward(torch.tensor(up))
        np.testing.assert_allclose(leaf_j.grad.numpy(), leaf_t.grad.numpy(), rtol=1e-4, atol=1e-5)
