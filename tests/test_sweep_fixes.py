"""Focused checks against torch for the discrepancies the domain sweeps (``test_sweep_*.py``) found."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch


@pytest.mark.parametrize("shape,grid_shape", [((1, 2, 3, 4), (1, 2, 5, 2)), ((1, 2, 3, 4, 2), (1, 2, 1, 5, 3))])
def test_grid_sample_nearest_gives_grid_a_zero_gradient(shape, grid_shape):
    rng = np.random.default_rng(0)
    x, g = rng.normal(size=shape).astype(np.float32), rng.uniform(-1, 1, grid_shape).astype(np.float32)
    grads = []
    for lib in (torch, jitorch):
        grid = lib.tensor(g, requires_grad=True)
        inp = lib.tensor(x, requires_grad=True)
        lib.nn.functional.grid_sample(inp, grid, mode="nearest", align_corners=False).sum().backward()
        grads.append((grid.grad.numpy(), inp.grad.numpy()))
    np.testing.assert_array_equal(grads[1][0], grads[0][0])
    np.testing.assert_allclose(grads[1][1], grads[0][1])


def test_cdist_matrix_product_form_gives_zero_distances_and_gradients_as_torch():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(2, 30, 3)).astype(np.float32)
    b = np.concatenate([a[:, :4], rng.normal(size=(2, 26, 3)).astype(np.float32)], 1)  # 4 exact self-matches
    g = rng.normal(size=(2, 30, 30)).astype(np.float32)
    res = []
    for lib in (torch, jitorch):
        x1, x2 = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
        d = lib.cdist(x1, x2, compute_mode="use_mm_for_euclid_dist")
        d.backward(lib.tensor(g))
        res.append((d.detach().numpy(), x1.grad.numpy(), x2.grad.numpy()))
    (d_th, *grads_th), (d_jt, *grads_jt) = res
    np.testing.assert_array_equal(d_jt == 0, d_th == 0)  # was 1e-15 where torch has 0
    np.testing.assert_allclose(d_jt, d_th, rtol=1e-5, atol=1e-3)  # sqrt of a cancelled sum: 1e-3 absolute noise
    for gj, gt in zip(grads_jt, grads_th):
        np.testing.assert_allclose(gj, gt, rtol=1e-4, atol=1e-3)
        assert np.isfinite(gj).all()


@pytest.mark.parametrize("call", ["backward", "grad"])
def test_implicit_gradient_of_a_complex_scalar_is_refused_as_torch(call):
    messages = []
    for lib in (torch, jitorch):
        a = lib.tensor([1.0, 2.0], requires_grad=True)
        loss = lib.polar(a, a).sum()  # an audio loss missing its .abs()
        with pytest.raises(RuntimeError) as info:
            loss.backward() if call == "backward" else lib.autograd.grad(loss, a)
        messages.append(str(info.value).replace("jitorch.", "torch."))
    assert messages[1] == messages[0]


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_grid_sample_nan_and_inf_grid_points_leave_the_input_gradient_finite(mode):
    img = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
    img[0, 0, 0, 0] = np.inf  # an outside tap lands on the safe index 0: its value must not leak either
    grid = np.array([[[[np.nan, 0.2], [np.inf, 0.1], [0.3, 0.3], [-3.0, 0.0]]]], np.float32)
    res = []
    for lib in (torch, jitorch):  # zeros padding only: torch's border padding crashes on a NaN grid
        x, g = lib.tensor(img, requires_grad=True), lib.tensor(grid, requires_grad=True)
        y = lib.nn.functional.grid_sample(x, g, mode=mode, padding_mode="zeros", align_corners=False)
        y.backward(lib.ones_like(y))
        res.append([t.detach().numpy() for t in (y, x.grad, g.grad)])
    for jt, th in zip(res[1], res[0]):
        np.testing.assert_allclose(jt, th, rtol=1e-5, atol=1e-5)


def test_solve_triangular_with_a_zero_on_the_diagonal_returns_inf_as_torch():
    a = np.array([[1.0, 0, 0], [2.0, 0, 0], [1.0, 1.0, 3.0]], np.float32)  # was a LinAlgError naming linalg.solve
    outs = [lib.linalg.solve_triangular(lib.tensor(a), lib.ones(3, 2), upper=False).numpy() for lib in (torch, jitorch)]
    np.testing.assert_array_equal(outs[1], outs[0])


@pytest.mark.parametrize("upper,left,unit", [(False, True, False), (True, True, True), (True, False, False),
                                             (False, False, True)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64"])
def test_solve_triangular_values_and_gradients_match_torch(upper, left, unit, dtype):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(2, 1, 4, 4)) + 3 * np.eye(4)  # the other triangle is read by neither library
    b = rng.normal(size=(3, 4, 2) if left else (3, 2, 4))
    if dtype.startswith("complex"):
        a, b = a + 1j * rng.normal(size=a.shape), b + 1j * rng.normal(size=b.shape)
    a, b = a.astype(dtype), b.astype(dtype)
    g = rng.normal(size=(2, 3) + b.shape[1:]).astype(np.float32)
    res = []
    for lib in (torch, jitorch):
        ta, tb = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
        x = lib.linalg.solve_triangular(ta, tb, upper=upper, left=left, unitriangular=unit)
        (lib.view_as_real(x) if x.is_complex() else x).mul(lib.tensor(g)[..., None] if x.is_complex()
                                                             else lib.tensor(g)).sum().backward()
        res.append([x.detach().resolve_conj().numpy(), ta.grad.numpy(), tb.grad.numpy()])
    tol = 1e-10 if dtype == "float64" else 1e-5
    for jt, th in zip(res[1], res[0]):
        np.testing.assert_allclose(jt, th, rtol=tol, atol=tol)


def test_solve_triangular_second_derivative():
    from helpers import gradgradcheck_op

    rng = np.random.default_rng(1)
    a = np.tril(rng.normal(size=(3, 3))) + 2 * np.eye(3)
    gradgradcheck_op(lambda x, y: jitorch.linalg.solve_triangular(x, y, upper=False), [a, rng.normal(size=(3, 2))])


@pytest.mark.parametrize("upper,unit", [(False, False), (True, False), (True, True)])
def test_solve_triangular_many_small_matrices_match_torch(upper, unit):
    rng = np.random.default_rng(2)
    a = (rng.normal(size=(40, 3, 3)) + 2 * np.eye(3)).astype(np.float32)
    a[5, 1, 1] = 0  # a singular one: inf/nan in its solution, as torch's trsm
    b = rng.normal(size=(40, 3, 2)).astype(np.float32)
    g = rng.normal(size=(40, 3, 2)).astype(np.float32)
    res = []
    for lib in (torch, jitorch):
        ta, tb = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
        x = lib.linalg.solve_triangular(ta, tb, upper=upper, unitriangular=unit)
        x[6:].mul(lib.tensor(g[6:])).sum().backward()
        res.append([x.detach().numpy(), ta.grad[6:].numpy(), tb.grad[6:].numpy()])
    for jt, th in zip(res[1], res[0]):
        np.testing.assert_allclose(jt, th, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("shape", [(3, 4), (2, 4, 3, 2)])
def test_ignored_targets_get_no_gradient_from_a_nan_upstream(shape, reduction, weighted):
    """A focal loss's ``(1 - pt) ** gamma`` at an ignored pixel (ce = 0, pt = 1) sends NaN back into cross_entropy:
    ATen's nll_loss backward skips ignored targets, so their logits' gradient stays 0 (a zero class weight still
    passes the NaN on, as ATen multiplies by it); NaN logits at ignored targets give a 0 loss there."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=shape).astype(np.float32)
    t = rng.integers(0, 4, (shape[0],) + shape[2:])
    t.reshape(-1)[[1, 2]] = 255
    at = np.unravel_index(2, t.shape)
    x[(at[0], slice(None)) + at[1:]] = np.nan  # the second ignored target's logits
    up = rng.normal(size=t.shape).astype(np.float32)
    up.reshape(-1)[1] = np.nan
    res = []
    for lib in (torch, jitorch):
        inp = lib.tensor(x, requires_grad=True)
        w = lib.tensor([1.0, 0.0, 2.0, 0.5]) if weighted else None
        loss = lib.nn.functional.cross_entropy(inp, lib.tensor(t), weight=w, ignore_index=255, reduction=reduction)
        (grad,) = lib.autograd.grad(loss, inp, lib.tensor(up) if reduction == "none" else lib.tensor(np.nan))
        res.append([loss.detach().numpy(), grad.numpy()])
    for jt, th in zip(res[1], res[0]):
        np.testing.assert_allclose(jt, th, rtol=1e-5, atol=1e-6)
