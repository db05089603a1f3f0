"""leaky_relu and hardtanh (and relu6) as rows: values, gradients, NaN and boundary handling equal torch's; a
gradient taken with create_graph stays connected to the input (zero second derivative, zeros for parameters it does
not depend on, as a WGAN-GP penalty needs); compiled equals eager."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

FNS = {
    "leaky_relu": lambda lib, t: lib.nn.functional.leaky_relu(t, 0.2),
    "leaky_relu_": lambda lib, t: lib.nn.functional.leaky_relu(t * 1, 0.1, inplace=True),
    "hardtanh": lambda lib, t: lib.nn.functional.hardtanh(t, -1.5, 2.0),
    "relu6": lambda lib, t: lib.nn.functional.relu6(t),
    "LeakyReLU": lambda lib, t: lib.nn.LeakyReLU(0.3)(t),
    "softshrink": lambda lib, t: lib.nn.functional.softshrink(t, 0.5),
    "hardshrink": lambda lib, t: lib.nn.functional.hardshrink(t, 0.5),
    "threshold": lambda lib, t: lib.nn.functional.threshold(t, 0.5, -1.0),
    "threshold_": lambda lib, t: lib.nn.functional.threshold(t * 1, 0.5, -1.0, inplace=True),
}
VALUES = [1.0, -2.0, 3.0, 0.0, -1.5, 2.0, 6.0, 7.5, float("nan"), float("inf"), float("-inf"), 0.5, -0.5, -0.2]


@pytest.mark.parametrize("name", sorted(FNS))
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_values_gradients_and_double_backward_match_torch(name, dtype):
    results = []
    for lib in (jitorch, torch):
        x = lib.tensor(VALUES, dtype=getattr(lib, dtype), requires_grad=True)
        y = FNS[name](lib, x)
        upstream = lib.tensor(np.linspace(-1, 2, len(VALUES)), dtype=getattr(lib, dtype))
        (g,) = lib.autograd.grad(y, x, upstream, create_graph=True)
        assert g.requires_grad
        (gg,) = lib.autograd.grad(g.sum(), x)
        results.append([y.detach().float().numpy(), g.detach().float().numpy(), gg.float().numpy()])
    for got, want in zip(*results):
        np.testing.assert_array_equal(got, want)


def test_gradient_penalty_gives_zero_not_none_gradients():
    grads = []
    for lib in (jitorch, torch):
        lib.manual_seed(0)
        net = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.BatchNorm1d(4), lib.nn.LeakyReLU(0.2),
                                lib.nn.Linear(4, 1)).eval()
        x = lib.ones(5, 3, requires_grad=True)
        (gx,) = lib.autograd.grad(net(x).sum(), x, create_graph=True)
        ((gx.norm(2, dim=1) - 1) ** 2).mean().backward()
        grads.append(net[1].bias.grad)
    assert grads[0] is not None and grads[0].tolist() == grads[1].tolist() == [0.0] * 4


def test_integer_inputs_keep_the_composite():
    for lib in (jitorch, torch):
        assert lib.nn.functional.hardtanh(lib.tensor([-3, 0, 4]), -1.0, 2.0).tolist() == [-1, 0, 2]


def test_compiled_equals_eager():
    def step(x, w):
        h = jitorch.nn.functional.leaky_relu(x * w, 0.1)
        return (jitorch.nn.functional.hardtanh(h, -0.5, 0.5) * h).sum()

    rng = np.random.default_rng(0)
    x = jitorch.tensor(rng.standard_normal((64, 32)).astype(np.float32))
    grads = []
    for fn in (step, jitorch.compile(step)):
        w = jitorch.tensor(rng.standard_normal(32).astype(np.float32) * 0 + 0.7, requires_grad=True)
        loss = fn(x, w)
        loss.backward()
        grads.append((loss.item(), w.grad.numpy()))
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-6)
    np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=1e-5, atol=1e-6)
