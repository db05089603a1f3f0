"""Transposed convolutions through the direct kernels: the phase kernels that store into their strided slice of the
result (`DirectConv.spread_into`), the weight gradient read from one phase-split copy of the input
(`DirectConvWeight.from_planes`), and the ConvTranspose layers built on them against PyTorch."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jitorch
from helpers import check_op, gradcheck_op, make_array
from jitorch.codegen import llvm_pool
from jitorch.codegen.llvm_conv import DirectConv
from jitorch.codegen.llvm_conv_weight import DirectConvWeight
from jitorch.nn import _functional_spatial as F
from jitorch.ops import conv_direct
from jitorch.ops.conv_direct import direct_transpose, direct_weight

NATIVE_POOL = llvm_pool.NativePool(3) if llvm_pool.available() else None
CONV_TOL = dict(atol=1e-4, rtol=1e-4)


def correlate(x, w, dilation):
    """Valid stride-1 cross-correlation in float64, ``(N, C, H, W) x (O, C, KH, KW)``."""
    o, c, kh, kw = w.shape
    dh, dw = dilation
    ho, wo = x.shape[2] - dh * (kh - 1), x.shape[3] - dw * (kw - 1)
    out = np.zeros((x.shape[0], o, ho, wo))
    for ky in range(kh):
        for kx in range(kw):
            out += np.einsum("oc,nchw->nohw", w[:, :, ky, kx].astype(np.float64),
                             x[:, :, ky * dh:ky * dh + ho, kx * dw:kx * dw + wo].astype(np.float64))
    return out


SPREAD_CASES = [  # (dtype, lanes, block, kernel, dilation, out_stride, plane, sizes, at, result plane)
    ("f32", 16, 8, (2, 2), (1, 1), (2, 2), (9, 19), (8, 16), (1, 0), (18, 33)),  # one full chunk a row
    ("f32", 16, 4, (2, 3), (1, 2), (2, 3), (7, 30), (6, 21), (0, 2), (13, 65)),  # a chunk and a 5-lane tail
    ("f32", 8, 2, (1, 3), (1, 1), (1, 2), (5, 12), (5, 10), (0, 1), (5, 21)),  # a row stride of 1
    ("f32", 8, 1, (3, 1), (2, 1), (3, 1), (8, 9), (4, 9), (2, 0), (12, 9)),  # a column stride of 1
    ("f64", 8, 8, (2, 2), (1, 1), (2, 2), (6, 18), (5, 17), (1, 1), (11, 36)),
    ("f64", 4, 2, (2, 2), (1, 1), (1, 1), (4, 7), (3, 6), (0, 0), (3, 6)),  # a whole result, as the plain kernel
]


@pytest.mark.parametrize("case", SPREAD_CASES)
@pytest.mark.parametrize("threads", [None, "native"])
def test_spread_kernel_stores_only_its_strided_slice(case, threads):
    """Each output lands at ``at + out_stride * position``; every other element of the result keeps its value."""
    dtype, lanes, block, kernel, dilation, ostride, plane, sizes, at, result = case
    rng = np.random.default_rng(len(str(case)))
    np_dtype = np.float32 if dtype == "f32" else np.float64
    n, c, o, groups = 2, 4, 16, 2
    x = rng.standard_normal((n, c) + plane).astype(np_dtype)
    w = rng.standard_normal((o, c // groups) + kernel).astype(np_dtype)
    buf = np.concatenate([x.ravel(), np.full(lanes * 2, np.nan, np_dtype)])  # slack: read, never stored
    out = np.full((n, o) + result, -7.0, np_dtype)
    fn = DirectConv(dtype, kernel, lanes, block, out_stride=ostride)
    fn.spread_into(buf, 0, plane, w, out, at, sizes, groups, dilation, NATIVE_POOL if threads else None)
    want = np.concatenate([correlate(x[:, i * 2:i * 2 + 2], w[i * 8:i * 8 + 8], dilation) for i in range(2)], 1)
    rows = slice(at[0], at[0] + ostride[0] * (sizes[0] - 1) + 1, ostride[0])
    cols = slice(at[1], at[1] + ostride[1] * (sizes[1] - 1) + 1, ostride[1])
    tol = 1e-5 if dtype == "f32" else 1e-12
    np.testing.assert_allclose(out[:, :, rows, cols], want[:, :, :sizes[0], :sizes[1]], rtol=tol, atol=10 * tol)
    untouched = np.ones(out.shape, bool)
    untouched[:, :, rows, cols] = False
    assert (out[untouched] == -7.0).all()


def test_spread_kernel_refuses_what_would_leave_its_buffers():
    fn = DirectConv("f32", (2, 2), 16, 8, out_stride=(2, 2))
    w, out = np.zeros((8, 4, 2, 2), np.float32), np.zeros((1, 8, 16, 32), np.float32)
    buf = np.zeros(4 * 9 * 17, np.float32)  # the last chunk's load ends on the last element
    fn.spread_into(buf, 0, (9, 17), w, out, (0, 0), (8, 16), 1, (1, 1))
    with pytest.raises(ValueError, match="out of bounds"):
        fn.spread_into(buf[:-1], 0, (9, 17), w, out, (0, 0), (8, 16), 1, (1, 1))
    with pytest.raises(ValueError, match="out of bounds"):  # the last column would be 33
        fn.spread_into(buf, 0, (9, 17), w, out, (0, 1), (8, 17), 1, (1, 1))
    with pytest.raises(ValueError, match="out of bounds"):  # rows past the planes
        fn.spread_into(buf, 0, (9, 17), w, out, (0, 0), (9, 16), 1, (1, 1))
    with pytest.raises(ValueError, match="spread_into"):
        fn(np.zeros((1, 4, 9, 17), np.float32), w, np.zeros(8, np.float32), ((0, 0), (0, 0)), 1, (1, 1))


def test_weight_kernel_from_planes_matches_the_padding_call():
    """Windows starting inside caller-padded planes give what the kernel's own padded copy gives."""
    rng = np.random.default_rng(3)
    x, g = rng.standard_normal((2, 4, 7, 20)).astype(np.float32), rng.standard_normal((2, 8, 5, 16)).astype(np.float32)
    fn = DirectConvWeight("f32", (2, 3), 16, 4)
    want = fn(x[:, :, 1:, 2:], g, ((0, 0), (0, 0)), 2, (1, 1))
    np.testing.assert_allclose(fn.from_planes(x, (1, 2), g, 2, (1, 1)), want, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="do not hold the windows"):
        fn.from_planes(x, (1, 3), g, 2, (1, 1))
    with pytest.raises(ValueError, match="do not hold the windows"):
        fn.from_planes(x[:, :, :, ::2], (0, 0), g, 2, (1, 1))


def test_the_upsampling_layer_takes_the_direct_kernels_for_every_gradient():
    """The DCGAN/U-Net 4x4 stride-2 layer: forward, input gradient and weight gradient all as direct kernels (the
    weight gradient phase by phase from one copy of the output gradient), as torch computes them."""
    rng = np.random.default_rng(5)
    x, w = make_array((2, 64, 8, 16), rng=rng), make_array((64, 32, 4, 4), rng=rng, low=-0.2, high=0.2)
    gy = make_array((2, 32, 16, 32), rng=rng)
    assert direct_transpose(np, x, w, (16, 32), (2, 2), (1, 1), (1, 1), 1) is not None
    assert direct_weight(np, gy, x, (4, 4), (2, 2), [(1, 1), (1, 1)], (1, 1), 1) is not None
    b = make_array((32,), rng=rng)
    check_op(lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1), lambda x, w, b: TF.conv_transpose2d(x, w, b, 2, 1),
             [x, w, b], **CONV_TOL)


TRANSPOSED_LAYERS = [  # (nd, in channels, out channels, kernel, stride, padding, output_padding, dilation, groups,
    # input spatial size): 16 or 32 result columns, so the direct kernels apply on 8- and 16-lane hosts
    (2, 16, 8, 4, 2, 1, 0, 1, 1, (5, 16)),
    (2, 8, 16, 3, 2, 1, 1, 1, 2, (4, 16)),  # output_padding, groups
    (2, 8, 8, 3, (2, 1), (1, 2), (1, 0), (1, 2), 1, (5, 36)),  # mixed strides, a dilated column
    (2, 8, 8, 2, 3, 0, 2, 1, 1, (3, 11)),  # output_padding 2: the last rows and columns get no tap
    (1, 16, 8, 4, 2, 1, 0, 1, 1, (16,)),
    (1, 8, 8, 3, 3, 2, 1, 2, 4, (11,)),
    (3, 8, 8, 4, 2, 1, 0, 1, 1, (3, 4, 8)),
    (3, 8, 4, 3, 2, 1, 1, 1, 2, (2, 3, 8)),
]


@pytest.mark.parametrize("layer", TRANSPOSED_LAYERS)
@pytest.mark.parametrize("batch", [2, 1, 0])
def test_transposed_layers_match_torch(layer, batch):
    nd, cin, cout, k, s, p, op, d, groups, spatial = layer
    rng = np.random.default_rng(sum(spatial) + batch)
    kernel = (k,) * nd
    x = make_array((batch, cin) + spatial, rng=rng)
    w, b = make_array((cin, cout // groups) + kernel, rng=rng, low=-0.5, high=0.5), make_array((cout,), rng=rng)
    jt_fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[nd - 1]
    th_fn = (TF.conv_transpose1d, TF.conv_transpose2d, TF.conv_transpose3d)[nd - 1]
    check_op(lambda x, w, b: jt_fn(x, w, b, s, p, op, groups, d), lambda x, w, b: th_fn(x, w, b, s, p, op, groups, d),
             [x, w, b], **CONV_TOL)


@pytest.mark.parametrize("layout", ["sliced", "transposed"])
def test_transposed_layer_of_non_contiguous_inputs_matches_torch(layout):
    rng = np.random.default_rng(8)
    x, w = make_array((2, 16, 6, 16), rng=rng), make_array((16, 8, 4, 4), rng=rng, low=-0.5, high=0.5)
    check_op(lambda x, w: F.conv_transpose2d(x, w, None, 2, 1), lambda x, w: TF.conv_transpose2d(x, w, None, 2, 1),
             [x, w], layout=layout, **CONV_TOL)


def test_transposed_layer_gradcheck_in_float64():
    """float64 takes the direct kernels too (8-lane chunks of 16-column rows)."""
    rng = np.random.default_rng(9)
    x, w = make_array((1, 4, 3, 8), rng=rng), make_array((4, 4, 4, 4), rng=rng)
    gy = make_array((1, 4, 6, 16), rng=rng).astype(np.float64)
    assert direct_transpose(np, x.astype(np.float64), w.astype(np.float64), (6, 16), (2, 2), (1, 1), (1, 1), 1) \
        is not None
    assert direct_weight(np, gy, x.astype(np.float64), (4, 4), (2, 2), [(1, 1), (1, 1)], (1, 1), 1) is not None
    gradcheck_op(lambda x, w: F.conv_transpose2d(x, w, None, 2, 1), [x, w])


def test_phase_planes_hold_each_phase_of_the_padded_input():
    x = np.arange(2 * 3 * 5 * 7, dtype=np.float32).reshape(2, 3, 5, 7)
    pads, stride = [(1, 2), (2, 0)], (2, 3)
    grid = conv_direct._phase_grid((3, 4), stride, (1, 1))
    planes = conv_direct._phase_planes(x, pads, stride, grid)
    xpad = np.pad(x, ((0, 0), (0, 0)) + tuple(pads))
    for py, px in {(phase[0][0], phase[1][0]) for phase in grid}:
        want = xpad[:, :, py::2, px::3]
        np.testing.assert_array_equal(planes[py, px, :, :, :want.shape[2], :want.shape[3]], want)
        assert not planes[py, px, :, :, want.shape[2]:].any() and not planes[py, px, :, :, :, want.shape[3]:].any()


def test_conv_transpose_module_matches_torch_at_the_benchmark_geometry():
    """``nn.ConvTranspose2d(64, 32, 4, 2, 1)`` (bench_ops' row) with a random upstream gradient, batch 2."""
    rng = np.random.default_rng(10)
    xd, gd = rng.standard_normal((2, 64, 16, 16)).astype(np.float32), rng.standard_normal((2, 32, 32, 32))
    torch.manual_seed(0)
    tm = torch.nn.ConvTranspose2d(64, 32, 4, 2, 1)
    jm = jitorch.nn.ConvTranspose2d(64, 32, 4, 2, 1)
    jm.load_state_dict({k: jitorch.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    xt, xj = torch.tensor(xd, requires_grad=True), jitorch.tensor(xd, requires_grad=True)
    yt, yj = tm(xt), jm(xj)
    np.testing.assert_allclose(yj.detach().numpy(), yt.detach().numpy(), **CONV_TOL)
    yt.backward(torch.tensor(gd, dtype=torch.float32))
    yj.backward(jitorch.tensor(gd.astype(np.float32)))
    for got, want in ((xj.grad, xt.grad), (jm.weight.grad, tm.weight.grad), (jm.bias.grad, tm.bias.grad)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("case", [
    # (op, x shape, w shape, kwargs): every tap lands in the padding or between the strides along a dim (the
    # transposed direct path had no phase to run and failed), and empty batches through the 1x1 weight product.
    ("conv2d", (1, 1, 1, 15), (2, 1, 2, 5), dict(stride=(2, 1), padding=(1, 1), dilation=(2, 1))),
    ("conv_transpose2d", (1, 8, 1, 16), (8, 8, 2, 3), dict(stride=(3, 1), padding=(1, 1), dilation=(2, 1))),
    ("conv3d", (1, 8, 1, 1, 2), (2, 8, 5, 1, 4), dict(stride=(2, 1, 3), padding=(7, 0, 1), dilation=(2, 1, 1))),
    ("conv_transpose1d", (1, 4, 1), (4, 2, 3), dict(stride=3, padding=1, dilation=2)),
    ("conv_transpose2d", (0, 8, 5, 5), (8, 4, 1, 1), {}),
    ("conv_transpose3d", (0, 8, 5, 5, 5), (8, 4, 1, 1, 1), dict(stride=2)),
    ("conv2d", (0, 8, 5, 5), (4, 8, 1, 1), {}),
])
def test_geometries_where_nothing_reaches_the_result_give_torchs_zeros(case):
    op, xs, ws, kwargs = case
    jt, th = getattr(jitorch.nn.functional, op), getattr(TF, op)
    check_op(lambda x, w: jt(x, w, **kwargs), lambda x, w: th(x, w, **kwargs),
             [make_array(xs, "float32", np.random.default_rng(1)), make_array(ws, "float32", np.random.default_rng(2))],
             atol=1e-5)
