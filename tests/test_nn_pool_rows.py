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


@pytest.mark.parametrize("nd,shape", [(2, (16, 8, 20, 22)), (1, (8, 16, 300)), (3, (2, 4, 12, 10, 14))])
@pytest.mark.parametrize("kernel,stride,dilation", [(2, 2, 1), (3, 2, 1), (2, 2, 2), (3, 3, 1)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_generated_pool_kernels_match_torch_with_ties_and_nan(nd, shape, kernel, stride, dilation, dtype,
                                                                monkeypatch):
    # From 4096 elements, unpadded pools whose windows fit run the CPU graphs' generated kernels eagerly
    # (ops/native_lowered.py): the forward up to 9-position windows, the disjoint-window backward when strides tile
    # the input. Ties and NaN must pick torch's position.
    from jitorch.ops import native_lowered

    taken = []
    for name in ("max_pool", "max_pool_scatter"):
        real = getattr(native_lowered, name)
        monkeypatch.setattr(native_lowered, name, lambda *a, real=real, name=name: taken.append(
            (name, real(*a) is not None)) or real(*a))
    rng = np.random.default_rng(6)
    x = rng.integers(-3, 3, shape).astype(dtype)  # many ties
    x.reshape(-1)[::53] = np.nan
    args = dict(kernel_size=kernel, stride=stride, dilation=dilation, return_indices=True)
    check_op(lambda t: JT[nd - 1](t, **args), lambda t: TH[nd - 1](t, **args), [x], **TOL)
    assert (("max_pool", True) in taken) == (kernel ** nd <= 9)  # the generated scan loads at most 9 positions
    tiles = all(n % stride == 0 for n in shape[2:]) and stride >= dilation * (kernel - 1) + 1
    assert (("max_pool_scatter", True) in taken) == tiles


@pytest.mark.parametrize("path", ["generated", "numpy"])
@pytest.mark.parametrize("nd,shape,kernel,stride,padding,dilation,ceil_mode", [
    (2, (3, 5, 66, 66), 3, 2, 1, 1, False),  # ResNet's stem pool
    (2, (3, 5, 66, 67), 3, 2, 1, 2, True),
    (1, (3, 5, 4001), 4, 3, 2, 1, True),
    (3, (2, 2, 17, 18, 19), 3, 2, 1, 1, True),
    (2, (2, 3, 6, 6), 3, 2, 1, 1, False),  # small: the NumPy row on either path
])
def test_padded_max_pool_windows_of_minus_inf_name_their_first_input_position(path, nd, shape, kernel, stride,
                                                                              padding, dilation, ceil_mode,
                                                                              monkeypatch):
    # A padded (or ceil-mode) window whose input values are all -inf: torch's index is the window's first position
    # inside the input; the scans start from the -inf fill and once returned the fill's position (a negative
    # index, or one in the row above), which the backward then wrote the gradient to.
    from jitorch.ops import native_lowered

    if path == "numpy":
        monkeypatch.setattr(native_lowered, "MIN_SIZE", 1 << 40)
    rng = np.random.default_rng(7)
    x = np.full(shape, -np.inf, np.float32)
    x[..., 3:] = rng.integers(-2, 2, x[..., 3:].shape)  # ties
    x.reshape(-1)[::31] = -np.inf
    x.reshape(-1)[::97] = np.nan
    args = dict(kernel_size=kernel, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode,
                return_indices=True)
    check_op(lambda t: JT[nd - 1](t, **args), lambda t: TH[nd - 1](t, **args), [x], **TOL)


@pytest.mark.parametrize("nd,shape,kernel,stride,padding,dilation,ceil_mode", [
    (2, (4, 6, 32, 32), 3, 2, 1, 1, False),  # ResNet's stem pool
    (2, (3, 5, 33, 35), 3, 1, 1, 1, True),
    (2, (2, 3, 40, 41), 5, 2, 2, 1, True),
    (2, (2, 3, 20, 21), 3, 2, 1, 2, False),
    (3, (2, 3, 9, 10, 11), 3, 2, 1, 1, True),
    (1, (4, 5, 300), 4, 3, 2, 1, True),
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_overlapping_window_gradients_match_torch_bit_for_bit(nd, shape, kernel, stride, padding, dilation,
                                                              ceil_mode, dtype, monkeypatch):
    # Overlapping windows share input positions: the generated gather kernel (ops/pool_overlap_grad.py) adds each
    # position's windows in torch's order, so even the float sums equal torch's exactly.
    from jitorch.ops import pool_overlap_grad

    taken = []
    real = pool_overlap_grad.gradient
    monkeypatch.setattr(pool_overlap_grad, "gradient", lambda *a: taken.append(1) or real(*a))
    rng = np.random.default_rng(8)
    x = rng.integers(-3, 3, shape).astype(dtype)  # ties: windows share their maxima
    args = dict(kernel_size=kernel, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
    jx, tx = jitorch.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    jy, ty = JT[nd - 1](jx, **args), TH[nd - 1](tx, **args)
    g = rng.standard_normal(ty.shape).astype(dtype)
    jy.backward(jitorch.tensor(g))
    ty.backward(torch.tensor(g))
    assert taken
    np.testing.assert_array_equal(jx.grad.numpy(), tx.grad.numpy())


def test_overlapping_window_gradient_double_backward_and_compiled_training():
    x = arr(2, 3, 9, 8, seed=9, dtype="float64")
    args = dict(kernel_size=3, stride=2, padding=1)
    gradgradcheck_op(lambda t: F.max_pool2d(t, **args), [x])

    class Net(jitorch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = jitorch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, t):
            return F.max_pool2d(self.conv(t), 3, 2, 1).square().sum()

    jitorch.manual_seed(0)
    net = Net()
    data = jitorch.tensor(arr(4, 3, 16, 16, seed=10))
    net(data).backward()
    eager = [p.grad.clone() for p in net.parameters()]
    compiled = jitorch.compile(net)
    for _ in range(3):  # traced, then run through the compiled backward
        net.zero_grad()
        compiled(data).backward()
        for p, want in zip(net.parameters(), eager):
            np.testing.assert_allclose(p.grad.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
