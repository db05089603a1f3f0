"""``torch.nn.grad`` (a convolution's input and weight gradients as functions) and ``torch.nn.common_types`` (the
size aliases of module signatures), against torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

CASES = [(1, (2, 4, 9), (6, 2, 3), {"stride": 2, "padding": 1, "groups": 2}),
         (2, (2, 3, 9, 8), (5, 3, 3, 3), {"stride": 2, "padding": 1}),
         (2, (1, 2, 7, 7), (4, 2, 2, 2), {"dilation": 2}),
         (3, (1, 2, 5, 5, 5), (3, 2, 2, 2, 2), {"stride": 2})]


@pytest.mark.parametrize("nd, x_shape, w_shape, kwargs", CASES)
def test_conv_input_and_weight_gradients_match_torch(nd, x_shape, w_shape, kwargs):
    rng = np.random.default_rng(nd)
    x, w = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    out = getattr(torch.nn.functional, f"conv{nd}d")(torch.from_numpy(x), torch.from_numpy(w), **kwargs)
    g = rng.standard_normal(tuple(out.shape)).astype(np.float32)
    results = []
    for lib in (jitorch, torch):
        grad = lib.nn.grad
        results.append((getattr(grad, f"conv{nd}d_input")(x_shape, lib.tensor(w), lib.tensor(g), **kwargs),
                        getattr(grad, f"conv{nd}d_weight")(lib.tensor(x), w_shape, lib.tensor(g), **kwargs)))
    for got, want in zip(*results):
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)


def test_common_types_has_torch_s_names():
    import torch.nn.common_types as theirs

    import jitorch.nn.common_types as mine
    names = {n for n in dir(theirs) if n.startswith("_") and n.endswith("_t")}
    assert names <= set(dir(mine))
