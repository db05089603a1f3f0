"""Convolution, pooling, padding, resampling and fold layers against PyTorch (functional ops and modules)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jitorch
from helpers import check_error, check_op, gradcheck_op, gradgradcheck_op
from jitorch.nn import _functional_spatial as F
from nn_oracle import torch_single_thread  # noqa: F401 - an autouse fixture: one oracle thread

from nn_conv_helpers import CONV_TOL, TOL, arr


# -- convolution ----------------------------------------------------------------------------------------------------
CONV_CASES = [  # (stride, padding, dilation, groups)
    (1, 0, 1, 1), (2, 1, 1, 2), (1, "same", 2, 1), (1, "valid", 1, 4), (3, 2, 2, 1), (2, 2, 1, 4),
]


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("stride,padding,dilation,groups", CONV_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_matches_torch(nd, stride, padding, dilation, groups, bias):
    spatial = (9, 8, 6)[:nd]
    kernel = (3, 2, 3)[:nd]  # an even kernel exercises 'same''s asymmetric padding
    x, w = arr(2, 4, *spatial), arr(8, 4 // groups, *kernel, seed=1)
    b = arr(8, seed=2) if bias else None
    jt_fn, th_fn = (F.conv1d, F.conv2d, F.conv3d)[nd - 1], (TF.conv1d, TF.conv2d, TF.conv3d)[nd - 1]
    check_op(lambda x, w, b: jt_fn(x, w, b, stride, padding, dilation, groups),
             lambda x, w, b: th_fn(x, w, b, stride, padding, dilation, groups), [x, w, b], **CONV_TOL)


def test_conv_unbatched_and_tuple_geometry():
    x, w, b = arr(3, 7, 9), arr(6, 3, 2, 3, seed=1), arr(6, seed=2)
    check_op(lambda x, w, b: F.conv2d(x, w, b, (2, 1), (1, 2), (2, 1)),
             lambda x, w, b: TF.conv2d(x, w, b, (2, 1), (1, 2), (2, 1)), [x, w, b], **CONV_TOL)
    check_op(lambda x, w: F.conv1d(x, w, padding="same"), lambda x, w: TF.conv1d(x, w, padding="same"),
             [arr(3, 10), arr(5, 3, 4, seed=1)], **CONV_TOL)


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("stride,padding,output_padding,dilation,groups", [
    (1, 0, 0, 1, 1), (2, 1, 1, 1, 2), (3, 2, 1, 2, 1), (1, 1, 1, 2, 4), (2, 0, 0, 3, 1)])
def test_conv_transpose_matches_torch(nd, stride, padding, output_padding, dilation, groups):
    x, w, b = arr(2, 4, *(5, 4, 3)[:nd]), arr(4, 8 // groups, *(3, 2, 3)[:nd], seed=1), arr(8, seed=2)
    jt_fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[nd - 1]
    th_fn = (TF.conv_transpose1d, TF.conv_transpose2d, TF.conv_transpose3d)[nd - 1]
    check_op(lambda x, w, b: jt_fn(x, w, b, stride, padding, output_padding, groups, dilation),
             lambda x, w, b: th_fn(x, w, b, stride, padding, output_padding, groups, dilation), [x, w, b], **CONV_TOL)


def test_conv_gradcheck_and_double_backward():
    x, w, b = arr(2, 4, 5, 4), arr(4, 2, 2, 3, seed=1), arr(4, seed=2)
    fn = lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2), groups=2)  # noqa: E731
    gradcheck_op(fn, [x, w, b])
    gradgradcheck_op(fn, [x, w, b])
    xt, wt = arr(1, 4, 3, 3), arr(4, 1, 3, 2, seed=1)
    fnt = lambda x, w: F.conv_transpose2d(x, w, None, 2, 1, 1, 2, (1, 2))  # noqa: E731
    gradcheck_op(fnt, [xt, wt])
    gradgradcheck_op(fnt, [xt, wt])
    gradgradcheck_op(lambda x, w: F.conv1d(x, w, padding="same"), [arr(2, 3, 6), arr(2, 3, 4, seed=1)])


def test_conv_double_backward_matches_torch():
    x, w = arr(2, 3, 6, 5).astype(np.float64), arr(4, 3, 3, 3, seed=1).astype(np.float64)
    v = arr(2, 3, 6, 5, seed=3).astype(np.float64)
    results = []
    for lib, conv in ((jitorch, F.conv2d), (torch, TF.conv2d)):
        tx, tw = lib.tensor(x, requires_grad=True), lib.tensor(w, requires_grad=True)
        out = conv(tx, tw, stride=2, padding=1)
        (gx,) = lib.autograd.grad(out.pow(2).sum(), tx, create_graph=True)
        (gw,) = lib.autograd.grad((gx * lib.tensor(v)).sum(), tw)
        results.append(gw.detach().numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-10, atol=1e-10)


# -- pooling --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil_mode", [
    (2, None, 0, 1, False), (3, 2, 1, 1, True), (3, 2, 1, 2, False), (2, 3, 1, 1, True), (3, 1, 0, 1, False)])
def test_max_pool_matches_torch(nd, kernel, stride, padding, dilation, ceil_mode):
    x = arr(2, 3, *(9, 8, 7)[:nd])
    jt_fn = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[nd - 1]
    th_fn = (TF.max_pool1d, TF.max_pool2d, TF.max_pool3d)[nd - 1]
    check_op(lambda x: jt_fn(x, kernel, stride, padding, dilation, ceil_mode, True),
             lambda x: th_fn(x, kernel, stride, padding, dilation, ceil_mode, True), [x], **TOL)


def test_max_pool_ties_unbatched_and_double_backward():
    x = np.round(arr(3, 6, 6)).astype(np.float32)  # many ties: the first maximum wins, as in torch
    check_op(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True),
             lambda x: TF.max_pool2d(x, 3, 2, 1, return_indices=True), [x], **TOL)
    gradgradcheck_op(lambda x: F.max_pool2d(x, 2, 1), [arr(1, 2, 4, 4)])


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("kernel,stride,padding,ceil_mode,count_include_pad,divisor", [
    (2, None, 0, False, True, None), (3, 2, 1, True, True, None), (3, 2, 1, True, False, None),
    ((3, 2, 2), 2, (1, 0, 1), False, False, None), (3, 2, 1, False, True, 5)])
def test_avg_pool_matches_torch(nd, kernel, stride, padding, ceil_mode, count_include_pad, divisor):
    x = arr(2, 3, *(9, 8, 7)[:nd])
    kernel = kernel[:nd] if isinstance(kernel, tuple) else kernel
    padding = padding[:nd] if isinstance(padding, tuple) else padding
    if nd == 1:
        if divisor is not None:
            return
        jt_fn = lambda x: F.avg_pool1d(x, kernel, stride, padding, ceil_mode, count_include_pad)  # noqa: E731
        th_fn = lambda x: TF.avg_pool1d(x, kernel, stride, padding, ceil_mode, count_include_pad)  # noqa: E731
    else:
        jf, tf = (F.avg_pool2d, TF.avg_pool2d) if nd == 2 else (F.avg_pool3d, TF.avg_pool3d)
        jt_fn = lambda x: jf(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor)  # noqa: E731
        th_fn = lambda x: tf(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor)  # noqa: E731
    check_op(jt_fn, th_fn, [x], **TOL)


@pytest.mark.parametrize("nd,size,out", [(1, (7,), 3), (2, (7, 5), (3, None)), (2, (6, 9), (4, 2)),
                                          (2, (5, 5), 1), (3, (5, 4, 7), (2, 3, 3))])
def test_adaptive_pools_match_torch(nd, size, out):
    x = arr(2, 3, *size)
    avg = (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d)[nd - 1]
    tavg = (TF.adaptive_avg_pool1d, TF.adaptive_avg_pool2d, TF.adaptive_avg_pool3d)[nd - 1]
    mx = (F.adaptive_max_pool1d, F.adaptive_max_pool2d, F.adaptive_max_pool3d)[nd - 1]
    tmx = (TF.adaptive_max_pool1d, TF.adaptive_max_pool2d, TF.adaptive_max_pool3d)[nd - 1]
    check_op(lambda x: avg(x, out), lambda x: tavg(x, out), [x], **TOL)
    check_op(lambda x: mx(x, out, True), lambda x: tmx(x, out, True), [x], **TOL)
    check_op(lambda x: avg(x, out), lambda x: tavg(x, out), [x[0]], **TOL)  # unbatched


def test_lp_pool_and_max_unpool():
    x = np.abs(arr(2, 3, 8, 7)) + 0.1  # positive: x ** p stays real for fractional p
    check_op(lambda x: F.lp_pool2d(x, 2, 3, 2), lambda x: TF.lp_pool2d(x, 2, 3, 2), [x], **TOL)
    check_op(lambda x: F.lp_pool1d(x, 3, 2, ceil_mode=True), lambda x: TF.lp_pool1d(x, 3, 2, ceil_mode=True),
             [x[0]], **TOL)
    xt = torch.from_numpy(arr(2, 3, 8, 6))
    values, idx = TF.max_pool2d(xt, 2, return_indices=True)
    v = values.numpy()
    check_op(lambda v: F.max_unpool2d(v, jitorch.from_numpy(idx.numpy()), 2),
             lambda v: TF.max_unpool2d(v, idx, 2), [v], **TOL)
    check_op(lambda v: F.max_unpool2d(v, jitorch.from_numpy(idx.numpy()), 2, output_size=(9, 7)),
             lambda v: TF.max_unpool2d(v, idx, 2, output_size=(9, 7)), [v], **TOL)


# -- padding --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pad", [((2, 3, 5), (2, 1)), ((2, 3, 5), (-1, 2)), ((3, 5), (2, 3)),
                                       ((2, 3, 4, 5), (1, 2, 3, 0)), ((3, 4, 5), (2, -1, 1, 1)),
                                       ((2, 2, 3, 4, 5), (1, 1, 2, 0, 1, 2)), ((2, 3, 4, 5), (1, 1))])
def test_pad_matches_torch(mode, shape, pad):
    kw = {"value": 1.5} if mode == "constant" else {}
    check_op(lambda x: F.pad(x, pad, mode, **kw), lambda x: TF.pad(x, pad, mode, **kw), [arr(*shape)], **TOL)


def test_pad_constant_any_rank_and_gradcheck():
    check_op(lambda x: F.pad(x, (1, 2, 0, 1, 2, -1, 1, 1)), lambda x: TF.pad(x, (1, 2, 0, 1, 2, -1, 1, 1)),
             [arr(2, 3, 4, 5)], **TOL)
    check_op(lambda x: F.pad(x, (1, 2), value=7), lambda x: TF.pad(x, (1, 2), value=7),
             [np.arange(6).reshape(2, 3)], grad=False)
    for mode in ("constant", "reflect", "replicate", "circular"):
        gradgradcheck_op(lambda x: F.pad(x, (2, 1, 1, 0), mode), [arr(1, 2, 3, 4)])


# -- resampling -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode,shape", [("nearest", (2, 3, 5)), ("nearest", (2, 3, 5, 4)), ("nearest", (1, 2, 3, 4, 5)),
                                        ("nearest-exact", (2, 3, 5, 4)), ("linear", (2, 3, 5)),
                                        ("bilinear", (2, 3, 5, 4)), ("bicubic", (2, 3, 5, 4)),
                                        ("trilinear", (1, 2, 3, 4, 5)), ("area", (2, 3, 7, 5))])
@pytest.mark.parametrize("how", [{"scale_factor": 2}, {"scale_factor": 1.7}, {"size": 3},
                                 {"scale_factor": 2.5, "recompute_scale_factor": True}])
@pytest.mark.parametrize("align_corners", [None, True])
def test_interpolate_matches_torch(mode, shape, how, align_corners):
    if align_corners and mode in ("nearest", "nearest-exact", "area"):
        return
    kw = dict(how, mode=mode, align_corners=align_corners)
    check_op(lambda x: F.interpolate(x, **kw), lambda x: TF.interpolate(x, **kw), [arr(*shape)], atol=2e-5,
             rtol=1e-5)


def test_interpolate_per_dim_sizes_and_gradcheck():
    x = arr(1, 2, 4, 6)
    for mode in ("nearest", "bilinear", "bicubic"):
        check_op(lambda x: F.interpolate(x, scale_factor=1.7, mode=mode),
                 lambda x: TF.interpolate(x, scale_factor=1.7, mode=mode), [x], **TOL)
    kw = {"size": (7, 3), "mode": "bilinear", "align_corners": False}
    check_op(lambda x: F.interpolate(x, **kw), lambda x: TF.interpolate(x, **kw), [x], **TOL)
    kw = {"scale_factor": (1.5, 0.5), "mode": "nearest"}
    check_op(lambda x: F.interpolate(x, **kw), lambda x: TF.interpolate(x, **kw), [x], **TOL)
    gradgradcheck_op(lambda x: F.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=True), [x])


def test_pixel_shuffle_unfold_fold():
    x = arr(2, 8, 3, 4)
    check_op(lambda x: F.pixel_shuffle(x, 2), lambda x: TF.pixel_shuffle(x, 2), [x])
    check_op(lambda x: F.pixel_unshuffle(x, 2), lambda x: TF.pixel_unshuffle(x, 2), [arr(3, 2, 4, 6)])
    check_op(lambda x: F.pixel_shuffle(x, 2), lambda x: TF.pixel_shuffle(x, 2), [arr(2, 3, 8, 2, 2)])
    for kw in ({"kernel_size": 2}, {"kernel_size": (2, 3), "dilation": (1, 2), "padding": 1, "stride": (2, 1)}):
        check_op(lambda x: F.unfold(x, **kw), lambda x: TF.unfold(x, **kw), [arr(2, 3, 6, 7)], **TOL)
        cols = TF.unfold(torch.zeros(2, 3, 6, 7), **kw)
        check_op(lambda c: F.fold(c, (6, 7), **kw), lambda c: TF.fold(c, (6, 7), **kw),
                 [arr(*cols.shape)], **TOL)
    check_op(lambda x: F.unfold(x, 2), lambda x: TF.unfold(x, 2), [arr(3, 4, 5)])
    gradgradcheck_op(lambda x: F.fold(F.unfold(x, 2, padding=1), (3, 4), 2, padding=1), [arr(1, 2, 3, 4)])


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_and_grid_sample(mode, padding_mode, align_corners):
    theta = np.array([[[1.2, 0.3, 0.1], [-0.2, 0.9, -0.3]], [[0.7, -0.4, 0.5], [0.3, 1.3, 0.2]]], np.float32)
    size = (2, 3, 5, 4)
    check_op(lambda t: F.affine_grid(t, size, align_corners=align_corners),
             lambda t: TF.affine_grid(t, size, align_corners=align_corners), [theta], **TOL)
    grid = TF.affine_grid(torch.from_numpy(theta), size, align_corners=align_corners).numpy() * 1.3
    kw = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    check_op(lambda x, g: F.grid_sample(x, g, **kw), lambda x, g: TF.grid_sample(x, g, **kw),
             [arr(2, 3, 6, 5), grid], atol=1e-5, rtol=1e-4, grad=mode == "bilinear")


# -- errors ---------------------------------------------------------------------------------------------------------
ERRORS = [
    ("conv2d", (lambda x, w: F.conv2d(x, w)), (lambda x, w: TF.conv2d(x, w)), [(3, 4), (8, 4, 3, 3)],
     "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [3, 4]"),
    ("channels", (lambda x, w: F.conv2d(x, w)), (lambda x, w: TF.conv2d(x, w)), [(2, 4, 8, 8), (8, 3, 3, 3)],
     "expected input[2, 4, 8, 8] to have 3 channels, but got 4 channels instead"),
    ("kernel", (lambda x, w: F.conv2d(x, w)), (lambda x, w: TF.conv2d(x, w)), [(1, 4, 2, 2), (8, 4, 3, 3)],
     "Kernel size can't be greater than actual input size"),
    ("groups", (lambda x, w: F.conv2d(x, w, groups=3)), (lambda x, w: TF.conv2d(x, w, groups=3)),
     [(2, 6, 8, 8), (8, 2, 3, 3)], "expected weight to be divisible by 3 at dimension 0"),
    ("same-stride", (lambda x, w: F.conv2d(x, w, stride=2, padding="same")),
     (lambda x, w: TF.conv2d(x, w, stride=2, padding="same")), [(2, 4, 8, 8), (8, 4, 3, 3)],
     "padding='same' is not supported for strided convolutions"),
    ("transpose", (lambda x, w: F.conv_transpose2d(x, w)), (lambda x, w: TF.conv_transpose2d(x, w)),
     [(2, 4, 8, 8), (3, 8, 3, 3)], "Given transposed=1, weight of size [3, 8, 3, 3]"),
    ("output_padding", (lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=2)),
     (lambda x, w: TF.conv_transpose2d(x, w, stride=2, output_padding=2)), [(2, 4, 8, 8), (4, 8, 3, 3)],
     "output padding must be smaller than either stride or dilation"),
    ("pool-pad", (lambda x: F.max_pool2d(x, 3, padding=2)), (lambda x: TF.max_pool2d(x, 3, padding=2)),
     [(2, 4, 8, 8)], "pad should be at most half of effective kernel size"),
    ("pool-small", (lambda x: F.avg_pool2d(x, 3)), (lambda x: TF.avg_pool2d(x, 3)), [(1, 1, 2, 2)],
     "Output size is too small"),
    ("pool1d-dims", (lambda x: F.max_pool1d(x, 2)), (lambda x: TF.max_pool1d(x, 2)), [(2, 1, 2, 2)],
     "max_pool1d: Expected 2D or 3D"),
    ("adaptive", (lambda x: F.adaptive_avg_pool2d(x, 2)), (lambda x: TF.adaptive_avg_pool2d(x, 2)), [(3,)],
     "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got [3]"),
    ("pad-odd", (lambda x: F.pad(x, (1,))), (lambda x: TF.pad(x, (1,))), [(2, 3)],
     "Padding length must be divisible by 2"),
    ("reflect-size", (lambda x: F.pad(x, (4, 4), "reflect")), (lambda x: TF.pad(x, (4, 4), "reflect")),
     [(1, 3, 4)], "Padding size should be less than the corresponding input dimension"),
    ("circular-wrap", (lambda x: F.pad(x, (5, 4), "circular")), (lambda x: TF.pad(x, (5, 4), "circular")),
     [(1, 3, 4)], "Padding value causes wrapping around more than once."),
    ("pad-rank", (lambda x: F.pad(x, (1, 1), "reflect")), (lambda x: TF.pad(x, (1, 1), "reflect")),
     [(2, 3, 4, 5)], "Padding size 2 is not supported for 4D input tensor."),
    ("interp-mode", (lambda x: F.interpolate(x, scale_factor=2, mode="linear")),
     (lambda x: TF.interpolate(x, scale_factor=2, mode="linear")), [(2, 3, 4, 5)],
     "Got 4D input, but linear mode needs 3D input"),
    ("interp-align", (lambda x: F.interpolate(x, scale_factor=2, align_corners=True)),
     (lambda x: TF.interpolate(x, scale_factor=2, align_corners=True)), [(2, 3, 4, 5)],
     "align_corners option can only be set with the interpolating modes"),
    ("interp-both", (lambda x: F.interpolate(x, 3, 2)), (lambda x: TF.interpolate(x, 3, 2)), [(2, 3, 4, 5)],
     "only one of size or scale_factor should be defined"),
    ("fold", (lambda x: F.fold(x, (3, 4), 2)), (lambda x: TF.fold(x, (3, 4), 2)), [(2, 13, 6)],
     "divisible by the product of kernel_size"),
    ("shuffle", (lambda x: F.pixel_shuffle(x, 2)), (lambda x: TF.pixel_shuffle(x, 2)), [(2, 5, 4, 4)],
     "is not divisible by 4"),
]


@pytest.mark.parametrize("case", ERRORS, ids=[c[0] for c in ERRORS])
def test_errors_match_torch(case):
    _, jt_fn, th_fn, shapes, match = case
    check_error(jt_fn, th_fn, [arr(*s) for s in shapes], match=match)
