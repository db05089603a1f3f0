"""The direct convolution kernel (`codegen.llvm_conv`) against a NumPy reference, and the convolutions that
take it (`ops.conv_direct`) against PyTorch, forward and backward."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jitorch
from helpers import check_op, gradcheck_op, make_array
from jitorch.codegen import llvm_pool
from jitorch.codegen.llvm_conv import DirectConv, conv_lanes
from jitorch.codegen.llvm_conv_weight import DirectConvWeight
from jitorch.nn import _functional_spatial as F
from jitorch.ops.conv_direct import direct_forward, direct_transpose, direct_weight
from jitorch.runtime.threads import parallel_for

# The native pool's convolution path (conv_direct's default with several threads), where the platform has one.
NATIVE_POOL = llvm_pool.NativePool(3) if llvm_pool.available() else None

CONV_TOL = dict(atol=1e-4, rtol=1e-4)


def reference(x, w, b, pads, groups, dilation):
    """Cross-correlation in float64 by summing shifted slices (one per input channel and tap)."""
    (top, bottom), (left, right) = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    o, cg, kh, kw = w.shape
    dh, dw = dilation
    ho, wo = xp.shape[2] - dh * (kh - 1), xp.shape[3] - dw * (kw - 1)
    out = np.zeros((x.shape[0], o, ho, wo)) + b.astype(np.float64)[None, :, None, None]
    og = o // groups
    for oc in range(o):
        for c in range(cg):
            ch = (oc // og) * cg + c
            for ky in range(kh):
                for kx in range(kw):
                    out[:, oc] += w[oc, c, ky, kx] * xp[:, ch, ky * dh:ky * dh + ho, kx * dw:kx * dw + wo]
    return out


KERNEL_CASES = [  # (dtype, lanes, block, kernel, dilation, groups, C, O, H, W, pads)
    ("f32", 16, 8, (3, 3), (1, 1), 1, 3, 16, 5, 16, ((1, 1), (1, 1))),
    ("f32", 16, 8, (3, 3), (1, 1), 1, 2, 8, 4, 17, ((1, 1), (1, 1))),  # one full chunk and a 1-lane tail
    ("f32", 8, 4, (2, 3), (2, 1), 2, 4, 8, 6, 9, ((0, 1), (2, 0))),  # asymmetric pads, dilation, groups
    ("f32", 16, 1, (1, 1), (1, 1), 4, 4, 4, 3, 15, ((0, 0), (0, 0))),  # depthwise 1x1, masked only
    ("f32", 8, 2, (5, 5), (1, 2), 1, 3, 6, 7, 31, ((2, 2), (4, 4))),
    ("f64", 8, 8, (3, 3), (1, 1), 1, 5, 8, 4, 8, ((1, 1), (1, 1))),
    ("f64", 4, 2, (3, 1), (3, 1), 1, 2, 2, 9, 3, ((3, 3), (0, 0))),
    ("f32", 16, 8, (3, 3), (1, 1), 1, 0, 8, 4, 16, ((1, 1), (1, 1))),  # no input channels: the bias alone
]


@pytest.mark.parametrize("case", KERNEL_CASES)
@pytest.mark.parametrize("threads", [None, 2, "native"])
def test_direct_kernel_matches_reference(case, threads):
    """Every chunk width and block runs on any x86 host (LLVM splits or widens the vectors)."""
    dtype, lanes, block, kernel, dilation, groups, c, o, h, w, pads = case
    rng = np.random.default_rng(len(str(case)))
    np_dtype = np.float32 if dtype == "f32" else np.float64
    x = rng.standard_normal((3, c, h, w)).astype(np_dtype)
    wt = rng.standard_normal((o, c // groups) + kernel).astype(np_dtype)
    b = rng.standard_normal(o).astype(np_dtype)
    fn = DirectConv(dtype, kernel, lanes, block)
    parallel = None if threads is None else NATIVE_POOL if threads == "native" else \
        (lambda f, n: parallel_for(f, n, num_threads=threads))
    got = fn(x, wt, b, pads, groups, dilation, parallel)
    want = reference(x, wt, b, pads, groups, dilation)
    assert got.dtype == np_dtype and got.shape == want.shape
    tol = 1e-5 if dtype == "f32" else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=10 * tol if dtype == "f32" else tol)


STRIDED_KERNEL_CASES = [  # (dtype, lanes, block, kernel, stride, dilation, groups, C, O, H, W, pads)
    ("f32", 16, 8, (3, 3), (2, 2), (1, 1), 1, 3, 8, 9, 33, ((1, 1), (1, 1))),  # a full chunk and a 1-lane tail
    ("f32", 8, 4, (3, 3), (2, 3), (2, 1), 2, 4, 8, 11, 40, ((2, 0), (1, 1))),
    ("f32", 16, 1, (1, 1), (2, 2), (1, 1), 4, 4, 4, 6, 31, ((0, 0), (0, 0))),  # the ResNet shortcut, depthwise
    ("f32", 16, 8, (7, 7), (2, 2), (1, 1), 1, 3, 8, 12, 40, ((3, 3), (3, 3))),  # the ResNet stem
    ("f64", 8, 2, (3, 3), (4, 4), (1, 1), 1, 2, 2, 13, 50, ((1, 1), (1, 1))),
]


@pytest.mark.parametrize("case", STRIDED_KERNEL_CASES)
@pytest.mark.parametrize("threads", [None, "native"])
def test_strided_direct_kernel_matches_reference(case, threads):
    """The strided kernel keeps every stride-th column of its wide loads: the stride-1 result subsampled."""
    dtype, lanes, block, kernel, stride, dilation, groups, c, o, h, w, pads = case
    rng = np.random.default_rng(len(str(case)))
    np_dtype = np.float32 if dtype == "f32" else np.float64
    x = rng.standard_normal((2, c, h, w)).astype(np_dtype)
    wt = rng.standard_normal((o, c // groups) + kernel).astype(np_dtype)
    b = rng.standard_normal(o).astype(np_dtype)
    got = DirectConv(dtype, kernel, lanes, block, stride=stride)(x, wt, b, pads, groups, dilation,
                                                                 NATIVE_POOL if threads else None)
    want = reference(x, wt, b, pads, groups, dilation)[:, :, ::stride[0], ::stride[1]]
    assert got.dtype == np_dtype and got.shape == want.shape
    tol = 1e-5 if dtype == "f32" else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=10 * tol if dtype == "f32" else tol)


def test_wide_column_strides_run_by_phases():
    """Column strides past the kernel's (`_MAX_KERNEL_STRIDE`) take the sum of phases, with the same result."""
    rng = np.random.default_rng(5)
    x, w = make_array((1, 2, 6, 80), rng=rng), make_array((4, 2, 3, 3), rng=rng)
    check_op(lambda x, w: F.conv2d(x, w, None, (1, 5), 1), lambda x, w: TF.conv2d(x, w, None, (1, 5), 1), [x, w],
             **CONV_TOL)


def weight_reference(x, g, kernel, pads, groups, dilation):
    """The weight gradient in float64: one windowed product-sum per output channel, input channel and tap."""
    (top, bottom), (left, right) = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, o, ho, wo = g.shape
    cg = x.shape[1] // groups
    out = np.zeros((o, cg) + kernel)
    for oc in range(o):
        for c in range(cg):
            ch = (oc // (o // groups)) * cg + c
            for ky in range(kernel[0]):
                for kx in range(kernel[1]):
                    win = xp[:, ch, ky * dilation[0]:ky * dilation[0] + ho, kx * dilation[1]:kx * dilation[1] + wo]
                    out[oc, c, ky, kx] = (g[:, oc].astype(np.float64) * win).sum()
    return out


@pytest.mark.parametrize("case, block", [(case, block) for case in KERNEL_CASES for block in (1, 2)
                                         if (case[7] // case[5]) % block == 0])  # blocks that divide a group
@pytest.mark.parametrize("native", [False, True])
def test_direct_weight_kernel_matches_reference(case, block, native):
    dtype, lanes, _, kernel, dilation, groups, c, o, h, w, pads = case
    rng = np.random.default_rng(len(str(case)) + block)
    np_dtype = np.float32 if dtype == "f32" else np.float64
    x = rng.standard_normal((3, c, h, w)).astype(np_dtype)
    ho = h + sum(pads[0]) - dilation[0] * (kernel[0] - 1)
    wo = w + sum(pads[1]) - dilation[1] * (kernel[1] - 1)
    g = rng.standard_normal((3, o, ho, wo)).astype(np_dtype)
    fn = DirectConvWeight(dtype, kernel, lanes, block)
    got = fn(x, g, pads, groups, dilation, NATIVE_POOL if native else lambda f, n: parallel_for(f, n, num_threads=2))
    want = weight_reference(x, g, kernel, pads, groups, dilation)
    assert got.dtype == np_dtype and got.shape == want.shape
    tol = 1e-5 if dtype == "f32" else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=10 * tol if dtype == "f32" else tol)


def test_direct_weight_kernel_windows_follow_the_gradient():
    """A transposed convolution's weight gradient has fewer output positions than the input has windows."""
    rng = np.random.default_rng(7)
    x, g = rng.standard_normal((2, 3, 9, 20)).astype(np.float32), rng.standard_normal((2, 4, 5, 17)).astype(np.float32)
    got = DirectConvWeight("f32", (3, 3), 16, 2)(x, g, ((1, 0), (0, 1)), 1, (1, 1))
    np.testing.assert_allclose(got, weight_reference(x, g, (3, 3), ((1, 0), (0, 1)), 1, (1, 1)), rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="direct convolution weight"):
        DirectConvWeight("f32", (3, 3), 16, 2)(x, g[:, :, :, :1].repeat(30, 3), ((0, 0), (0, 0)), 1, (1, 1))


def test_direct_weight_kernel_masks_what_lies_past_a_row():
    """Lanes past a row load zeros: an inf just past the gradient's row must not make 0 * inf = nan."""
    x = np.ones((1, 1, 2, 20), np.float32)
    x[:, :, :, 17:] = np.inf  # past the 17 columns the 1x1 windows of a 17-wide gradient read
    g = np.ones((1, 1, 2, 17), np.float32)
    got = DirectConvWeight("f32", (1, 1), 16, 1)(x, g, ((0, 0), (0, 0)), 1, (1, 1))
    assert got.ravel().tolist() == [34.0]


def test_direct_kernel_rejects_a_mismatched_weight_or_bias():
    """The kernels index with these sizes: anything inconsistent is refused before a read past a buffer."""
    fn = DirectConv("f32", (3, 3), 8, 4)
    x = np.zeros((1, 4, 5, 5), np.float32)
    with pytest.raises(ValueError, match=r"direct convolution: input \(1, 4, 5, 5\), weight \(6, 4, 3, 3\)"):
        fn(x, np.zeros((6, 4, 3, 3), np.float32), np.zeros(6, np.float32), ((0, 0), (0, 0)), 1, (1, 1))
    one = DirectConv("f32", (1, 1), 16, 1)
    x = np.zeros((1, 4, 4, 16), np.float32)
    with pytest.raises(ValueError, match="divisible by groups"):  # 5 output channels in 2 groups
        one(x, np.zeros((5, 2, 1, 1), np.float32), np.zeros(5, np.float32), ((0, 0), (0, 0)), 2, (1, 1))
    with pytest.raises(ValueError, match=r"expected a bias of shape \(4,\), got \(1,\)"):
        one(x, np.zeros((4, 4, 1, 1), np.float32), np.zeros(1, np.float32), ((0, 0), (0, 0)), 1, (1, 1))
    with pytest.raises(ValueError, match="smaller than the dilated kernel"):
        fn(np.zeros((1, 4, 2, 16), np.float32), np.zeros((4, 4, 3, 3), np.float32), np.zeros(4, np.float32),
           ((0, 0), (0, 0)), 1, (1, 1))
    with pytest.raises(ValueError, match="divisible by groups"):
        DirectConvWeight("f32", (1, 1), 16, 1)(x, np.zeros((1, 5, 4, 16), np.float32), ((0, 0), (0, 0)), 2, (1, 1))


def test_tail_lanes_never_reach_the_output():
    """A row's last chunk reads on into the next row: the nan and inf it meets there must not leak into the columns
    it stores (a 1x1 kernel of weight 1 returns the input exactly)."""
    x = np.ones((1, 1, 3, 18), np.float32)
    x[0, 0, 1, 0], x[0, 0, 2, 0] = np.nan, np.inf
    fn = DirectConv("f32", (1, 1), 16, 1)
    got = fn(x, np.ones((1, 1, 1, 1), np.float32), np.zeros(1, np.float32), ((0, 0), (0, 0)), 1, (1, 1))
    np.testing.assert_array_equal(got, x)


# Widths of 16 and 32 fill every lane of 8- and 16-lane chunks: these take the direct kernel on any host.
DIRECT_CASES = [  # (input shape, weight shape, padding, dilation, groups)
    ((2, 3, 6, 16), (8, 3, 3, 3), 1, 1, 1),
    ((2, 4, 5, 32), (8, 2, 3, 3), 1, 1, 2),
    ((1, 4, 7, 16), (4, 1, 3, 3), (2, 1), (2, 1), 4),  # depthwise, dilated
    ((2, 2, 6, 34), (6, 2, 3, 3), 0, 1, 1),
    ((3, 5, 4, 16), (16, 5, 1, 1), 0, 1, 1),
]


@pytest.mark.parametrize("xs, ws, padding, dilation, groups", DIRECT_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_on_the_direct_path_matches_torch(xs, ws, padding, dilation, groups, bias):
    rng = np.random.default_rng(sum(xs) + sum(ws))
    x, w = make_array(xs, rng=rng), make_array(ws, rng=rng)
    b = make_array((ws[0],), rng=rng) if bias else None
    pad2 = (padding, padding) if isinstance(padding, int) else padding
    dil2 = (dilation, dilation) if isinstance(dilation, int) else dilation
    outs = tuple(n + 2 * p - d * (k - 1) for n, p, d, k in zip(xs[2:], pad2, dil2, ws[2:]))
    assert direct_forward(np, x, w, b, (1, 1), [(p, p) for p in pad2], dil2, groups, outs) is not None
    g = make_array((xs[0], ws[0]) + outs, rng=rng)
    assert direct_weight(np, x, g, ws[2:], (1, 1), [(p, p) for p in pad2], dil2, groups) is not None
    check_op(lambda x, w, b: F.conv2d(x, w, b, 1, padding, dilation, groups),
             lambda x, w, b: TF.conv2d(x, w, b, 1, padding, dilation, groups), [x, w, b], **CONV_TOL)


@pytest.mark.parametrize("layout", ["sliced", "transposed"])
def test_direct_path_non_contiguous_inputs(layout):
    rng = np.random.default_rng(3)
    x, w = make_array((2, 3, 16, 16), rng=rng), make_array((8, 3, 3, 3), rng=rng)
    check_op(lambda x, w: F.conv2d(x, w, None, 1, 1), lambda x, w: TF.conv2d(x, w, None, 1, 1), [x, w],
             layout=[layout, "contiguous"], **CONV_TOL)


def test_conv1d_and_float64_on_the_direct_path():
    rng = np.random.default_rng(4)
    x, w, b = make_array((2, 3, 32), rng=rng), make_array((8, 3, 5), rng=rng), make_array((8,), rng=rng)
    check_op(lambda x, w, b: F.conv1d(x, w, b, 1, 2), lambda x, w, b: TF.conv1d(x, w, b, 1, 2), [x, w, b],
             **CONV_TOL)
    x64, w64 = make_array((2, 3, 4, 16), "float64", rng), make_array((4, 3, 3, 3), "float64", rng)
    check_op(lambda x, w: F.conv2d(x, w, None, 1, 1), lambda x, w: TF.conv2d(x, w, None, 1, 1), [x64, w64],
             atol=1e-10, rtol=1e-10)
    gradcheck_op(lambda x, w: F.conv2d(x, w, None, 1, 1), [make_array((1, 2, 3, 16), rng=rng),
                                                          make_array((2, 2, 3, 3), rng=rng)])


def test_direct_path_propagates_nan_and_inf_like_torch():
    x = make_array((1, 2, 4, 16), rng=np.random.default_rng(5))
    x[0, 0, 1, 3], x[0, 1, 3, 15] = np.nan, np.inf
    w = make_array((8, 2, 3, 3), rng=np.random.default_rng(6))
    got = F.conv2d(jitorch.tensor(x), jitorch.tensor(w), None, 1, 1).numpy()
    want = TF.conv2d(torch.tensor(x), torch.tensor(w), None, 1, 1).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_conv_lanes_match_the_host():
    assert conv_lanes("f32") in (8, 16) and conv_lanes("f64") == conv_lanes("f32") // 2


STRIDED_CASES = [  # (stride, padding, dilation, groups, input shape, weight shape): 16 output columns
    (2, 1, 1, 1, (2, 4, 9, 32), (8, 4, 3, 3)),
    (3, 2, 2, 1, (1, 4, 11, 48), (4, 4, 3, 3)),  # one tap per phase (gcd(3, 2) = 1)
    ((2, 1), (1, 0), 2, 2, (2, 4, 10, 24), (8, 2, 3, 5)),  # gcd(2, 2) = 2: even rows only, dilation 1 there
    (2, 0, 1, 4, (1, 8, 7, 32), (8, 2, 2, 2)),
]


@pytest.mark.parametrize("stride, padding, dilation, groups, xs, ws", STRIDED_CASES)
def test_strided_conv2d_by_phases_matches_torch(stride, padding, dilation, groups, xs, ws):
    """The forward, the weight gradient and the input gradient (a strided transposed convolution) all by phase."""
    rng = np.random.default_rng(sum(xs))
    x, w, b = make_array(xs, rng=rng), make_array(ws, rng=rng), make_array((ws[0],), rng=rng)
    st, pd, dl = (tuple(v) if isinstance(v, tuple) else (v, v) for v in (stride, padding, dilation))
    outs = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1 for n, p, d, k, s in zip(xs[2:], pd, dl, ws[2:], st))
    assert outs[-1] == 16
    pads = [(p, p) for p in pd]
    assert direct_forward(np, x, w, b, st, pads, dl, groups, outs) is not None
    g = make_array((xs[0], ws[0]) + outs, rng=rng)
    assert direct_weight(np, x, g, ws[2:], st, pads, dl, groups) is not None
    assert direct_transpose(np, g, w, xs[2:], st, pd, dl, groups) is not None
    check_op(lambda x, w, b: F.conv2d(x, w, b, stride, padding, dilation, groups),
             lambda x, w, b: TF.conv2d(x, w, b, stride, padding, dilation, groups), [x, w, b], **CONV_TOL)


def test_strided_conv1d_and_transposed_conv_by_phases_match_torch():
    rng = np.random.default_rng(9)
    x, w = make_array((2, 4, 33), rng=rng), make_array((8, 4, 3), rng=rng)
    check_op(lambda x, w: F.conv1d(x, w, None, 2, 1), lambda x, w: TF.conv1d(x, w, None, 2, 1), [x, w], **CONV_TOL)
    # conv_transpose2d's forward is the strided transposed convolution; its weight is (in, out / groups, kh, kw).
    y, wt = make_array((2, 8, 8, 16), rng=rng), make_array((8, 4, 3, 3), rng=rng)
    check_op(lambda y, wt: F.conv_transpose2d(y, wt, None, 2, 1, 1),
             lambda y, wt: TF.conv_transpose2d(y, wt, None, 2, 1, 1), [y, wt], **CONV_TOL)
    gradcheck_op(lambda x, w: F.conv2d(x, w, None, 2, 1), [make_array((1, 2, 5, 32), rng=rng),
                                                          make_array((4, 2, 3, 3), rng=rng)])


TRANSPOSE_CASES = [  # (kernel, stride, padding, dilation, groups, input shape): 16 gradient columns; phases that
    # own no position too
    ((1, 1), (2, 2), (0, 0), (1, 1), 1, (2, 4, 9, 31)),  # odd rows and columns get no tap: zeros
    ((2, 2), (3, 3), (1, 0), (1, 1), 2, (1, 4, 13, 48)),
    ((3, 3), (2, 2), (2, 1), (2, 1), 1, (2, 4, 11, 32)),
    ((4, 4), (2, 2), (1, 1), (1, 1), 1, (2, 8, 8, 32)),  # the DCGAN up-sampling layer's geometry
]


@pytest.mark.parametrize("kernel, stride, padding, dilation, groups, xs", TRANSPOSE_CASES)
def test_direct_transpose_matches_torch_exactly_in_float64(kernel, stride, padding, dilation, groups, xs):
    """Each phase computes only the positions it owns and stores them into its strided slice of the result."""
    rng = np.random.default_rng(sum(xs))
    x = torch.tensor(rng.standard_normal(xs))
    w = torch.tensor(rng.standard_normal((8, xs[1] // groups) + kernel))
    g = torch.randn_like(TF.conv2d(x, w, None, stride, padding, dilation, groups))
    want = torch.nn.grad.conv2d_input(x.shape, w, g, stride, padding, dilation, groups).numpy()
    got = direct_transpose(np, g.numpy(), w.numpy(), xs[2:], stride, padding, dilation, groups)
    assert got is not None and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("stride", [1, 2])
def test_input_gradient_with_an_inf_weight_matches_torch(stride):
    """Transposed convolutions as full correlations would multiply g's zero padding by the weight (0 * inf = nan):
    with a non-finite weight the GEMM + col2im runs, whose sums hold only real products, as torch's do."""
    rng = np.random.default_rng(11)
    xd, wd = rng.standard_normal((1, 8, 8, 32)).astype(np.float32), rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    wd[0, 0, 0, 0] = np.inf
    got = jitorch.tensor(xd, requires_grad=True)
    F.conv2d(got, jitorch.tensor(wd), None, stride, 1).sum().backward()
    want = torch.tensor(xd, requires_grad=True)
    TF.conv2d(want, torch.tensor(wd), None, stride, 1).sum().backward()
    np.testing.assert_array_equal(np.isnan(got.grad.numpy()), np.isnan(want.grad.numpy()))
    np.testing.assert_array_equal(np.isinf(got.grad.numpy()), np.isinf(want.grad.numpy()))
    finite = np.isfinite(want.grad.numpy())
    np.testing.assert_allclose(got.grad.numpy()[finite], want.grad.numpy()[finite], **CONV_TOL)


def test_cpu_graph_replays_a_direct_convolution():
    """A captured step whose convolution takes the direct kernels replays with each replay's own inputs."""
    from jitorch.cpu import CPUGraph, graph

    rng = np.random.default_rng(12)
    conv = jitorch.nn.Conv2d(4, 8, 3, padding=1)
    tconv = torch.nn.Conv2d(4, 8, 3, padding=1)
    with torch.no_grad():
        tconv.weight.copy_(torch.tensor(conv.weight.detach().numpy()))
        tconv.bias.copy_(torch.tensor(conv.bias.detach().numpy()))
    x = jitorch.zeros(2, 4, 5, 16, requires_grad=True)
    assert direct_forward(np, x.detach().numpy(), conv.weight.detach().numpy(), None, (1, 1), [(1, 1), (1, 1)],
                          (1, 1), 1, (5, 16)) is not None
    g = CPUGraph()
    with graph(g):
        out = conv(x)
        out.sum().backward()
    for _ in range(2):
        xd = rng.standard_normal(tuple(x.shape)).astype(np.float32)
        with jitorch.no_grad():
            x.copy_(jitorch.tensor(xd))
        g.replay()
        tx = torch.tensor(xd, requires_grad=True)
        tconv.weight.grad = tconv.bias.grad = None
        tout = tconv(tx)
        tout.sum().backward()
        np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), **CONV_TOL)
        for mine, ref in ((x.grad, tx.grad), (conv.weight.grad, tconv.weight.grad), (conv.bias.grad, tconv.bias.grad)):
            np.testing.assert_allclose(mine.numpy(), ref.numpy(), **CONV_TOL)
