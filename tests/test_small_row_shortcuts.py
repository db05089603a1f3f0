"""The eager shortcuts of small nn rows: softmax/log_softmax straight to their row kernels (`nn_fused.softmax_output`),
cross_entropy/nll_loss on plain (N, C) inputs straight to the nll_loss row, mse_loss on same-shape inputs without its
promotion and broadcast, std as one row (`ops/std_row.py`), the 2-norm without vector_norm's checks. Each must give
what the general path gives: torch's values, errors, autograd nodes and modes.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as JF
import torch.nn.functional as TF

from helpers import check_error, check_op, make_array


@pytest.mark.parametrize("shape", [(32, 32), (2, 3), (7,), (3, 4, 5)], ids=str)
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_shortcut_matches_torch_and_records_the_row(fn, shape):
    x = make_array(shape, "float32", np.random.default_rng(0), -4.0, 4.0)
    check_op(lambda a: getattr(a, fn)(-1), lambda a: getattr(a, fn)(-1), [x], atol=2e-6, rtol=2e-6)
    t = jitorch.tensor(x, requires_grad=True)
    name = "SoftmaxBackward0" if fn == "softmax" else "LogSoftmaxBackward0"
    for dim in (-1, len(shape) - 1):
        y = getattr(JF, fn)(t, dim)
        assert type(y.grad_fn).__name__ == name and y.grad_fn.attrs == {"dim": len(shape) - 1}
    with jitorch.no_grad():
        assert getattr(t, fn)(-1).grad_fn is None
    with jitorch.inference_mode():
        assert getattr(t, fn)(-1).is_inference()


def test_softmax_shortcut_sees_in_place_writes_to_a_view():
    # The row of a contiguous view whose history changed in place (``mul_`` after the view was taken): the gradient
    # reaches the leaf through that history.
    weights = make_array((2, 6), "float32", np.random.default_rng(7))
    grads = []
    for lib in (jitorch, torch):
        w = lib.ones(4, 6, requires_grad=True)
        base = w.clone()
        row = base[1:3]
        row.mul_(lib.arange(6.0))
        (row.softmax(-1) * lib.tensor(weights)).sum().backward()
        grads.append(w.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], atol=1e-6)
    assert np.abs(grads[0][1:3]).sum() > 0


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("target_dtype", ["int64", "uint8"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cross_entropy_and_nll_shortcuts_match_torch(dtype, target_dtype, reduction):
    rng = np.random.default_rng(1)
    x = make_array((16, 10), dtype, rng, -3.0, 3.0)
    target = rng.integers(0, 10, 16).astype(target_dtype)
    for ignore in (-100, int(target[0])):  # nothing ignored, then some targets ignored
        check_op(lambda a, t: JF.cross_entropy(a, t, ignore_index=ignore, reduction=reduction),
                 lambda a, t: TF.cross_entropy(a, t, ignore_index=ignore, reduction=reduction), [x, target],
                 atol=1e-6, rtol=1e-5)
        check_op(lambda a, t: JF.nll_loss(a, t, ignore_index=ignore, reduction=reduction),
                 lambda a, t: TF.nll_loss(a, t, ignore_index=ignore, reduction=reduction), [x, target],
                 atol=1e-6, rtol=1e-5)


def test_cross_entropy_shortcut_keeps_the_target_errors_and_the_all_ignored_nan():
    x = make_array((4, 5), "float32", np.random.default_rng(2))
    for bad in (5, -1):
        target = np.array([0, bad, 1, 2])
        check_error(JF.cross_entropy, TF.cross_entropy, [x, target], match=f"Target {bad} is out of bounds")
        check_error(JF.nll_loss, TF.nll_loss, [x, target], match=f"Target {bad} is out of bounds")
    # an out-of-range target that is ignore_index counts for nothing; an all-ignored batch is NaN with zero gradients
    check_op(lambda a, t: JF.cross_entropy(a, t, ignore_index=7), lambda a, t: TF.cross_entropy(a, t, ignore_index=7),
             [x, np.array([7, 1, 7, 2])])
    check_op(lambda a, t: JF.cross_entropy(a, t, ignore_index=1), lambda a, t: TF.cross_entropy(a, t, ignore_index=1),
             [x, np.array([1, 1, 1, 1])])


def test_mse_shortcut_matches_the_broadcasting_path_and_torch():
    rng = np.random.default_rng(3)
    x, y = make_array((8, 5), "float32", rng), make_array((8, 5), "float32", rng)
    for reduction in ("mean", "sum", "none"):
        check_op(lambda a, b: JF.mse_loss(a, b, reduction=reduction),
                 lambda a, b: TF.mse_loss(a, b, reduction=reduction), [x, y])
    a, b = jitorch.tensor(x, requires_grad=True), jitorch.tensor(y, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the size warning of the general path
        general = JF.mse_loss(a[None], b)  # (1, 8, 5) against (8, 5): promotion and broadcast, same values
    fast = JF.mse_loss(a, b)
    assert fast.item() == general.item() and type(fast.grad_fn).__name__ == "MseLossBackward0"
    (ga,) = jitorch.autograd.grad(fast, a)
    (gb,) = jitorch.autograd.grad(general, a)
    np.testing.assert_array_equal(ga.numpy(), gb.numpy())


def _composite_std(x, dim, keepdim, correction):
    v = x.var(dim, keepdim=keepdim, correction=correction)
    nonzero = v != 0
    return v.where(nonzero, 1.0).sqrt().where(nonzero, 0.0)


@pytest.mark.parametrize("rows", ["random", "constant", "nan"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("dim,keepdim", [(-1, False), (0, True), ((0, 1), False)], ids=str)
def test_std_row_gives_the_composite_bits_forward_and_backward(dim, keepdim, dtype, rows):
    rng = np.random.default_rng(4)
    a = make_array((6, 9), dtype, rng)
    if rows == "constant":
        a[2] = 1.5  # a zero deviation: zero gradient, as torch
    elif rows == "nan":
        a[3, 4] = np.nan
    g = rng.standard_normal(np.std(a, axis=dim, keepdims=keepdim).shape).astype(dtype)
    results = []
    for std in (lambda x: x.std(dim, keepdim=keepdim, correction=1), lambda x: _composite_std(x, dim, keepdim, 1)):
        x = jitorch.tensor(a, requires_grad=True)
        s = std(x)
        (gx,) = jitorch.autograd.grad(s, x, jitorch.tensor(g), create_graph=True)
        (ggx,) = jitorch.autograd.grad(gx.sum(), x)
        results.append([s.detach().numpy(), gx.detach().numpy(), ggx.numpy()])
    for got, want in zip(*results):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    x = jitorch.tensor(a, requires_grad=True)
    assert type(x.std(dim).grad_fn).__name__ == "StdBackward0"
    assert type(jitorch.std_mean(x, dim)[0].grad_fn).__name__ == "StdMeanBackward0"


def test_std_row_matches_torch_and_keeps_half_inputs_in_float32():
    x = make_array((5, 40), "float32", np.random.default_rng(5), -2.0, 2.0)
    check_op(lambda a: a.std(-1), lambda a: a.std(-1), [x], atol=1e-6, rtol=1e-5)
    check_op(lambda a: a.std(), lambda a: a.std(), [x], atol=1e-6, rtol=1e-5)
    h = x.astype(np.float16)
    got, want = jitorch.tensor(h).std(-1), torch.tensor(h).std(-1)
    assert got.dtype == jitorch.float16
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("dim", [None, -1, 0])
def test_norm_shortcut_matches_torch_and_keeps_the_dim_error(dim):
    x = make_array((7, 11), "float32", np.random.default_rng(6))
    check_op(lambda a: a.norm(dim=dim), lambda a: a.norm(dim=dim), [x], atol=1e-6, rtol=1e-5)
    check_op(lambda a: jitorch.norm(a, 2, dim, True), lambda a: torch.norm(a, 2, dim, True), [x], atol=1e-6,
             rtol=1e-5)
    check_error(lambda a: a.norm(dim=2), lambda a: a.norm(dim=2), [x], match="Dimension out of range")
