"""An in-place op on the values of a max pool or a max/min by dim (``MaxPool2d`` then ``ReLU(inplace=True)``) keeps
backward working, as in torch: their backward reads only the saved indices, version-checked alone."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

CASES = {
    "MaxPool2d then ReLU(inplace)": lambda lib, x: lib.nn.Sequential(lib.nn.MaxPool2d(2, 2), lib.nn.ReLU(True))(x),
    "max_pool2d ceil": lambda lib, x: lib.nn.functional.relu_(lib.nn.functional.max_pool2d(x, 3, 2, ceil_mode=True)),
    "max_pool1d": lambda lib, x: lib.nn.functional.relu_(lib.nn.functional.max_pool1d(x.flatten(2), 2)),
    "adaptive_max_pool2d": lambda lib, x: lib.nn.functional.relu_(lib.nn.functional.adaptive_max_pool2d(x, 3)),
    "max by dim": lambda lib, x: x.max(dim=1).values.relu_(),
    "min by dim": lambda lib, x: x.min(dim=1)[0].relu_(),
    "sdpa then add_": lambda lib, x: lib.nn.functional.scaled_dot_product_attention(x, x, x).add_(1.0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_inplace_on_selected_values_keeps_backward(case):
    data = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    grads = []
    for lib in (jitorch, torch):
        x = lib.tensor(data, requires_grad=True)
        try:
            CASES[case](lib, x).sum().backward()
        except RuntimeError as exc:  # torch refuses sdpa + in-place: jitorch's backward needs no overwritten value
            assert lib is torch and "inplace" in str(exc), exc
            continue
        grads.append(x.grad.numpy())
    for got in grads[1:]:
        np.testing.assert_allclose(grads[0], got, rtol=1e-5, atol=1e-6)
