"""``autograd.grad(out, inputs)`` and ``backward(inputs=...)`` compute only the gradients on a path to the requested
inputs, as torch's engine does (a gradient penalty needs no weight gradients): the FLOPs counted equal torch's, the
values equal torch's, and a later full backward through a retained graph still computes everything."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode as TorchFlops

import jitorch
from jitorch.utils.flop_counter import FlopCounterMode as JitFlops

X = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)


def _model(lib):
    lib.manual_seed(0)
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 64, 2))


@pytest.mark.parametrize("wanted", ["input", "first weight", "last bias"])
def test_flops_and_values_of_partial_gradients_match_torch(wanted):
    results = []
    for lib, flops in ((jitorch, JitFlops), (torch, TorchFlops)):
        model = _model(lib)
        x = lib.tensor(X, requires_grad=True)
        if lib is torch:  # the same weights
            for p, q in zip(model.parameters(), results[0][2]):
                p.data.copy_(torch.from_numpy(q))
        target = {"input": x, "first weight": model[0].weight, "last bias": model[3].bias}[wanted]
        out = model(x).sum()
        with flops(display=False) as counter:
            (g,) = lib.autograd.grad(out, target)
        results.append((counter.get_total_flops(), g.detach().numpy(),
                        [p.detach().numpy().copy() for p in model.parameters()]))
    (jit_flops, jit_grad, _), (torch_flops, torch_grad, _) = results
    assert jit_flops == torch_flops
    np.testing.assert_allclose(jit_grad, torch_grad, rtol=1e-5, atol=1e-6)


def test_backward_with_inputs_accumulates_only_there_and_a_retained_graph_runs_fully_later():
    model = _model(jitorch)
    x = jitorch.tensor(X, requires_grad=True)
    out = model(x).sum()
    out.backward(inputs=[model[0].weight], retain_graph=True)
    assert model[0].weight.grad is not None and x.grad is None and model[3].weight.grad is None
    first = model[0].weight.grad.clone()
    out.backward()  # everything now: no edge may still be masked from the partial run
    assert x.grad is not None and model[3].weight.grad is not None
    np.testing.assert_allclose(model[0].weight.grad.numpy(), 2 * first.numpy(), rtol=1e-6)


def test_gradient_penalty_matches_torch():
    losses, grads = [], []
    for lib in (jitorch, torch):
        model = _model(lib)
        if lib is torch:
            for p, q in zip(model.parameters(), grads[0][1]):
                p.data.copy_(torch.from_numpy(q))
        x = lib.tensor(X, requires_grad=True)
        (g,) = lib.autograd.grad(model(x).sum(), x, create_graph=True)
        penalty = ((g.flatten(1).norm(dim=1) - 1) ** 2).mean()
        penalty.backward()
        losses.append(penalty.item())
        grads.append(([None if p.grad is None else p.grad.numpy().copy() for p in model.parameters()],
                      [p.detach().numpy().copy() for p in model.parameters()]))
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    for a, b in zip(grads[0][0], grads[1][0]):
        assert (a is None) == (b is None)  # the last bias does not reach the penalty: None in both
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("retain", [False, True])
@pytest.mark.parametrize("with_leaf", [False, True])
def test_backward_inputs_with_a_non_leaf_accumulates_its_grad_once(retain, with_leaf):
    results = []
    for lib in (jitorch, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        h = x * 3
        if retain:
            h.retain_grad()  # its hook stores the gradient too: still once, as torch
        y = (h * h).sum()
        inputs = [h, x] if with_leaf else [h]
        y.backward(inputs=inputs, retain_graph=True)
        y.backward(inputs=inputs)
        results.append([None if t is None else t.detach().numpy().tolist() for t in (h.grad, x.grad)])
    assert results[0] == results[1]
