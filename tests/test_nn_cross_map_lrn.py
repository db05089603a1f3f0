"""nn.CrossMapLRN2d: the forward is PyTorch's, window quirks included; the gradient is that forward's derivative
(PyTorch's hand-written backward is not: it fails gradcheck, and raises for size 1)."""
import numpy as np
import pytest
import torch

import jitorch


@pytest.mark.parametrize("channels,size", [(7, 3), (7, 5), (3, 5), (1, 3), (9, 4), (6, 1), (12, 7), (2, 2)])
def test_forward_matches_torch_and_gradient_is_exact(channels, size):
    x = np.random.default_rng(channels * size).standard_normal((2, channels, 3, 4))
    want = torch.nn.CrossMapLRN2d(size, 0.1, 0.75, 2)(torch.tensor(x)).numpy()
    module = jitorch.nn.CrossMapLRN2d(size, 0.1, 0.75, 2)
    np.testing.assert_allclose(module(jitorch.tensor(x)).numpy(), want, rtol=1e-12, atol=1e-14)
    leaf = jitorch.tensor(x[:1, :, :2, :2], requires_grad=True)
    assert jitorch.autograd.gradcheck(module, (leaf,))
    assert repr(module) == repr(torch.nn.CrossMapLRN2d(size, 0.1, 0.75, 2))


def test_rejects_other_ranks_as_torch():
    for m in (torch, jitorch):
        with pytest.raises(ValueError, match="Expected input to be 4D, got 3D"):
            m.nn.CrossMapLRN2d(3)(m.ones(2, 3, 4))
