"""The K-major weight gradient's product runs with the window rows as its rows when they outnumber the output
channels (``conv_layouts._SWAP_DEPTH_RATIO``): the same gradients as torch's (transposed convolutions' forward and
backward, grouped and plain convolutions), contiguous, and equal to the other order's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.ops import conv_layouts
from helpers import check_op

TOL = dict(atol=2e-4, rtol=1e-4)


def _arr(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_conv_transpose_forward_and_backward_match_torch(layout):
    x, w, b = _arr(2, 16, 6, 6), _arr(16, 8, 4, 4, seed=1), _arr(8, seed=2)
    check_op(lambda x, w, b: jitorch.nn.functional.conv_transpose2d(x, w, b, 2, 1),
             lambda x, w, b: torch.nn.functional.conv_transpose2d(x, w, b, 2, 1), [x, w, b],
             layout=[layout, "contiguous", "contiguous"], **TOL)


@pytest.mark.parametrize("groups", [1, 2])
def test_deep_windows_few_channels_match_torch(groups):
    x, w = _arr(2, 8, 20, 20, seed=3), _arr(4, 8 // groups, 3, 3, seed=4)
    check_op(lambda x, w: jitorch.nn.functional.conv2d(x, w, None, 1, 1, 1, groups),
             lambda x, w: torch.nn.functional.conv2d(x, w, None, 1, 1, 1, groups), [x, w], **TOL)


def test_both_orders_agree_and_are_contiguous(monkeypatch):
    x, g = _arr(4, 16, 18, 18, seed=5), _arr(4, 8, 16, 16, seed=6)
    pads = [(0, 0), (0, 0)]
    swapped = conv_layouts.conv_weight(np, x, g, (3, 3), (1, 1), pads, (1, 1), 1)
    monkeypatch.setattr(conv_layouts, "_SWAP_DEPTH_RATIO", 1 << 40)
    plain = conv_layouts.conv_weight(np, x, g, (3, 3), (1, 1), pads, (1, 1), 1)
    assert swapped.flags.c_contiguous and swapped.shape == plain.shape == (8, 16, 3, 3)
    np.testing.assert_allclose(swapped, plain, **TOL)
    want = torch.ops.aten.convolution_backward(torch.from_numpy(g), torch.from_numpy(x), torch.zeros(8, 16, 3, 3),
                                               None, (1, 1), (0, 0), (1, 1), False, (0, 0), 1,
                                               (False, True, False))[1]
    np.testing.assert_allclose(swapped, want.numpy(), **TOL)
