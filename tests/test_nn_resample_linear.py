"""``interpolate``'s linear, bilinear, trilinear and bicubic modes against PyTorch: the dense-product path (finite
CPU inputs) and the gather path (inf/NaN inputs or gradients; forced here for finite ones too) give torch's values,
gradients and higher derivatives, and an inf or NaN reaches exactly the outputs (and input gradients) it reaches in
torch, never a whole row."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import check_op, gradgradcheck_op

import jitorch
import jitorch.nn.functional as F
from jitorch.ops import resample_linear

CASES = [  # (mode, input shape, interpolate kwargs)
    ("linear", (2, 3, 5), dict(scale_factor=2)),
    ("linear", (2, 3, 9), dict(size=4, align_corners=True)),
    ("bilinear", (2, 3, 4, 5), dict(scale_factor=2)),
    ("bilinear", (2, 3, 4, 5), dict(size=(7, 3))),
    ("bilinear", (1, 2, 6, 6), dict(scale_factor=(1.7, 0.6), align_corners=True)),
    ("bicubic", (2, 2, 4, 5), dict(scale_factor=2)),
    ("bicubic", (1, 2, 7, 5), dict(size=(3, 9), align_corners=True)),
    ("trilinear", (1, 2, 3, 4, 5), dict(scale_factor=2)),
    ("trilinear", (1, 2, 3, 4, 5), dict(size=(2, 6, 5))),
]


def arr(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.fixture(params=["dense", "gather"])
def path(request, monkeypatch):
    if request.param == "gather":
        monkeypatch.setattr(resample_linear, "_dense_ok", lambda *args: False)
    return request.param


@pytest.mark.parametrize("mode,shape,how", CASES, ids=str)
def test_values_and_gradients_on_both_paths(path, mode, shape, how):
    kw = dict(how, mode=mode)
    check_op(lambda t: F.interpolate(t, **kw), lambda t: TF.interpolate(t, **kw), [arr(*shape)], atol=2e-6,
             rtol=1e-5)
    layout = "transposed" if len(shape) == 4 else "contiguous"
    check_op(lambda t: F.interpolate(t, **kw), lambda t: TF.interpolate(t, **kw), [arr(*shape, seed=1)],
             atol=2e-6, rtol=1e-5, layout=layout)


@pytest.mark.parametrize("mode,shape,how", [CASES[0], CASES[3], CASES[5], CASES[8]], ids=str)
def test_double_backward_on_both_paths(path, mode, shape, how):
    gradgradcheck_op(lambda t: F.interpolate(t, mode=mode, **how), [arr(*shape, dtype=np.float64)])
    x = jitorch.tensor(arr(*shape, dtype=np.float64), requires_grad=True)
    assert jitorch.autograd.gradcheck(lambda t: F.interpolate(t, mode=mode, **how), (x,))


def _nonfinite_input(shape):
    x = arr(*shape)
    flat = x.reshape(-1)
    flat[flat.size // 3] = np.inf
    flat[2 * flat.size // 3] = np.nan
    flat[-1] = -np.inf
    return x


@pytest.mark.parametrize("mode,shape,how", CASES, ids=str)
def test_inf_and_nan_inputs_reach_what_they_reach_in_torch(mode, shape, how):
    kw = dict(how, mode=mode)
    x = _nonfinite_input(shape)
    got = F.interpolate(jitorch.tensor(x), **kw).numpy()
    want = TF.interpolate(torch.tensor(x), **kw).numpy()
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.isposinf(got), np.isposinf(want)) and np.array_equal(np.isneginf(got),
                                                                                  np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], atol=2e-6, rtol=1e-5)
    assert finite.any()


@pytest.mark.parametrize("mode,shape,how", CASES, ids=str)
def test_an_inf_upstream_gradient_spreads_as_in_torch(mode, shape, how):
    kw = dict(how, mode=mode)
    x = arr(*shape)
    xj, xt = jitorch.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    yj, yt = F.interpolate(xj, **kw), TF.interpolate(xt, **kw)
    g = _nonfinite_input(tuple(yt.shape))
    yj.backward(jitorch.tensor(g))
    yt.backward(torch.tensor(g))
    got, want = xj.grad.numpy(), xt.grad.numpy()
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], atol=1e-5, rtol=1e-5)
    assert finite.any()


def test_grad_fn_names_are_torchs():
    x = jitorch.randn(1, 2, 4, requires_grad=True)
    assert type(F.interpolate(x, size=7, mode="linear").grad_fn).__name__ == "UpsampleLinear1DBackward0"
    x = jitorch.randn(1, 2, 4, 4, requires_grad=True)
    for mode, name in (("bilinear", "UpsampleBilinear2DBackward0"), ("bicubic", "UpsampleBicubic2DBackward0")):
        assert type(F.interpolate(x, scale_factor=2, mode=mode).grad_fn).__name__ == name


def test_a_float32_sum_that_overflows_still_resamples_right():
    x = np.full((1, 1, 4, 4), 3e38, dtype=np.float32)  # finite values whose sum is inf: the gather path
    x[0, 0, 0, 0] = -1.0
    got = F.interpolate(jitorch.tensor(x), scale_factor=2, mode="bilinear").numpy()
    want = TF.interpolate(torch.tensor(x), scale_factor=2, mode="bilinear").numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("mode,shape,how", [
    ("linear", (2, 3, 300), dict(scale_factor=2)),             # past the dense path's 256 source positions
    ("linear", (2, 2, 4), dict(size=200)),                      # 50 contributions per source: one scatter-add
    ("bilinear", (1, 2, 3, 5), dict(size=(40, 33), align_corners=True)),
    ("bicubic", (1, 1, 4, 3), dict(size=(37, 29))),
], ids=str)
def test_long_dims_and_large_upscaling(mode, shape, how):
    kw = dict(how, mode=mode)
    check_op(lambda t: F.interpolate(t, **kw), lambda t: TF.interpolate(t, **kw), [arr(*shape)], atol=2e-6,
             rtol=1e-5, grad_atol=2e-5)


def test_source_coordinates_round_once_as_atens_fused_multiply_add():
    # Two roundings put lambda at exactly 0 here where ATen's fma leaves 1.5e-8: torch's inf output became NaN.
    for x, kw in ((np.array([np.inf, 1.0], np.float32).reshape(1, 1, 2), dict(size=3, mode="linear")),
                  (np.array([np.inf, 1, 2, 3], np.float32).reshape(1, 1, 4, 1),
                   dict(size=(6, 3), mode="bilinear"))):
        got = F.interpolate(jitorch.tensor(x), **kw).numpy()
        want = TF.interpolate(torch.tensor(x), **kw).numpy()
        assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
        np.testing.assert_allclose(got[np.isfinite(want)], want[np.isfinite(want)], rtol=1e-6)


def test_bicubic_that_keeps_both_sizes_has_the_true_gradient():
    # torch 2.13's bicubic backward copies the gradient when no dim changes size, although its forward applies the
    # scale (torch's own gradcheck fails there); jitorch's adjoint is the forward's, so gradcheck holds.
    x = jitorch.tensor(arr(1, 1, 1, 4, dtype=np.float64), requires_grad=True)
    assert jitorch.autograd.gradcheck(lambda t: F.interpolate(t, scale_factor=(1.0, 1.15), mode="bicubic"), (x,))
