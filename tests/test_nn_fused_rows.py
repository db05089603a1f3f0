"""The fused rows of ``jitorch/ops/nn_fused.py`` (softmax, log_softmax, layer_norm, nll_loss and their backward rows)
against torch: values and gradients in float32 and float64, gradcheck and gradgradcheck in float64."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as F
from jitorch._dispatch import apply
from jitorch.autograd import gradcheck, gradgradcheck
from jitorch.ops import nn_fused

RTOL = {np.float32: 1e-5, np.float64: 1e-12}


def _pair(a, grad=True):
    return jitorch.tensor(a.copy(), requires_grad=grad), torch.tensor(a.copy(), requires_grad=grad)


def _compare(fn_j, fn_t, arrays, dtype, grad_flags=None):
    """Forward and input gradients of ``fn_j`` and ``fn_t`` on the same data, under a random output weighting."""
    rng = np.random.default_rng(1)
    grad_flags = grad_flags or [True] * len(arrays)
    pairs = [_pair(a.astype(dtype) if a.dtype.kind == "f" else a, g) for a, g in zip(arrays, grad_flags)]
    out_j = fn_j(*[p[0] for p in pairs])
    out_t = fn_t(*[p[1] for p in pairs])
    np.testing.assert_allclose(out_j.detach().numpy(), out_t.detach().numpy(), rtol=RTOL[dtype], atol=RTOL[dtype])
    w = rng.standard_normal(tuple(out_t.shape)).astype(dtype)
    (out_j * jitorch.tensor(w)).sum().backward()
    (out_t * torch.tensor(w)).sum().backward()
    for (pj, pt), g in zip(pairs, grad_flags):
        if g:
            np.testing.assert_allclose(pj.grad.numpy(), pt.grad.numpy(), rtol=RTOL[dtype] * 10, atol=RTOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_family_matches_torch(name, dim, dtype):
    x = np.random.default_rng(0).standard_normal((3, 4, 5)) * 3
    _compare(lambda a: getattr(F, name)(a, dim), lambda a: getattr(torch.nn.functional, name)(a, dim), [x], dtype)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_family_infinities_match_torch(name):
    x = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf], [np.inf, 0.0, 1.0]])
    got = getattr(F, name)(jitorch.tensor(x), 1).numpy()
    want = getattr(torch.nn.functional, name)(torch.tensor(x), 1).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(want))


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_family_gradgradcheck(name):
    x = jitorch.tensor(np.random.default_rng(2).standard_normal((3, 4)), requires_grad=True)
    fn = lambda a: getattr(F, name)(a, 1)  # noqa: E731
    assert gradcheck(fn, (x,))
    assert gradgradcheck(fn, (x,))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(6,), (3, 4)])
def test_layer_norm_matches_torch(shape, affine, dtype):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3) + shape) * 2 + 1
    if affine:
        arrays = [x, rng.standard_normal(shape), rng.standard_normal(shape)]
        _compare(lambda a, w, b: F.layer_norm(a, shape, w, b), lambda a, w, b: torch.nn.functional.layer_norm(
            a, shape, w, b), arrays, dtype)
    else:
        _compare(lambda a: F.layer_norm(a, shape), lambda a: torch.nn.functional.layer_norm(a, shape), [x], dtype)


@pytest.mark.parametrize("shape,k", [((16, 64, 128), 1), ((4, 6, 8), 2), ((3, 5000), 1)],
                         ids=["transformer-rows", "two-dims", "long-rows-pairwise"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_layer_norm_rows_equal_the_composite_and_torch(shape, k, layout):
    """Row statistics by BLAS products (rows up to 4096) or pairwise sums (longer): forward and backward rows against
    the composite formula in float64 and against torch in float32, on contiguous and transposed inputs."""
    rng = np.random.default_rng(8)
    norm = shape[len(shape) - k:]
    x = rng.standard_normal(shape) * 3 + 2
    w, b = rng.standard_normal(norm), rng.standard_normal(norm)
    g = rng.standard_normal(shape)
    for dtype in (np.float64, np.float32):
        xj = jitorch.tensor(x.astype(dtype))
        if layout == "transposed":  # the same values, through a non-contiguous view
            xj = jitorch.tensor(np.ascontiguousarray(np.swapaxes(x, 0, -1)).astype(dtype)).transpose(0, -1)
        wj, bj, gj = (jitorch.tensor(a.astype(dtype)) for a in (w, b, g))
        out, mean, rstd = apply(nn_fused.LAYER_NORM, xj, wj, bj, k=k, eps=1e-5)
        grads = apply(nn_fused.LAYER_NORM_BACKWARD, gj, xj, mean, rstd, wj, k=k, eps=1e-5)
        if dtype == np.float64:
            dims = tuple(range(-k, 0))
            centered = xj - xj.mean(dims, keepdim=True)
            want = centered * ((centered * centered).mean(dims, keepdim=True) + 1e-5).rsqrt() * wj + bj
            np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
            want_grads = nn_fused._layer_norm_grads(gj, xj, wj, k, 1e-5, (True, True, True))
            for got, exp in zip(grads, want_grads):
                np.testing.assert_allclose(got.numpy(), exp.numpy(), rtol=1e-10, atol=1e-10)
        else:
            tx, tw, tb = (torch.tensor(a.astype(dtype), requires_grad=True) for a in (x, w, b))
            tout = torch.nn.functional.layer_norm(tx, norm, tw, tb)
            tout.backward(torch.tensor(g.astype(dtype)))
            np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-4)
            for got, exp in zip(grads, (tx.grad, tw.grad, tb.grad)):
                np.testing.assert_allclose(got.numpy(), exp.numpy(), rtol=1e-4, atol=2e-3)


def test_layer_norm_gradgradcheck():
    rng = np.random.default_rng(4)
    args = tuple(jitorch.tensor(a, requires_grad=True) for a in (rng.standard_normal((3, 4)), rng.standard_normal(4),
                                                                 rng.standard_normal(4)))
    fn = lambda a, w, b: F.layer_norm(a, (4,), w, b, eps=1e-3)  # noqa: E731
    assert gradcheck(fn, args)
    assert gradgradcheck(fn, args)


def test_layer_norm_backward_row_has_a_backward():
    """The backward row runs when backward needs no graph; its own backward (the composite's VJP) is checked here."""
    rng = np.random.default_rng(5)
    x, w = (jitorch.tensor(a) for a in (rng.standard_normal((3, 4)), rng.standard_normal(4)))
    _, mean, rstd = apply(nn_fused.LAYER_NORM, x, w, None, k=1, eps=1e-5)
    g = jitorch.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    xg = x.clone().requires_grad_()
    wg = w.clone().requires_grad_()
    fn = lambda g, x, w: apply(nn_fused.LAYER_NORM_BACKWARD, g, x, mean, rstd, w, k=1, eps=1e-5)  # noqa: E731
    assert gradcheck(lambda g: fn(g, x, w), (g,))
    outs = fn(g, xg, wg)
    want = torch.autograd.grad(
        torch.nn.functional.layer_norm(tx := torch.tensor(x.numpy(), requires_grad=True), (4,),
                                       tw := torch.tensor(w.numpy(), requires_grad=True)),
        (tx, tw), torch.tensor(g.detach().numpy()), create_graph=True)
    np.testing.assert_allclose(outs[0].detach().numpy(), want[0].detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(outs[1].detach().numpy(), want[1].detach().numpy(), rtol=1e-10, atol=1e-12)
    (outs[0].sum() + (outs[1] * outs[1]).sum()).backward()
    (want[0].sum() + (want[1] * want[1]).sum()).backward()
    np.testing.assert_allclose(xg.grad.numpy(), tx.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(wg.grad.numpy(), tw.grad.numpy(), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index", [-100, 2])
def test_cross_entropy_with_indices_matches_torch(reduction, ignore_index, dtype):
    rng = np.random.default_rng(6)
    x, target = rng.standard_normal((6, 5)), np.array([0, 2, 4, 1, 2, 3])
    _compare(lambda a, t: F.cross_entropy(a, t, reduction=reduction, ignore_index=ignore_index),
             lambda a, t: torch.nn.functional.cross_entropy(a, t, reduction=reduction, ignore_index=ignore_index),
             [x, target], dtype, [True, False])
    _compare(lambda a, t: F.nll_loss(a, t, reduction=reduction, ignore_index=ignore_index),
             lambda a, t: torch.nn.functional.nll_loss(a, t, reduction=reduction, ignore_index=ignore_index),
             [x, target], dtype, [True, False])


def test_nll_all_ignored_is_nan_with_zero_grad():
    x = jitorch.tensor(np.zeros((2, 3)), requires_grad=True)
    loss = F.nll_loss(x, jitorch.tensor([1, 1]), ignore_index=1)
    assert torch.isnan(torch.nn.functional.nll_loss(torch.zeros(2, 3), torch.tensor([1, 1]), ignore_index=1))
    assert np.isnan(loss.item())
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), 0)


def test_nll_out_of_range_target_raises():
    with pytest.raises(IndexError, match="out of bounds"):
        F.nll_loss(jitorch.zeros(2, 3), jitorch.tensor([0, 3]))
    # The range check is one unsigned comparison: negative classes are caught too, ignored ones are not checked.
    with pytest.raises(IndexError, match="Target -1 is out of bounds"):
        F.nll_loss(jitorch.zeros(2, 3), jitorch.tensor([0, -1]))
    x = np.random.default_rng(8).standard_normal((3, 4))
    _compare(lambda a, t: F.nll_loss(a, t, ignore_index=-7), lambda a, t: torch.nn.functional.nll_loss(
        a, t, ignore_index=-7), [x, np.array([-7, 3, 0])], np.float32, [True, False])
    _compare(lambda a, t: F.cross_entropy(a, t.to(jitorch.uint8)), lambda a, t: torch.nn.functional.cross_entropy(
        a, t.to(torch.uint8)), [x, np.array([1, 3, 0])], np.float32, [True, False])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_gradgradcheck(reduction):
    x = jitorch.tensor(np.random.default_rng(7).standard_normal((4, 3)), requires_grad=True)
    target = jitorch.tensor([0, 2, 1, 2])
    fn = lambda a: F.cross_entropy(a, target, reduction=reduction, ignore_index=1)  # noqa: E731
    assert gradcheck(fn, (x,))
    assert gradgradcheck(fn, (x,))
