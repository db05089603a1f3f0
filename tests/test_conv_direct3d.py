"""3-D convolutions through the 2-D direct kernels with the depth taps stacked as channels (`ops.conv_direct3d`):
forward, input and weight gradients against PyTorch, the strided weight kernel (`codegen.llvm_conv_weight`) and the
1x1 weight gradient (`ops.conv_patches.pointwise_weight`) against torch's, and that these paths are the ones taken."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jitorch
from helpers import check_op
from jitorch.codegen.llvm_conv import conv_lanes
from jitorch.codegen.llvm_conv_weight import DirectConvWeight
from jitorch.nn import functional as F
from jitorch.ops import conv_direct3d
from jitorch.runtime import threads

TOL = dict(atol=2e-4, rtol=2e-4)
W = conv_lanes("f32")  # output rows of one full register chunk: the direct kernels take them

# (input shape, weight shape, stride, padding, dilation); the last dim's output fills at least 3/4 of its chunks
GEOMETRIES = [
    ((2, 3, 5, 6, W), (8, 3, 3, 3, 3), 1, 1, 1),
    ((2, 4, 7, 9, W), (4, 4, 3, 2, 3), (2, 1, 1), (1, 0, 1), 1),
    ((2, 4, 8, 9, 2 * W), (8, 4, 3, 3, 3), 2, 1, 1),
    ((1, 4, 6, 9, 2 * W - 2), (16, 4, 2, 3, 3), (1, 2, 2), (0, 1, 2), (1, 2, 1)),
    ((2, 2, 7, 7, 2 * W + 2), (4, 2, 1, 3, 5), (3, 1, 2), (2, 1, 0), (1, 1, 2)),
    ((2, 6, 4, 5, 3 * W), (6, 6, 2, 2, 2), (1, 3, 3), 0, 1),
]


def _arr(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


@pytest.fixture
def calls(monkeypatch):
    """Counts of the 3-D direct kernels' calls, by name."""
    counts = {}
    for name in ("forward_3d", "transpose_3d", "weight_3d"):
        def spy(*args, _real=getattr(conv_direct3d, name), _name=name):
            out = _real(*args)
            counts[_name] = counts.get(_name, 0) + (out is not None)
            return out
        monkeypatch.setattr(f"jitorch.ops.conv_direct.{name}", spy)
    return counts


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs, ws, stride, padding, dilation", GEOMETRIES)
def test_conv3d_values_and_gradients_match_torch(calls, xs, ws, stride, padding, dilation, dtype):
    x, w, b = _arr(*xs, dtype=dtype), _arr(*ws, seed=1, dtype=dtype), _arr(ws[0], seed=2, dtype=dtype)
    check_op(lambda x, w, b: F.conv3d(x, w, b, stride, padding, dilation),
             lambda x, w, b: TF.conv3d(x, w, b, stride, padding, dilation), [x, w, b], **TOL)
    assert calls.get("forward_3d") == 1 and calls.get("weight_3d") == 1


def test_strided_input_gradient_takes_the_phases(calls):
    x, w = _arr(2, 4, 8, 9, 2 * W), _arr(8, 4, 3, 3, 3, seed=1)
    check_op(lambda x, w: F.conv3d(x, w, None, 2, 1), lambda x, w: TF.conv3d(x, w, None, 2, 1), [x, w], **TOL)
    assert calls == {"forward_3d": 1, "transpose_3d": 1, "weight_3d": 1}


@pytest.mark.parametrize("output_padding", [0, 1])
def test_conv_transpose3d_matches_torch(calls, output_padding):
    g, w, b = _arr(2, 8, 4, 5, W), _arr(8, 4, 3, 3, 3, seed=1), _arr(4, seed=2)
    check_op(lambda g, w, b: F.conv_transpose3d(g, w, b, 2, 1, output_padding),
             lambda g, w, b: TF.conv_transpose3d(g, w, b, 2, 1, output_padding), [g, w, b], **TOL)
    assert calls.get("transpose_3d") == 1


def test_channels_last_3d_and_module(calls):
    x = torch.from_numpy(_arr(2, 8, 4, 6, W)).to(memory_format=torch.channels_last_3d)
    tm = torch.nn.Conv3d(8, 16, 3, padding=1)
    jm = jitorch.nn.Conv3d(8, 16, 3, padding=1)
    jm.load_state_dict({k: jitorch.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    tx, jx = x.clone().requires_grad_(), jitorch.tensor(x.numpy()).to(memory_format=jitorch.channels_last_3d)
    jx.requires_grad_()
    ty, jy = tm(tx), jm(jx)
    g = _arr(*ty.shape, seed=3)
    ty.backward(torch.from_numpy(g))
    jy.backward(jitorch.tensor(g))
    np.testing.assert_allclose(jy.detach().numpy(), ty.detach().numpy(), **TOL)
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), **TOL)
    for name in ("weight", "bias"):
        np.testing.assert_allclose(getattr(jm, name).grad.numpy(), getattr(tm, name).grad.numpy(), **TOL)
    assert calls.get("forward_3d") == 2 and calls.get("weight_3d") == 1  # the input gradient is a forward one


def test_empty_batch(calls):
    x, w = _arr(0, 4, 4, 4, W), _arr(8, 4, 3, 3, 3, seed=1)
    check_op(lambda x, w: F.conv3d(x, w, None, 1, 1), lambda x, w: TF.conv3d(x, w, None, 1, 1), [x, w], **TOL)


def test_inf_input_weight_gradient_as_torch():
    # The windows that straddle two images never run in the weight gradient: an inf there would make nan where
    # torch's sums of real products give a number.
    x, w = _arr(2, 2, 4, 3, W), _arr(8, 2, 3, 1, 1, seed=1)
    x[0, 0, 3, 1, 2] = np.inf
    check_op(lambda x, w: F.conv3d(x, w, None, (2, 1, 1), 0), lambda x, w: TF.conv3d(x, w, None, (2, 1, 1), 0),
             [x, w], **TOL)


@pytest.mark.parametrize("groups, stride", [(2, 1), (4, 2), (8, (1, 2, 2))])
def test_groups_match_torch(calls, groups, stride):
    x, w, b = _arr(2, 8, 6, 5, 2 * W), _arr(8, 8 // groups, 3, 3, 3, seed=1), _arr(8, seed=2)
    check_op(lambda x, w, b: F.conv3d(x, w, b, stride, 1, 1, groups),
             lambda x, w, b: TF.conv3d(x, w, b, stride, 1, 1, groups), [x, w, b], **TOL)
    assert calls.get("forward_3d") and calls.get("weight_3d")


def test_grouped_conv_transpose3d_matches_torch(calls):
    g, w = _arr(2, 8, 4, 5, W), _arr(8, 2, 3, 3, 3, seed=1)
    check_op(lambda g, w: F.conv_transpose3d(g, w, None, 2, 1, 1, 4),
             lambda g, w: TF.conv_transpose3d(g, w, None, 2, 1, 1, 4), [g, w], **TOL)
    assert calls.get("transpose_3d") == 1


def test_depth_dilation_stays_with_the_gemm(calls):
    x, w = _arr(2, 4, 7, 5, W), _arr(8, 4, 3, 3, 3, seed=1)
    check_op(lambda x, w: F.conv3d(x, w, None, 1, 1, (2, 1, 1)),
             lambda x, w: TF.conv3d(x, w, None, 1, 1, (2, 1, 1)), [x, w], **TOL)
    assert not any(calls.values())


def test_several_threads_match_one(monkeypatch):
    x, w, g = _arr(2, 8, 6, 8, W), _arr(16, 8, 3, 3, 3, seed=1), _arr(2, 16, 3, 4, W // 2, seed=2)
    pads = [(1, 1)] * 3
    one = (conv_direct3d.forward_3d("f32", x, w, None, (1, 1, 1), pads, (1, 1, 1), (6, 8, W)),
           conv_direct3d.weight_3d("f32", x, g, (3, 3, 3), (2, 2, 2), pads, (1, 1, 1)))
    monkeypatch.setattr(conv_direct3d, "_parallel",
                        lambda flops: lambda f, n: threads.parallel_for(f, n, num_threads=3))
    several = (conv_direct3d.forward_3d("f32", x, w, None, (1, 1, 1), pads, (1, 1, 1), (6, 8, W)),
               conv_direct3d.weight_3d("f32", x, g, (3, 3, 3), (2, 2, 2), pads, (1, 1, 1)))
    for a, b in zip(one, several):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("stride, dilation", [((2, 2), (1, 1)), ((1, 3), (1, 2)), ((3, 2), (2, 1))])
def test_strided_weight_kernel_matches_torch(stride, dilation):
    x = _arr(2, 3, 11, 2 * W + 5)
    kernel = (3, 2)
    out = [(n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(x.shape[2:], kernel, stride, dilation)]
    g = _arr(2, 4, *out, seed=1)
    got = DirectConvWeight("f32", kernel, W, 2, stride=stride)(x, g, ((0, 0), (0, 0)), 1, dilation)
    want = torch.nn.grad.conv2d_weight(torch.from_numpy(x), (4, 3) + kernel, torch.from_numpy(g), stride, 0,
                                       dilation)
    np.testing.assert_allclose(got, want.numpy(), **TOL)


@pytest.mark.parametrize("xs, o, stride", [((2, 16, 4, 6, W), 32, 1), ((2, 8, 5, 6, 2 * W), 16, 2),
                                           ((3, 16, 9, 2 * W), 8, (2, 1))])
def test_pointwise_weight_gradient_matches_torch(monkeypatch, xs, o, stride):
    from jitorch.ops import conv_ops

    used = []
    real = conv_ops.pointwise_weight
    monkeypatch.setattr(conv_ops, "pointwise_weight", lambda *a: used.append(1) or real(*a))
    nd = len(xs) - 2
    conv, tconv = (F.conv3d, TF.conv3d) if nd == 3 else (F.conv2d, TF.conv2d)
    x, w, b = _arr(*xs), _arr(o, xs[1], *(1,) * nd, seed=1), _arr(o, seed=2)
    check_op(lambda x, w, b: conv(x, w, b, stride), lambda x, w, b: tconv(x, w, b, stride), [x, w, b], **TOL)
    assert used


def test_pointwise_weight_loops_over_samples_when_their_products_are_large():
    from jitorch.ops.conv_patches import pointwise_weight

    x, g = _arr(8, 32, 3, 5), _arr(8, 24, 2, 3, seed=1)  # 8 * 24 * 32 products outgrow the inputs
    got = pointwise_weight(np, x, g, (1, 1), (2, 2), [(0, 0), (0, 0)], (1, 1), 1)
    want = torch.nn.grad.conv2d_weight(torch.from_numpy(x), (24, 32, 1, 1), torch.from_numpy(g), 2)
    np.testing.assert_allclose(got, want.numpy(), **TOL)
