"""``interpolate`` against PyTorch where the resampling matrices used to show: non-finite inputs under nearest
modes (copied, not spread along a row as inf * 0), half-type inputs (resampled in float32 and rounded once, the
bicubic coefficients in the input's type as ATen's), integer nearest upscaling and its gradient, and results that
never alias the input."""
from __future__ import annotations

import numpy as np
import pytest
import torch.nn.functional as TF
from helpers import check_op, gradgradcheck_op, np_dtype

import jitorch
import jitorch.nn.functional as F


def arr(*shape, seed=0, dtype="float32"):
    return np.random.default_rng(seed).standard_normal(shape).astype(np_dtype(dtype))


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("size", [(8, 8), (5, 7), (4, 12)], ids=str)
def test_nearest_copies_inf_and_nan_where_aten_does(mode, size):
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x[0, 0, 1, 1], x[0, 0, 2, 3] = np.inf, np.nan
    check_op(lambda t: F.interpolate(t, size=size, mode=mode), lambda t: TF.interpolate(t, size=size, mode=mode),
             [x], grad=False, atol=0, rtol=0)


@pytest.mark.parametrize("shape,how", [((2, 3, 5), dict(scale_factor=3)), ((2, 3, 4, 5), dict(scale_factor=2)),
                                       ((2, 3, 4, 5), dict(size=(8, 15))), ((1, 2, 3, 4, 5), dict(scale_factor=2)),
                                       ((2, 3, 4, 5), dict(size=(4, 10)))], ids=str)
def test_integer_nearest_upscaling_and_its_gradient(shape, how):
    check_op(lambda t: F.interpolate(t, **how), lambda t: TF.interpolate(t, **how), [arr(*shape)], atol=0, rtol=0,
             grad_atol=1e-6)
    gradgradcheck_op(lambda t: F.interpolate(t, **how), [arr(*shape, dtype="float64")])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("mode,size", [("nearest", (10, 15)), ("nearest", (7, 9)), ("bilinear", (7, 9)),
                                       ("bicubic", (7, 9))], ids=str)
def test_half_types_round_once_as_aten(dtype, mode, size):
    x = arr(2, 3, 5, 5, dtype=dtype)
    grad = mode != "bicubic"  # ATen's bicubic backward keeps float coefficients, its forward half ones
    ulp = 2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -10
    # bilinear's float32 sums may still land on the other side of a half-type rounding now and then: one ulp
    check_op(lambda t: F.interpolate(t, size=size, mode=mode), lambda t: TF.interpolate(t, size=size, mode=mode),
             [x], grad=grad, atol=0, rtol=ulp if mode == "bilinear" else 0, grad_rtol=ulp if grad else 0)


def test_an_unresized_input_is_still_a_new_tensor():
    x = jitorch.randn(1, 2, 4, 4)
    for kw in (dict(size=(4, 4)), dict(scale_factor=1.0, mode="bilinear")):
        y = F.interpolate(x, **kw)
        assert y.data_ptr() != x.data_ptr()
    y = F.interpolate(x[0], size=(4,))
    assert y.data_ptr() != x.data_ptr()


# ATen's nearest backward adds each output's gradient to its source in output order, from a zeroed float buffer
# (half types round once); its 1-D/3-D backward takes a dim that keeps its size as a copy where the forward applies
# the scale. The sums are matched bit for bit.
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape,how", [((2, 3, 17, 17), dict(size=(40, 40))), ((2, 3, 17, 13), dict(size=(7, 30))),
                                       ((2, 3, 4, 5), dict(scale_factor=2)), ((2, 3, 17), dict(size=40)),
                                       ((1, 2, 7), dict(scale_factor=1.1)), ((1, 2, 7, 7, 7), dict(size=(12, 5, 9))),
                                       ((1, 1, 7, 5, 4), dict(scale_factor=(1.1, 2.0, 1.2)))], ids=str)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest_gradient_sums_bit_identical(shape, how, mode, dtype):
    check_op(lambda t: F.interpolate(t, mode=mode, **how), lambda t: TF.interpolate(t, mode=mode, **how),
             [arr(*shape, dtype=dtype)], atol=0, rtol=0)
