"""The convolution, pooling, unpooling, padding and resampling modules, empty batches, half and integer inputs, a CNN
training step and non-contiguous inputs, checked against PyTorch 2.13.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jitorch
from helpers import check_error, check_op, make_array
from jitorch.nn import _functional_spatial as F
from jitorch.nn.modules import conv as jconv
from jitorch.nn.modules import fold as jfold
from jitorch.nn.modules import padding as jpad
from jitorch.nn.modules import pixelshuffle as jshuffle
from jitorch.nn.modules import pooling as jpool
from jitorch.nn.modules import upsampling as jup
from nn_oracle import check_module, same_parameter_names
from nn_oracle import torch_single_thread  # noqa: F401 - an autouse fixture: one oracle thread

from nn_conv_helpers import CONV_TOL, TOL, arr


# -- modules --------------------------------------------------------------------------------------------------------
def _pair_modules(name, *args, module=None, **kwargs):
    torch.manual_seed(0)
    th = getattr(torch.nn, name)(*args, **kwargs)
    jt = getattr(module, name)(*args, **kwargs)
    assert repr(jt) == repr(th)
    same_parameter_names(jt, th)
    return jt, th


@pytest.mark.parametrize("name,args,kwargs,shape", [
    ("Conv1d", (4, 6, 3), {"stride": 2, "padding": 1}, (2, 4, 9)),
    ("Conv1d", (4, 6, 4), {"padding": "same", "padding_mode": "circular", "bias": False}, (2, 4, 9)),
    ("Conv2d", (4, 6, 3), {"padding": 1, "padding_mode": "reflect", "groups": 2}, (2, 4, 7, 6)),
    ("Conv2d", (4, 6, (3, 2)), {"padding": (1, 2), "padding_mode": "replicate", "dilation": 2}, (2, 4, 7, 6)),
    ("Conv2d", (4, 6, 3), {"padding": (2, 1), "padding_mode": "circular", "stride": (2, 1)}, (4, 7, 6)),
    ("Conv2d", (4, 6, 2), {"padding": "same", "padding_mode": "zeros"}, (2, 4, 7, 6)),
    ("Conv2d", (4, 4, 3), {"padding": "valid", "groups": 4}, (2, 4, 7, 6)),
    ("Conv3d", (2, 4, 3), {"padding": 1, "stride": (1, 2, 1)}, (2, 2, 5, 6, 4)),
    ("ConvTranspose1d", (4, 6, 3), {"stride": 2, "output_padding": 1}, (2, 4, 5)),
    ("ConvTranspose2d", (4, 6, 3), {"stride": 2, "padding": 1, "groups": 2, "dilation": 2}, (2, 4, 5, 4)),
    ("ConvTranspose3d", (2, 4, 2), {"stride": 2, "bias": False}, (1, 2, 3, 2, 3)),
])
@pytest.mark.parametrize("train", [True, False])
def test_conv_modules_match_torch(name, args, kwargs, shape, train):
    jt, th = _pair_modules(name, *args, module=jconv, **kwargs)
    check_module(jt, th, [arr(*shape)], train=train, **CONV_TOL)


def test_conv_transpose_output_size_and_default_init():
    jt, th = _pair_modules("ConvTranspose2d", 3, 5, 3, module=jconv, stride=2, padding=1)
    check_module(jt, th, [arr(2, 3, 4, 4)], kwargs={"output_size": [8, 8]}, **CONV_TOL)
    with pytest.raises(ValueError, match="requested an output size of"):
        jt(jitorch.randn(2, 3, 4, 4), output_size=[10, 10])
    conv = jconv.Conv2d(16, 8, 3)
    bound = 1 / np.sqrt(16 * 9)  # kaiming_uniform(a=sqrt(5)) and the bias both give U(-1/sqrt(fan_in), ...)
    w, b = conv.weight.detach().numpy(), conv.bias.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound and np.abs(b).max() <= bound
    assert conv.weight.dtype == jitorch.float32
    assert jconv.Conv1d(2, 2, 3, dtype=jitorch.float64).weight.dtype == jitorch.float64
    for bad, msg in (({"groups": 0}, "groups must be a positive integer"),
                     ({"groups": 3}, "in_channels must be divisible by groups"),
                     ({"padding": "full"}, "Invalid padding string"), ({"padding_mode": "x"}, "padding_mode must be"),
                     ({"padding": "same", "stride": 2}, "not supported for strided convolutions")):
        with pytest.raises(ValueError, match=msg):
            jconv.Conv2d(4, 6, 3, **bad)
    with pytest.raises(ValueError, match='Only "zeros" padding mode is supported for ConvTranspose2d'):
        jconv.ConvTranspose2d(4, 6, 3, padding_mode="reflect")


@pytest.mark.parametrize("name,args,kwargs,shape", [
    ("MaxPool1d", (3,), {"stride": 2, "padding": 1, "ceil_mode": True}, (2, 3, 8)),
    ("MaxPool2d", (3,), {"stride": 2, "padding": 1, "return_indices": True}, (2, 3, 7, 8)),
    ("MaxPool2d", ((2, 3),), {"dilation": (2, 1)}, (3, 7, 8)),
    ("MaxPool3d", (2,), {}, (1, 2, 4, 5, 4)),
    ("AvgPool1d", (3,), {"stride": 2, "padding": 1, "count_include_pad": False}, (2, 3, 8)),
    ("AvgPool2d", (3,), {"stride": 2, "padding": 1, "ceil_mode": True, "divisor_override": 4}, (2, 3, 7, 8)),
    ("AvgPool3d", (2,), {"ceil_mode": True}, (1, 2, 5, 5, 4)),
    ("AdaptiveAvgPool1d", (3,), {}, (2, 3, 8)),
    ("AdaptiveAvgPool2d", ((None, 3),), {}, (2, 3, 7, 8)),
    ("AdaptiveAvgPool3d", (2,), {}, (1, 2, 5, 5, 4)),
    ("AdaptiveMaxPool1d", (3,), {"return_indices": True}, (2, 3, 8)),
    ("AdaptiveMaxPool2d", ((3, 2),), {}, (2, 3, 7, 8)),
    ("AdaptiveMaxPool3d", (2,), {}, (1, 2, 5, 5, 4)),
    ("LPPool1d", (2, 3), {"stride": 2}, (2, 3, 8)),
    ("LPPool2d", (1.5, 2), {}, (2, 3, 6, 8)),
])
def test_pool_modules_match_torch(name, args, kwargs, shape):
    jt, th = _pair_modules(name, *args, module=jpool, **kwargs)
    x = np.abs(arr(*shape)) + 0.1 if name.startswith("LP") else arr(*shape)
    check_module(jt, th, [x], **TOL)


def test_max_unpool_module():
    jt, th = _pair_modules("MaxUnpool2d", 2, module=jpool)
    values, idx = TF.max_pool2d(torch.from_numpy(arr(2, 3, 6, 4)), 2, return_indices=True)
    out = jt(jitorch.from_numpy(values.numpy()), jitorch.from_numpy(idx.numpy()))
    np.testing.assert_array_equal(out.numpy(), th(values, idx).numpy())


@pytest.mark.parametrize("make,shape", [
    (lambda nn: nn.Fold((3, 3), 2), (0, 8, 4)), (lambda nn: nn.Unfold(2), (0, 2, 3, 3)),
    (lambda nn: nn.AdaptiveMaxPool2d(2), (0, 2, 5, 5)), (lambda nn: nn.AdaptiveMaxPool1d(3), (0, 2, 5)),
])
def test_empty_batch_forward_and_backward(make, shape):
    check_module(make(jitorch.nn), make(torch.nn), [np.zeros(shape, np.float32)])


@pytest.mark.parametrize("dtype", ["uint8", "int32", "int64"])
@pytest.mark.parametrize("call", [
    lambda F, x: F.adaptive_avg_pool2d(x, 2), lambda F, x: F.adaptive_avg_pool1d(x[0], 3),
    lambda F, x: F.adaptive_avg_pool3d(x.unsqueeze(0), 2), lambda F, x: F.adaptive_max_pool2d(x, 2),
    lambda F, x: F.avg_pool2d(x, 2), lambda F, x: F.avg_pool3d(x.unsqueeze(0), 2),
    lambda F, x: F.interpolate(x, size=(2, 3), mode="area"),
])
def test_integer_average_pools_match_torch(dtype, call):
    # integer adaptive averages came out all zeros (and uint8 window sums wrapped): PyTorch refuses them, and has
    # an int64 kernel for the plain average pools only
    x = make_array((1, 2, 4, 6), dtype, np.random.default_rng(0), low=0, high=100)
    try:
        call(TF, torch.from_numpy(x))
    except NotImplementedError:
        check_error(lambda x: call(F, x), lambda x: call(TF, x), [x], match="not implemented for")
    else:
        check_op(lambda x: call(F, x), lambda x: call(TF, x), [x], grad=False)


def test_max_unpool_empty_batch():
    values, idx = np.zeros((0, 2, 2, 2), np.float32), np.zeros((0, 2, 2, 2), np.int64)
    out = jpool.MaxUnpool2d(2)(jitorch.tensor(values), jitorch.tensor(idx))
    assert out.shape == torch.nn.MaxUnpool2d(2)(torch.tensor(values), torch.tensor(idx)).shape == (0, 2, 4, 4)


@pytest.mark.parametrize("size", [(4, 9), (9, 4)])
def test_max_unpool_bad_output_size_names_the_dim(size):
    values, idx = TF.max_pool2d(torch.from_numpy(arr(1, 1, 4, 4)), 2, return_indices=True)
    with pytest.raises(ValueError) as theirs:
        TF.max_unpool2d(values, idx, 2, output_size=size)
    with pytest.raises(ValueError) as mine:
        F.max_unpool2d(jitorch.from_numpy(values.numpy()), jitorch.from_numpy(idx.numpy()), 2, output_size=size)
    assert str(mine.value).replace("[", "").replace("]", "") == str(theirs.value).replace('"(', "").replace(')"', "")


@pytest.mark.parametrize("name,args,shape", [
    ("ZeroPad1d", ((2, 1),), (2, 3, 5)), ("ZeroPad2d", (1,), (2, 3, 4, 5)), ("ZeroPad3d", (1,), (1, 2, 3, 4, 5)),
    ("ConstantPad1d", ((1, 2), 3.5), (3, 5)), ("ConstantPad2d", ((1, -1, 2, 0), -1.0), (2, 3, 4, 5)),
    ("ConstantPad3d", (1, 2.0), (2, 3, 4, 5)), ("ReflectionPad1d", ((2, 3),), (2, 3, 5)),
    ("ReflectionPad2d", (2,), (2, 3, 4, 5)), ("ReflectionPad3d", ((1, 0, 2, 1, 1, 1),), (1, 2, 3, 4, 5)),
    ("ReplicationPad1d", (3,), (2, 3, 5)), ("ReplicationPad2d", ((1, 3, 0, 2),), (3, 4, 5)),
    ("ReplicationPad3d", (1,), (1, 2, 3, 4, 5)), ("CircularPad1d", (2,), (2, 3, 5)),
    ("CircularPad2d", ((1, 2, 2, 1),), (2, 3, 4, 5)), ("CircularPad3d", (1,), (1, 2, 3, 4, 5)),
])
def test_padding_modules_match_torch(name, args, shape):
    jt, th = _pair_modules(name, *args, module=jpad)
    check_module(jt, th, [arr(*shape)], **TOL)


@pytest.mark.parametrize("name,args,kwargs,module,shape", [
    ("Upsample", (), {"scale_factor": 2, "mode": "nearest"}, jup, (2, 3, 4, 5)),
    ("Upsample", (), {"size": (7, 3), "mode": "bilinear", "align_corners": True}, jup, (2, 3, 4, 5)),
    ("Upsample", (), {"scale_factor": (1.5, 2.0), "mode": "bicubic"}, jup, (2, 3, 4, 5)),
    ("Upsample", (), {"scale_factor": 2, "mode": "trilinear"}, jup, (1, 2, 3, 4, 2)),
    ("UpsamplingNearest2d", (), {"scale_factor": 3}, jup, (2, 3, 4, 5)),
    ("UpsamplingBilinear2d", (), {"size": 6}, jup, (2, 3, 4, 5)),
    ("Unfold", ((2, 3),), {"dilation": 1, "padding": 1, "stride": 2}, jfold, (2, 3, 6, 7)),
    ("Fold", ((4, 5), 2), {}, jfold, (2, 12, 12)),
    ("PixelShuffle", (2,), {}, jshuffle, (2, 8, 3, 4)),
    ("PixelUnshuffle", (2,), {}, jshuffle, (2, 2, 4, 6)),
])
def test_resampling_modules_match_torch(name, args, kwargs, module, shape):
    jt, th = _pair_modules(name, *args, module=module, **kwargs)
    check_module(jt, th, [arr(*shape)], atol=2e-5, rtol=1e-5)


def test_cnn_training_step_matches_torch():
    """A small CNN (conv, pool, pad, upsample) trained one step: identical losses and gradients."""
    torch.manual_seed(0)
    th = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.MaxPool2d(2),
                             torch.nn.Conv2d(8, 4, 3, padding=1, padding_mode="reflect"),
                             torch.nn.Upsample(scale_factor=2, mode="bilinear"), torch.nn.AdaptiveAvgPool2d((2, 2)))
    jt = jitorch.nn.Sequential(jconv.Conv2d(3, 8, 3, padding=1), jpool.MaxPool2d(2),
                               jconv.Conv2d(8, 4, 3, padding=1, padding_mode="reflect"),
                               jup.Upsample(scale_factor=2, mode="bilinear"), jpool.AdaptiveAvgPool2d((2, 2)))
    check_module(jt, th, [arr(4, 3, 8, 8)], **CONV_TOL)


@pytest.mark.parametrize("layout", ["sliced", "transposed", "expanded"])
def test_non_contiguous_inputs(layout):
    x, w = arr(2, 3, 6, 5), arr(4, 3, 3, 3, seed=1)
    check_op(lambda x, w: F.conv2d(x, w, padding=1), lambda x, w: TF.conv2d(x, w, padding=1), [x, w],
             layout=[layout, layout], **CONV_TOL)
    for jt_fn, th_fn in ((F.max_pool2d, TF.max_pool2d), (F.avg_pool2d, TF.avg_pool2d)):
        check_op(lambda x: jt_fn(x, 2), lambda x: th_fn(x, 2), [x], layout=layout, **TOL)
    kw = {"scale_factor": 2, "mode": "bilinear"}
    check_op(lambda x: F.interpolate(x, **kw), lambda x: TF.interpolate(x, **kw), [x], layout=layout, **TOL)


def test_empty_batch_half_and_integer_inputs():
    w = jitorch.from_numpy(arr(4, 3, 3, 3))
    assert F.conv2d(jitorch.zeros(0, 3, 6, 5), w).shape == (0, 4, 4, 3)
    assert F.max_pool2d(jitorch.zeros(0, 3, 6, 5), 2).shape == (0, 3, 3, 2)
    assert F.adaptive_max_pool2d(jitorch.zeros(0, 3, 6, 5), 2).shape == (0, 3, 2, 2)
    check_op(lambda x, w: F.conv2d(x, w), lambda x, w: TF.conv2d(x, w), [arr(2, 3, 5, 4, dtype="float16"),
             arr(4, 3, 1, 1, seed=1, dtype="float16")], atol=1e-2, rtol=1e-2)
    ints = np.arange(32).reshape(1, 2, 4, 4)
    for jt_fn, th_fn in ((F.max_pool2d, TF.max_pool2d), (F.avg_pool2d, TF.avg_pool2d)):
        check_op(lambda x: jt_fn(x, 2), lambda x: th_fn(x, 2), [ints], grad=False)
    check_op(lambda x: F.pad(x, (1, 2), value=1.5), lambda x: TF.pad(x, (1, 2), value=1.5), [ints], grad=False)
