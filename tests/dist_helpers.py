"""Shared by tests/test_distributions_*.py: run one expression on jitorch.distributions and torch.distributions with
the same float64 parameters, compare the values, then the parameter gradients under one random upstream gradient."""
from __future__ import annotations

import numpy as np
import torch

import jitorch
import jitorch.distributions as JD
import torch.distributions as TD


def both(arrays):
    """The same arrays as jitorch and torch tensors; floating ones require grad."""
    jt = [jitorch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    th = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    return jt, th


def compare(fn, *arrays, atol=1e-10, rtol=1e-9, grad=True, seed=0):
    """``fn(D, T, *params)`` (``D`` the distributions module, ``T`` the tensor module) on both libraries: same shape,
    values within ``atol + rtol |torch|``, and the gradients of ``sum(out * g)`` for a random ``g`` alike."""
    jt, th = both(arrays)
    out_j, out_t = fn(JD, jitorch, *jt), fn(TD, torch, *th)
    assert tuple(out_j.shape) == tuple(out_t.shape), (tuple(out_j.shape), tuple(out_t.shape))
    np.testing.assert_allclose(out_j.detach().numpy(), out_t.detach().numpy(), atol=atol, rtol=rtol)
    if not (grad and out_t.requires_grad):
        return
    assert out_j.requires_grad, "jitorch's result is detached from the parameters, torch's is not"
    g = np.random.default_rng(seed).standard_normal(tuple(out_t.shape))
    finite = np.isfinite(out_t.detach().numpy())
    g = np.where(finite, g, 0.0)  # an infinite entry has no gradient worth comparing (nan in both)
    (out_j * jitorch.tensor(g)).sum().backward()
    (out_t * torch.tensor(g)).sum().backward()
    checked = 0
    for a, b in zip(jt, th):
        if b.requires_grad and b.grad is not None:
            assert a.grad is not None, "torch has a gradient for a parameter jitorch does not"
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=atol, rtol=rtol)
            checked += 1
    assert checked, "no parameter gradient was compared"


def sample_moments(d, n, seed=0):
    """Mean and variance over ``n`` seeded samples of ``d`` (as float64 arrays)."""
    jitorch.manual_seed(seed)
    s = d.sample((n,)).double().numpy()
    return s.mean(0), s.var(0)
