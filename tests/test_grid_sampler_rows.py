"""The ``grid_sampler`` rows (``grid_sample``'s bilinear/trilinear, nearest and bicubic modes as sparse tap products)
against torch: values, input and grid gradients for random upstream gradients in every padding mode, 4-D and 5-D,
float32 and float64, channel counts that are not multiples of the channel tile, channels-last inputs and strided
grids, grids far outside the image (many reflections), size-1 dims, and double backward through the composite."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import check_op

import jitorch
import jitorch.nn.functional as F
from nn_oracle import torch_single_thread  # noqa: F401 - an autouse fixture: one oracle thread

PADDING = ["zeros", "border", "reflection"]


def sample(**kw):
    return (lambda x, g: F.grid_sample(x, g, **kw)), (lambda x, g: TF.grid_sample(x, g, **kw))


@pytest.mark.parametrize("dims, mode", [(2, "bilinear"), (2, "nearest"), (2, "bicubic"), (3, "bilinear"),
                                        (3, "nearest")])
@pytest.mark.parametrize("padding_mode", PADDING)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_grid_sampler_row_matches_torch(dims, mode, padding_mode, align_corners, dtype, rng):
    spatial = (5, 6, 7)[-dims:]
    x = rng.standard_normal((2, 11) + spatial).astype(dtype)
    grid = rng.uniform(-1.4, 1.4, (2,) + (3, 4, 5)[-dims:] + (dims,)).astype(dtype)
    tol = {"atol": 1e-5, "rtol": 1e-4} if dtype == "float32" else {"atol": 1e-10, "rtol": 1e-10}
    check_op(*sample(mode=mode, padding_mode=padding_mode, align_corners=align_corners), [x, grid], **tol)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("padding_mode", PADDING)
def test_grid_sampler_row_far_grids_and_unit_dims(mode, padding_mode, rng):
    x = rng.standard_normal((2, 3, 1, 6)).astype("float32")  # a size-1 dim: reflection folds onto one point
    grid = rng.uniform(-4.5, 4.5, (2, 7, 3, 2)).astype("float32")  # several reflections each way
    for align_corners in (False, True):
        check_op(*sample(mode=mode, padding_mode=padding_mode, align_corners=align_corners), [x, grid], atol=1e-5,
                 rtol=1e-4)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sampler_row_channels_last_and_strided_grid(mode, rng):
    x = rng.standard_normal((2, 20, 6, 5)).astype("float32")
    grid = rng.uniform(-1.1, 1.1, (2, 4, 3, 2)).astype("float32")
    up = rng.standard_normal((2, 20, 4, 3)).astype("float32")
    results = []
    for lib, fn in ((jitorch, F.grid_sample), (torch, TF.grid_sample)):
        xt = lib.tensor(x).contiguous(memory_format=lib.channels_last).requires_grad_()
        gt = lib.tensor(np.ascontiguousarray(grid.transpose(0, 2, 1, 3))).transpose(1, 2).requires_grad_()
        out = fn(xt, gt, mode=mode, padding_mode="border", align_corners=False)
        out.backward(lib.tensor(up))
        results.append((out.detach().numpy(), xt.grad.numpy(), gt.grad.numpy(), out.is_contiguous()))
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("padding_mode", PADDING)
def test_grid_sampler_row_double_backward_matches_torch(mode, padding_mode, rng):
    x = rng.standard_normal((2, 3, 4, 5))
    grid = rng.uniform(-1.2, 1.2, (2, 3, 2, 2))
    up, vx, vg = rng.standard_normal((2, 3, 3, 2)), rng.standard_normal(x.shape), rng.standard_normal(grid.shape)
    results = []
    for lib in (jitorch, torch):
        xt, gt = lib.tensor(x, requires_grad=True), lib.tensor(grid, requires_grad=True)
        out = lib.nn.functional.grid_sample(xt, gt, mode=mode, padding_mode=padding_mode, align_corners=False)
        assert type(out.grad_fn).__name__ == "GridSampler2DBackward0"
        gx, gg = lib.autograd.grad(out, (xt, gt), lib.tensor(up), create_graph=True)
        ((gx * lib.tensor(vx)).sum() + (gg * lib.tensor(vg)).sum()).backward()
        results.append([t.detach().numpy() for t in (gx, gg, xt.grad, gt.grad)])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, atol=1e-10, rtol=1e-9)


def test_node_names_as_torch():
    for shape, grid_shape in (((1, 2, 3, 4), (1, 2, 2, 2)), ((1, 2, 3, 4, 5), (1, 2, 2, 2, 3))):
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        g = np.random.default_rng(1).uniform(-1, 1, grid_shape).astype(np.float32)
        got = jitorch.nn.functional.grid_sample(jitorch.tensor(x, requires_grad=True), jitorch.tensor(g),
                                                align_corners=False)
        want = torch.nn.functional.grid_sample(torch.tensor(x, requires_grad=True), torch.tensor(g),
                                               align_corners=False)
        assert got.grad_fn.name() == want.grad_fn.name()
