"""Spiking and binarized networks, run with ``lib=torch`` and ``lib=jitorch`` from the same weights and data.

A leaky integrate-and-fire layer unrolled over time with a custom ``autograd.Function`` spike (surrogate gradient
through ``ctx.save_for_backward``, ``ctx.needs_input_grad`` and ``once_differentiable``, a learned threshold, soft
reset), sign-binarized recurrent weights (another custom Function), straight-through rounding
(``x + (x.round() - x).detach()``) and quantization-aware layers by ``fake_quantize_per_tensor_affine`` /
``fake_quantize_per_channel_affine``; three SGD-with-momentum steps. Then the Function's gradient with a threshold
that needs none, the refusal of a double backward through ``once_differentiable``, and the usual STE variants.
The fake-quantize functions get their own tests against torch below (values, gradients, dtypes, errors).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree, load_numpy_state, numpy_state, to_numpy

_RNG = np.random.default_rng(0)
X = _RNG.standard_normal((10, 6, 8)).astype(np.float32)  # time, batch, features
T = _RNG.integers(0, 3, 6)


def _functions(lib):
    class Spike(lib.autograd.Function):
        @staticmethod
        def forward(ctx, v, threshold, slope):
            ctx.save_for_backward(v, threshold)
            ctx.slope = slope
            return (v >= threshold).to(v.dtype)

        @staticmethod
        @lib.autograd.function.once_differentiable
        def backward(ctx, grad):
            v, threshold = ctx.saved_tensors
            surrogate = grad / (1 + ctx.slope * (v - threshold).abs()) ** 2
            grad_v = surrogate if ctx.needs_input_grad[0] else None
            grad_threshold = -surrogate.sum() if ctx.needs_input_grad[1] else None
            return grad_v, grad_threshold, None

    class Sign(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sign()

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * (x.abs() <= 1).float()
    return Spike, Sign


def _net(lib):
    nn = lib.nn
    Spike, Sign = _functions(lib)

    class SpikingNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 3)
            self.threshold = nn.Parameter(lib.tensor(0.5))
            self.recurrent = nn.Parameter(lib.randn(16, 16) * 0.3)

        def forward(self, x):
            w1 = lib.fake_quantize_per_channel_affine(self.fc1.weight, self.fc1.weight.detach().abs().amax(1) / 7,
                                                      lib.zeros(16, dtype=lib.int32), 0, -8, 7)
            v, total = lib.zeros(x.shape[1], 16), 0
            for t in range(x.shape[0]):
                v = 0.9 * v + nn.functional.linear(x[t], w1, self.fc1.bias)
                spikes = Spike.apply(v, self.threshold, 5.0)
                v = v - spikes * self.threshold
                h = spikes @ Sign.apply(self.recurrent) / 4
                h = h + (h.round() - h).detach()
                h = lib.fake_quantize_per_tensor_affine(h, 0.25, 0, -16, 15)
                total = total + self.fc2(h)
            return total / x.shape[0]
    return SpikingNet()


def _run(lib, state):
    net = load_numpy_state(lib, _net(lib), state)
    Spike, _ = _functions(lib)
    opt = lib.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x, t = lib.tensor(X), lib.tensor(T)
    out = {}
    for step in range(3):
        opt.zero_grad()
        logits = net(x)
        loss = lib.nn.functional.cross_entropy(logits, t)
        loss.backward()
        out[f"step{step}"] = [logits, loss]
        out[f"grads{step}"] = {n: p.grad.clone() for n, p in net.named_parameters()}
        opt.step()
    out["params"] = {n: p.detach().clone() for n, p in net.named_parameters()}
    v = lib.tensor(X[0]).requires_grad_()
    Spike.apply(v, lib.tensor(0.2), 3.0).backward(lib.tensor(X[1]))
    out["no_threshold_grad"] = v.grad
    w = lib.tensor(X[2]).requires_grad_()
    q = w + (w.round() - w).detach()
    q2 = (w.clamp(-1, 1) - w).detach() + w
    q3 = lib.where(w > 0, 1.0, -1.0).detach() - w.tanh().detach() + w.tanh()
    (q * lib.tensor(X[3]) + q2 * 2 + q3).sum().backward()
    out["straight_through"] = [q, q2, q3, w.grad]
    return to_numpy(out)


def test_spiking_binary_qat_training_matches_torch():
    torch.manual_seed(0)
    state = numpy_state(_net(torch))
    assert_close_tree(_run(torch, state), _run(jitorch, state), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("lib", [torch, jitorch], ids=["torch", "jitorch"])
def test_once_differentiable_refuses_double_backward(lib):
    Spike, _ = _functions(lib)
    v = lib.tensor(X[0]).requires_grad_()
    (g,) = lib.autograd.grad(Spike.apply(v, lib.tensor(0.2), 3.0).sum(), v, create_graph=True)
    with pytest.raises(RuntimeError):
        g.sum().backward()


_XQ = (np.random.default_rng(2).standard_normal((3, 4, 5)) * 2).astype(np.float32)
_XQ.flat[:6] = [0.05, 0.15, 0.25, 0.35, -0.05, np.nan]  # ties at the grid's half steps, NaN
_GQ = np.random.default_rng(3).standard_normal((3, 4, 5)).astype(np.float32)


def _fake_quantized(lib, dtype):
    x = lib.tensor(_XQ).to(getattr(lib, dtype)).requires_grad_()
    scale = lib.tensor([0.1, 0.2, 0.05, 0.3])
    ys = [lib.fake_quantize_per_tensor_affine(x, 0.1, 3, 0, 15),
          lib.fake_quantize_per_tensor_affine(x, lib.tensor(0.07), lib.tensor(-2, dtype=lib.int32), -8, 7),
          lib.fake_quantize_per_tensor_affine(x, -0.1, 0, 0, 15),
          lib.fake_quantize_per_channel_affine(x, scale, lib.tensor([0, 2, -1, 3], dtype=lib.int32), 1, -8, 7),
          lib.fake_quantize_per_channel_affine(x, scale, lib.tensor([0.0, 1.5, -0.6, 2.2]), 1, -8, 7),
          lib.fake_quantize_per_channel_affine(x, lib.tensor([0.1, 0.2, 0.3]), lib.tensor([0, 1, 2], dtype=lib.int32),
                                               0, 0, 255)]
    grad = lib.tensor(_GQ).to(x.dtype)
    return to_numpy([ys, [lib.autograd.grad(y, x, grad, retain_graph=True)[0] for y in ys]])


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_fake_quantize_matches_torch(dtype):
    expected, actual = _fake_quantized(torch, dtype), _fake_quantized(jitorch, dtype)
    for e, a in zip(expected[0] + expected[1], actual[0] + actual[1]):
        assert e.dtype == a.dtype
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-7)  # NaN where torch has NaN


def test_fake_quantize_0d_input_and_clamped_gradient():
    x = jitorch.tensor(9.0, requires_grad=True)
    y = jitorch.fake_quantize_per_tensor_affine(x, 0.5, 0, -4, 3)
    y.backward()
    assert y.shape == () and y.item() == 1.5 and x.grad.item() == 0.0


@pytest.mark.parametrize("case", range(7))
def test_fake_quantize_errors_match_torch(case):
    def call(lib):
        w, s, z = lib.ones(3, 4), lib.tensor([0.1, 0.2, 0.05]), lib.tensor([0, 2, -1], dtype=lib.int32)
        pc, pt = lib.fake_quantize_per_channel_affine, lib.fake_quantize_per_tensor_affine
        return [lambda: pc(w, s, z.long(), 0, -8, 7), lambda: pc(w, s.double(), z, 0, -8, 7),
                lambda: pc(w, s[:2], z[:2], 0, -8, 7), lambda: pc(w, s, z, -2, -8, 7), lambda: pc(w, s, z, 0, 7, -8),
                lambda: pt(w, 0.1, 30, 0, 15), lambda: pt(w.long(), 0.1, 0, 0, 15)][case]()
    with pytest.raises(Exception) as expected:
        call(torch)
    with pytest.raises(type(expected.value)) as actual:
        call(jitorch)
    if case < 6:
        assert " ".join(str(actual.value).split()) == " ".join(str(expected.value).split())
