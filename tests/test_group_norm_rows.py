"""group_norm runs each group as a row of layer norm's row kernels (layer norm without parameters, then the
per-channel affine), and layer norm's backward row takes a missing weight: values and gradients equal torch's,
with and without affine parameters, float32 and float64, and double backward still works."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch


@pytest.mark.parametrize("shape, groups", [((4, 6, 5, 7), 3), ((2, 8), 4), ((3, 4, 10), 2), ((2, 64, 32, 32), 8),
                                           ((2, 6, 3, 3, 3), 6)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_matches_torch(shape, groups, dtype, affine):
    rng = np.random.default_rng(len(shape) * groups)
    x, w, b, g = (rng.standard_normal(s).astype(dtype) for s in (shape, shape[1], shape[1], shape))
    results = []
    for lib in (jitorch, torch):
        xt = lib.tensor(x, requires_grad=True)
        wt, bt = (lib.tensor(v, requires_grad=True) if affine else None for v in (w, b))
        out = lib.nn.functional.group_norm(xt, groups, wt, bt)
        out.backward(lib.tensor(g))
        results.append([out.detach().numpy(), xt.grad.numpy()] + ([wt.grad.numpy(), bt.grad.numpy()] if affine else []))
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_layer_norm_without_weight_backward_and_double_backward():
    rng = np.random.default_rng(1)
    x, g = (rng.standard_normal((6, 40)) for _ in range(2))
    grads = []
    for lib in (jitorch, torch):
        xt = lib.tensor(x, requires_grad=True)
        (gx,) = lib.autograd.grad(lib.nn.functional.layer_norm(xt, (40,)), xt, lib.tensor(g), create_graph=True)
        (ggx,) = lib.autograd.grad((gx * gx).sum(), xt)
        grads.append((gx.detach().numpy(), ggx.numpy()))
    for got, want in zip(*grads):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10)
    assert jitorch.autograd.gradcheck(lambda t: jitorch.nn.functional.group_norm(t, 2),
                                      (jitorch.tensor(rng.standard_normal((2, 4, 3)), requires_grad=True),))
