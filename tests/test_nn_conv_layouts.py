"""The convolution layouts of jitorch/ops/conv_layouts.py against PyTorch: channels-last and K-major window matrices,
the stride-1 input gradient as a convolution of the gradient, and the forward's window matrix kept for the weight
gradient (used only in first-order eager backward)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jitorch
from helpers import check_op, make_array
from jitorch.nn import _functional_spatial as F
from jitorch.ops import conv_layouts
from nn_oracle import torch_single_thread  # noqa: F401 - an autouse fixture: one oracle thread

CONV_TOL = dict(atol=2e-4, rtol=1e-4)  # float32 sums of up to ~300 products of values in [-3, 3]


@pytest.fixture(autouse=True)
def gemm_layouts_only(monkeypatch):
    """This file is about the GEMM layouts: the direct kernels (tests/test_conv_direct.py), which take rows that fill
    their register chunks (a lane count that varies by host), are switched off so every case here reaches a layout."""
    from jitorch.ops import conv_ops

    for name in ("direct_forward", "direct_weight", "direct_transpose"):
        monkeypatch.setattr(conv_ops, name, lambda *args: None)


def arr(*shape, seed=0, dtype="float32"):
    return make_array(shape, dtype, np.random.default_rng(seed))


# (channels in, channels out, spatial, kernel, stride, padding, dilation, groups): the digits CNN's two layers (one
# channel: K-major; sixteen: channels-last), and both layouts under stride, dilation, asymmetric kernels and groups.
CASES = [
    (1, 16, (8, 8), (3, 3), 1, 1, 1, 1),
    (16, 32, (4, 4), (3, 3), 1, 1, 1, 1),
    (8, 6, (7, 9), (2, 3), (2, 1), (0, 2), (1, 2), 1),
    (8, 6, (7, 9), (3, 1), 1, 0, (2, 1), 2),
    (12, 4, (6, 5), (3, 3), 3, 2, 1, 1),
    (2, 4, (11,), (5,), 1, 3, 2, 1),
    (6, 4, (4, 5, 3), (2, 3, 2), 1, 1, 1, 1),
    (3, 5, (10, 18), (3, 3), 1, 1, 1, 1),  # long rows: K-major with the flat frame
    (2, 4, (40,), (5,), 1, 2, 1, 1),
    (3, 4, (9, 20), (3, 2), 2, 1, (1, 2), 1),  # long rows, strided: the exact frame
]


@pytest.mark.parametrize("cin,cout,spatial,kernel,stride,padding,dilation,groups", CASES)
def test_layouts_match_torch(cin, cout, spatial, kernel, stride, padding, dilation, groups):
    nd = len(spatial)
    x, w, b = arr(3, cin, *spatial), arr(cout, cin // groups, *kernel, seed=1), arr(cout, seed=2)
    jt_fn, th_fn = (F.conv1d, F.conv2d, F.conv3d)[nd - 1], (TF.conv1d, TF.conv2d, TF.conv3d)[nd - 1]
    check_op(lambda x, w, b: jt_fn(x, w, b, stride, padding, dilation, groups),
             lambda x, w, b: th_fn(x, w, b, stride, padding, dilation, groups), [x, w, b], **CONV_TOL)


def test_both_layouts_are_exercised():
    """The cases above reach each layout: the choice follows the copy runs, not a fixed rule per test."""
    assert not conv_layouts.channels_last(1, (3, 3), (1, 1), (1, 1), (8, 8), 1)
    assert conv_layouts.channels_last(16, (3, 3), (1, 1), (1, 1), (4, 4), 1)
    assert not conv_layouts.channels_last(16, (3, 3), (1, 1), (1, 1), (4, 4), 2)  # groups: K-major
    assert not conv_layouts.channels_last(64, (3, 3), (1, 1), (1, 1), (32, 32), 1)  # long rows: K-major


@pytest.mark.parametrize("stride,padding,output_padding,dilation,groups", [
    (1, 0, 0, 1, 1), (1, 1, 0, 1, 2), (1, 2, 1, 2, 1),
    (1, 3, 0, 1, 1),  # padding past the kernel's reach: the col2im path even at stride 1
])
def test_conv_transpose_stride_one_matches_torch(stride, padding, output_padding, dilation, groups):
    x, w, b = arr(2, 4, 7, 6), arr(4, 6 // groups, 3, 2, seed=1), arr(6, seed=2)
    check_op(lambda x, w, b: F.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation),
             lambda x, w, b: TF.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation),
             [x, w, b], **CONV_TOL)


def _conv_node(out):
    return out.grad_fn


def test_forward_windows_kept_only_for_eager_weight_gradients():
    x, w, b = (jitorch.from_numpy(a) for a in (arr(2, 16, 4, 4), arr(8, 16, 3, 3, seed=1), arr(8, seed=2)))
    w.requires_grad_()
    assert getattr(_conv_node(F.conv2d(x, w, b, padding=1)), "conv_cols", None) is not None
    w.requires_grad_(False)
    x.requires_grad_()
    assert getattr(_conv_node(F.conv2d(x, w, b, padding=1)), "conv_cols", None) is None  # no weight gradient
    w.requires_grad_()
    with jitorch.no_grad():
        assert F.conv2d(x, w, b, padding=1).grad_fn is None
    assert conv_layouts.STASH.cols is None and not conv_layouts.STASH.want  # nothing left behind


@pytest.mark.parametrize("cin,width", [(1, 6), (16, 6), (3, 18)])  # K-major, channels-last, K-major flat frame
def test_kept_windows_give_the_recomputed_gradients(cin, width):
    """First-order backward (kept windows) and create_graph backward (windows copied again) agree with torch."""
    xa, wa, ba, ga = (arr(4, cin, 6, width), arr(8, cin, 3, 3, seed=1), arr(8, seed=2),
                      arr(4, 8, 6, width, seed=3))
    grads = {}
    for name, lib, conv, create_graph in (("kept", jitorch, F.conv2d, False), ("again", jitorch, F.conv2d, True),
                                          ("torch", torch, TF.conv2d, False)):
        x, w, b = (lib.tensor(a, requires_grad=True) for a in (xa, wa, ba))
        out = conv(x, w, b, padding=1)
        grads[name] = [g.detach().numpy() for g in lib.autograd.grad(out, (x, w, b), lib.tensor(ga),
                                                                     create_graph=create_graph)]
    for name in ("kept", "again"):
        for mine, ref in zip(grads[name], grads["torch"]):
            np.testing.assert_allclose(mine, ref, **CONV_TOL)


def test_kept_windows_respect_in_place_modification():
    """The input is saved for backward as before: modifying it in place still raises, never a stale gradient."""
    x = jitorch.from_numpy(arr(2, 16, 4, 4))
    w = jitorch.tensor(arr(8, 16, 3, 3, seed=1), requires_grad=True)
    out = F.conv2d(x, w, padding=1)
    x.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_half_inputs_on_both_layouts():
    for cin in (1, 16):
        check_op(lambda x, w: F.conv2d(x, w, padding=1), lambda x, w: TF.conv2d(x, w, padding=1),
                 [arr(2, cin, 5, 4, dtype="bfloat16"), arr(4, cin, 3, 3, seed=1, dtype="bfloat16")], atol=0.5,
                 rtol=5e-2)
