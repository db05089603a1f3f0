"""``grid_sample`` against PyTorch beyond 4-D bilinear/nearest: 5-D (trilinear, nearest) and bicubic sampling in
every padding mode with input and grid gradients, NaN grids, empty batches, ATen's zero grid gradient on the clipped
edges; and ``channel_shuffle``/``nn.ChannelShuffle``."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import check_error, check_op, gradcheck_op

import jitorch
import jitorch.nn.functional as F
from nn_oracle import torch_single_thread  # noqa: F401 - an autouse fixture: one oracle thread

TOL = {"atol": 1e-5, "rtol": 1e-4}
PADDING = ["zeros", "border", "reflection"]


def sample(**kw):
    return (lambda x, g: F.grid_sample(x, g, **kw)), (lambda x, g: TF.grid_sample(x, g, **kw))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", PADDING)
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_5d_matches_torch(dtype, mode, padding_mode, align_corners, rng):
    x = rng.uniform(-2, 2, (2, 2, 3, 4, 5)).astype(dtype)
    grid = rng.uniform(-1.2, 1.2, (2, 2, 3, 4, 3)).astype(dtype)
    check_op(*sample(mode=mode, padding_mode=padding_mode, align_corners=align_corners), [x, grid], **TOL)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("padding_mode", PADDING)
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_bicubic_matches_torch(dtype, padding_mode, align_corners, rng):
    x = rng.uniform(-2, 2, (2, 3, 4, 5)).astype(dtype)
    grid = rng.uniform(-1.3, 1.3, (2, 3, 6, 2)).astype(dtype)
    check_op(*sample(mode="bicubic", padding_mode=padding_mode, align_corners=align_corners), [x, grid], **TOL)


def test_grid_sample_layouts_gradcheck_and_edges(rng):
    x, grid = rng.uniform(-2, 2, (2, 3, 4, 5)).astype("float32"), rng.uniform(-1, 1, (2, 3, 6, 2)).astype("float32")
    check_op(*sample(mode="bicubic", align_corners=False), [x, grid], layout="transposed", **TOL)
    x5, grid5 = rng.uniform(-2, 2, (1, 2, 3, 3, 4)), rng.uniform(-0.9, 0.9, (1, 2, 2, 2, 3))
    gradcheck_op(lambda x, g: F.grid_sample(x, g, align_corners=False, padding_mode="border"), [x5, grid5])
    # Points exactly on the clipped edges: ATen passes no grid gradient there.
    edges = np.array([[[[1.0, 1.0], [-1.0, -1.0], [2.5, -3.5]]]], np.float32)
    for padding_mode in ("border", "reflection"):
        check_op(*sample(align_corners=True, padding_mode=padding_mode), [x[:1, :1], edges], **TOL)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_nan_grid_and_empty_batch(mode, rng):
    x = rng.uniform(-2, 2, (1, 1, 4, 5)).astype("float32")
    grid = np.array([[[[np.nan, 0.2], [3.0, -5.0], [0.1, 0.3]]]], np.float32)
    check_op(*sample(mode=mode, align_corners=False), [x, grid], grad=False, **TOL)
    empty = (np.zeros((0, 1, 4, 5), np.float32), np.zeros((0, 3, 6, 2), np.float32))
    check_op(*sample(mode=mode, align_corners=False), list(empty), **TOL)


def test_grid_sample_shape_errors(rng):
    x5, grid4 = rng.standard_normal((1, 1, 2, 3, 4)).astype("float32"), rng.standard_normal((1, 2, 3, 2))
    check_error(*sample(align_corners=False), [x5, grid4.astype("float32")], match="grid_sampler")
    check_error(*sample(mode="bicubic", align_corners=False),
                [x5, rng.standard_normal((1, 1, 2, 2, 3)).astype("float32")], match="bicubic")


@pytest.mark.parametrize("groups", [1, 2, 3, 0, 4])
def test_channel_shuffle_matches_torch(groups, rng):
    x = rng.standard_normal((2, 6, 2, 3)).astype("float32")
    check_op(lambda x: F.channel_shuffle(x, groups), lambda x: TF.channel_shuffle(x, groups), [x],
             layout="transposed")
    check_op(jitorch.nn.ChannelShuffle(groups), torch.nn.ChannelShuffle(groups), [x[:, :, 0]])
