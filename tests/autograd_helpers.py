"""Helpers of the autograd tests: the same random leaves in jitorch and torch, and their comparison."""
import numpy as np
import torch

import jitorch

RNG = np.random.default_rng(1234)


def _pair(shape, dtype=np.float64, requires_grad=True, low=-1.0, high=1.0):
    """The same random values as a jitorch and a torch tensor (both leaves)."""
    data = RNG.uniform(low, high, size=shape).astype(dtype)
    return (jitorch.tensor(data.copy(), requires_grad=requires_grad),
            torch.tensor(data.copy(), requires_grad=requires_grad))


def _np(t):
    """Host values of a jitorch or torch tensor as a NumPy array."""
    return np.asarray(t.detach().numpy())


def _close(a, b, rtol=1e-6, atol=1e-8):
    np.testing.assert_allclose(_np(a), _np(b), rtol=rtol, atol=atol)
