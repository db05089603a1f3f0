"""Helpers of the compiled random-op and buffer tests: NumPy views of tensors, comparisons, the forward ops of a
compiled graph, and a small dropout MLP.
"""
import numpy as np
import torch

import jitorch


def _np(t):
    return t.detach().numpy()


def _close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(_np(a) if isinstance(a, jitorch.Tensor) else a.detach().numpy(),
                               _np(b) if isinstance(b, jitorch.Tensor) else b.detach().numpy(), rtol=rtol, atol=atol)


def _torch(t):
    return torch.tensor(_np(t))
