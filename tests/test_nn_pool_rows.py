"""The pooling rows of ``jitorch/ops/pool_ops.py`` against PyTorch: disjoint-window max-pool gradients (one indexed
store), their double backward, and NaN inputs (values and indices must match torch's choice of maximum)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jitorch

from helpers import check_op, gradgradcheck_op, make_array
from jitorch.nn import _functional_spatial as F
from nn_oracle import torch_single_thread  # noqa: F401 - an autouse fixture: one oracle thread

TOL = dict(atol=1e-6, rtol=1e-6)
JT = (F.max_pool1d, F.max_pool2d, F.max_pool3d)
TH = (TF.max_pool1d, TF.max_pool2d, TF.max_pool3d)


def arr(*shape, seed=0, dtype="float32"):
    return make_array(shape, dtype, np.random.default_rng(seed))


# Disjoint windows: tiling, stride past the window, dilated windows, padding, ceil mode (a partial last window).
DISJOINT = [  # (kernel, stride, padding, dilation, ceil_mode)
    (2, 2, 0, 1, False), (2, 3, 0, 1, False), (2, 3, 1, 1, True), (2, 4, 0, 2, False), (3, 3, 1, 1, True),
]


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil_mode", DISJOINT)
def test_disjoint_max_pool_matches_torch(nd, kernel, stride, padding, dilation, ceil_mode):
    x = arr(2, 3, *((9, 8, 7)[:nd]))
    args = dict(kernel_size=kernel, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode,
                return_indices=True)
    check_op(lambda t: JT[nd - 1](t, **args), lambda t: TH[nd - 1](t, **args), [x], **TOL)


def test_disjoint_max_pool_layouts_and_double_backward():
    x = arr(2, 3, 6, 6, seed=1)
    for layout in ("transposed", "sliced"):
        check_op(lambda t: F.max_pool2d(t, 2), lambda t: TF.max_pool2d(t, 2), [x], layout=layout, **TOL)
    gradgradcheck_op(lambda t: F.max_pool2d(t, 2), [arr(1, 2, 4, 4, seed=2)])
    gradgradcheck_op(lambda t: F.max_pool1d(t, 2, 3, padding=1), [arr(1, 2, 7, seed=3)])


@pytest.mark.parametrize("kernel,stride", [(2, 2), (3, 2), (2, 1), (6, 1)])  # (6, 1): the argmax path
def test_max_pool_nan_values_and_indices_match_torch(kernel, stride):
    x = arr(2, 2, 6, 6, seed=4)
    x[0, 0, 0, 0] = np.nan  # one NaN in a window
    x[0, 1, 2:4, 2:4] = np.nan  # a window of NaNs only
    x[1, 0, 0, 1] = x[1, 0, 1, 0] = np.nan  # two NaNs in one window
    x[1, 1, 4, 5] = np.inf
    x[1, 1, 5, 4] = np.nan  # NaN beats inf
    got, ref = check_op(lambda t: F.max_pool2d(t, kernel, stride, return_indices=True),
                        lambda t: TF.max_pool2d(t, kernel, stride, return_indices=True), [x], grad=False, **TOL)
    assert np.array_equal(got[1].numpy(), ref[1].numpy())
    assert np.array_equal(np.isnan(got[0].numpy()), np.isnan(ref[0].numpy()))
    # The gradient follows the indices, NaN windows included.
    xt = torch.tensor(x, requires_grad=True)
    TF.max_pool2d(xt, kernel, stride).backward(torch.ones(ref[0].shape))
    xj = jitorch.tensor(x, requires_grad=True)
    F.max_pool2d(xj, kernel, stride).backward(jitorch.ones(*ref[0].shape))
    assert np.array_equal(xj.grad.numpy(), xt.grad.numpy())


def test_adaptive_max_pool_nan_indices_match_torch():
    x = arr(1, 2, 5, 7, seed=5)
    x[0, 0, 0, 0] = x[0, 0, 1, 1] = np.nan
    got, ref = check_op(lambda t: F.adaptive_max_pool2d(t, (2, 3), return_indices=True),
                        lambda t: TF.adaptive_max_pool2d(t, (2, 3), return_indices=True), [x], grad=False, **TOL)
    assert np.array_equal(got[1].numpy(), ref[1].numpy())
