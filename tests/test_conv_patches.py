"""Convolutions whose kernel equals their stride (patch embeddings, 2x2 stride-2 down- and up-sampling) run as one
product over disjoint patches (`jitorch.ops.conv_patches`): forward, input gradient and weight gradient equal
torch's for 1-, 2- and 3-D, with and without bias, float32 and float64, cropped inputs and output_padding; the path
is taken where it applies and declined where it does not."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.ops import conv_ops

CASES = [((2, 3, 8, 8), (4, 3, 2, 2), 2, "conv2d", 0), ((2, 3, 9, 11), (5, 3, 2, 2), 2, "conv2d", 0),
         ((1, 3, 32, 32), (6, 3, 16, 16), 16, "conv2d", 0), ((2, 4, 7), (3, 4, 3), 3, "conv1d", 0),
         ((1, 2, 4, 4, 4), (3, 2, 2, 2, 2), 2, "conv3d", 0), ((2, 4, 5, 5), (4, 3, 2, 2), 2, "conv_transpose2d", 0),
         ((2, 4, 5, 6), (4, 2, 3, 3), 3, "conv_transpose2d", 0), ((2, 4, 5, 6), (4, 2, 2, 2), 2, "conv_transpose2d", 1),
         ((2, 4, 5), (4, 2, 3), 3, "conv_transpose1d", 2)]


@pytest.fixture
def counted(monkeypatch):
    calls = {"forward": 0, "transpose": 0, "weight": 0}
    for name in calls:
        original = getattr(conv_ops, f"patch_{name}")

        def wrapped(*args, _original=original, _name=name, **kwargs):
            out = _original(*args, **kwargs)
            calls[_name] += out is not None
            return out
        monkeypatch.setattr(conv_ops, f"patch_{name}", wrapped)
    return calls


@pytest.mark.parametrize("x_shape, w_shape, stride, fn, output_padding", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_patch_convolutions_match_torch(counted, x_shape, w_shape, stride, fn, output_padding, dtype, bias):
    rng = np.random.default_rng(len(x_shape) * stride)
    x, w = rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[1] if fn.startswith("conv_transpose") else w_shape[0]).astype(dtype)
    results = []
    for lib in (jitorch, torch):
        xt, wt = lib.tensor(x, requires_grad=True), lib.tensor(w, requires_grad=True)
        bt = lib.tensor(b, requires_grad=True) if bias else None
        extra = {"output_padding": output_padding} if fn.startswith("conv_transpose") else {}
        out = getattr(lib.nn.functional, fn)(xt, wt, bt, stride=stride, **extra)
        out.backward(lib.tensor(np.random.default_rng(1).standard_normal(tuple(out.shape)).astype(dtype)))
        results.append([out.detach().numpy(), xt.grad.numpy(), wt.grad.numpy()] + ([bt.grad.numpy()] if bias else []))
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for got, want in zip(*results):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    # A convolution runs the forward and, backward, the transpose and the weight gradient (transposed: the reverse)
    assert counted == {"forward": 1, "transpose": 1, "weight": 1}


@pytest.mark.parametrize("kwargs", [{"stride": 2, "padding": 1}, {"stride": 1}, {"stride": 2, "dilation": 2},
                                    {"stride": 2, "groups": 2}])
def test_other_convolutions_do_not_take_the_patch_path(counted, kwargs):
    x = jitorch.randn(1, 4, 8, 8, requires_grad=True)
    w = jitorch.randn(4, 4 // kwargs.get("groups", 1), 2, 2, requires_grad=True)
    jitorch.nn.functional.conv2d(x, w, **kwargs).sum().backward()
    assert counted == {"forward": 0, "transpose": 0, "weight": 0}
