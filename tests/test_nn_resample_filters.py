"""``interpolate``'s filter path against PyTorch: ``antialias=True`` (float, bilinear and bicubic, gradients through
the resampling matrices) and uint8 bilinear/bicubic bit for bit (ATen's int16 fixed-point passes), plus the integer
modes ATen refuses; and ``pad``'s negative amounts that crop more than a dim holds."""
from __future__ import annotations

import numpy as np
import pytest
import torch.nn.functional as TF
from helpers import check_error, check_op, gradcheck_op

import jitorch.nn.functional as F
from nn_oracle import torch_single_thread  # noqa: F401 - an autouse fixture: one oracle thread

SIZES = [dict(size=(7, 5)), dict(size=(13, 17)), dict(size=(3, 20)), dict(scale_factor=0.3),
         dict(scale_factor=(0.5, 2.5)), dict(scale_factor=0.45, recompute_scale_factor=True)]


def interp(**kw):
    return (lambda x: F.interpolate(x, **kw)), (lambda x: TF.interpolate(x, **kw))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("how", SIZES)
def test_interpolate_antialias_matches_torch(dtype, mode, align_corners, how, rng):
    x = rng.uniform(-2, 2, (2, 3, 9, 11)).astype(dtype)
    check_op(*interp(mode=mode, align_corners=align_corners, antialias=True, **how), [x], atol=1e-5, rtol=1e-4)


def test_interpolate_antialias_layouts_and_gradcheck(rng):
    x = rng.uniform(-2, 2, (2, 3, 8, 10)).astype("float32")
    check_op(*interp(size=(3, 4), mode="bilinear", antialias=True), [x], layout="transposed", atol=1e-5)
    check_op(*interp(size=(5, 3), mode="bicubic", antialias=True), [x], layout="sliced", atol=1e-5)
    gradcheck_op(lambda x: F.interpolate(x, size=(3, 7), mode="bicubic", antialias=True), [x[:1, :1]])


@pytest.mark.parametrize("channels", [3, 5])  # ATen runs an AVX kernel up to 4 channels, a generic one above
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("antialias", [False, True])
def test_interpolate_uint8_matches_torch_exactly(channels, mode, align_corners, antialias, rng):
    x = rng.integers(0, 256, (2, channels, 9, 11)).astype(np.uint8)
    for how in SIZES + [dict(size=(9, 11)), dict(size=(30, 4))]:
        check_op(*interp(mode=mode, align_corners=align_corners, antialias=antialias, **how), [x])


@pytest.mark.parametrize("mode,shape,dtype", [("linear", (1, 2, 3), "uint8"), ("trilinear", (1, 1, 2, 2, 2), "uint8"),
                                              ("bilinear", (1, 1, 2, 2), "int32"), ("bicubic", (1, 1, 2, 2), "int64")])
def test_interpolate_integer_modes_torch_refuses(mode, shape, dtype):
    check_error(*interp(scale_factor=2, mode=mode), [np.zeros(shape, dtype)], match=mode)


@pytest.mark.parametrize("pads", [(-4, 1), (1, -4), (-2, -2), (-5, 3, 0, 0)])
def test_pad_crop_past_the_dim_is_an_error(pads, rng):
    check_error(lambda x: F.pad(x, pads), lambda x: TF.pad(x, pads), [rng.standard_normal((2, 3)).astype("float32")],
                match="negative")


@pytest.mark.parametrize("pads", [(-3, 0), (-3, 1), (-1, -2), (0, -3, 2, -1)])
def test_pad_crop_to_the_whole_dim_matches_torch(pads, rng):
    check_op(lambda x: F.pad(x, pads, value=0.5), lambda x: TF.pad(x, pads, value=0.5),
             [rng.standard_normal((3, 3)).astype("float32")])


# A scale that keeps a dim's size (7 * 1.1 -> 7): ATen's (bi/tri)linear kernels, its 2-D nearest one and its separable
# (antialias, uint8) kernels copy that dim; its 1-D/3-D nearest and plain bicubic ones apply the scale. PyTorch's
# bicubic backward does not follow its own forward, so it compares values only (its 1-D/3-D nearest backward copies the
# dim, which jitorch's gradient row matches).
@pytest.mark.parametrize("mode,shape,scale,grad", [
    ("linear", (1, 2, 7), (1.1,), True), ("bilinear", (1, 2, 7, 9), (1.1, 2.0), True),
    ("bilinear", (1, 2, 7, 9), (1.05, 1.05), True), ("trilinear", (1, 1, 7, 5, 4), (1.1, 2.0, 1.2), True),
    ("nearest", (1, 2, 7, 9), (1.1, 1.05), True), ("nearest", (1, 2, 7), (1.1,), True),
    ("nearest", (1, 1, 7, 5, 4), (1.1, 2.0, 1.2), True), ("bicubic", (1, 2, 7, 9), (1.1, 2.0), False),
])
@pytest.mark.parametrize("align_corners", [False, True])
def test_interpolate_scale_keeping_a_dims_size_matches_torch(mode, shape, scale, grad, align_corners, rng):
    if align_corners and mode == "nearest":
        return
    x = rng.uniform(-2, 2, shape).astype(np.float32)
    kw = {} if mode == "nearest" else dict(align_corners=align_corners)
    check_op(*interp(mode=mode, scale_factor=scale, **kw), [x], grad=grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("antialias", [False, True])
def test_interpolate_filter_path_keeps_a_dim_whose_size_stays(mode, antialias, rng):
    x = rng.uniform(0, 255, (1, 3, 7, 9)).astype(np.uint8)
    check_op(*interp(mode=mode, scale_factor=(1.1, 0.6), antialias=antialias), [x], grad=False)
    if antialias:
        check_op(*interp(mode=mode, scale_factor=(1.1, 0.6), antialias=True), [x.astype(np.float32)], grad=False,
                 atol=1e-5, rtol=1e-4)
