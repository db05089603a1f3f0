"""nn.functional (everything but the losses and the spatial ops) against PyTorch: values, input gradients with random
upstream gradients (kink points included, where PyTorch's one-sided choice is the contract), gradcheck in float64,
in-place forms, errors; dropout and gumbel_softmax statistically (jitorch's random stream is not PyTorch's)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import check_error, check_op, gradcheck_op, gradgradcheck_op, np_dtype, to_jitorch, to_torch, tol_for

import jitorch
import jitorch.nn.functional as F

F32 = {"atol": 1e-5, "rtol": 1e-4}
KINKS = [0.0, -3.0, 3.0, 1.0, -1.0, 6.0, 0.5, -0.5, 20.0, -2.0]


def kinked(rng, shape=(4, 5), low=-5.0, high=5.0, dtype=np.float32):
    """Random values with the kink points of the piecewise activations among them."""
    x = rng.uniform(low, high, shape).astype(dtype)
    x.reshape(-1)[:len(KINKS)] = KINKS
    return x


def smooth(rng, shape=(3, 4), low=-4.0, high=4.0):
    """Random float64 values at least 0.05 away from every kink (finite differences must not cross one)."""
    x = rng.uniform(low, high, shape)
    for k in KINKS:
        near = np.abs(x - k) < 0.05
        x[near] = k + 0.1
    return x


ACTIVATIONS = {
    "relu": lambda F, x: F.relu(x),
    "relu6": lambda F, x: F.relu6(x),
    "leaky_relu": lambda F, x: F.leaky_relu(x, 0.2),
    "elu": lambda F, x: F.elu(x, 1.5),
    "selu": lambda F, x: F.selu(x),
    "celu": lambda F, x: F.celu(x, 0.7),
    "gelu": lambda F, x: F.gelu(x),
    "gelu_tanh": lambda F, x: F.gelu(x, approximate="tanh"),
    "silu": lambda F, x: F.silu(x),
    "mish": lambda F, x: F.mish(x),
    "softplus": lambda F, x: F.softplus(x),
    "softplus_beta": lambda F, x: F.softplus(x, beta=2.0, threshold=5.0),
    "softsign": lambda F, x: F.softsign(x),
    "sigmoid": lambda F, x: F.sigmoid(x),
    "tanh": lambda F, x: F.tanh(x),
    "hardtanh": lambda F, x: F.hardtanh(x, -2.0, 3.0),
    "hardswish": lambda F, x: F.hardswish(x),
    "hardsigmoid": lambda F, x: F.hardsigmoid(x),
    "logsigmoid": lambda F, x: F.logsigmoid(x),
    "threshold": lambda F, x: F.threshold(x, 0.5, -2.0),
    "tanhshrink": lambda F, x: F.tanhshrink(x),
    "softshrink": lambda F, x: F.softshrink(x, 0.5),
    "hardshrink": lambda F, x: F.hardshrink(x, 0.5),
    "glu": lambda F, x: F.glu(x, 0),
    "rrelu_eval": lambda F, x: F.rrelu(x, 0.1, 0.3),
}
INPLACE = {
    "relu": lambda F, x: F.relu(x, inplace=True),
    "relu_": lambda F, x: F.relu_(x),
    "relu6": lambda F, x: F.relu6(x, inplace=True),
    "leaky_relu": lambda F, x: F.leaky_relu(x, 0.2, inplace=True),
    "leaky_relu_": lambda F, x: F.leaky_relu_(x, 0.3),
    "elu": lambda F, x: F.elu(x, 1.5, inplace=True),
    "selu": lambda F, x: F.selu(x, inplace=True),
    "celu": lambda F, x: F.celu(x, 0.7, inplace=True),
    "silu": lambda F, x: F.silu(x, inplace=True),
    "mish": lambda F, x: F.mish(x, inplace=True),
    "hardtanh": lambda F, x: F.hardtanh(x, -2.0, 3.0, inplace=True),
    "hardtanh_": lambda F, x: F.hardtanh_(x),
    "hardswish": lambda F, x: F.hardswish(x, inplace=True),
    "hardsigmoid": lambda F, x: F.hardsigmoid(x, inplace=True),
    "threshold": lambda F, x: F.threshold(x, 0.5, -2.0, inplace=True),
    "threshold_": lambda F, x: F.threshold_(x, 0.5, -2.0),
}


# -- activations ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_matches_torch(name, dtype, rng):
    fn = ACTIVATIONS[name]
    # float64: PyTorch rounds a few constants to float32 (1/6 in hardsigmoid's gradient, 1/alpha in celu's).
    tol = F32 if dtype == np.float32 else {"atol": 1e-10, "rtol": 1e-7}
    check_op(lambda x: fn(F, x), lambda x: fn(TF, x), [kinked(rng, dtype=dtype)], **tol)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_gradcheck(name, rng):
    gradcheck_op(lambda x: ACTIVATIONS[name](F, x), [smooth(rng, (4, 3))])


@pytest.mark.parametrize("name", ["gelu", "gelu_tanh", "silu", "mish", "softplus", "elu", "logsigmoid", "softsign"])
def test_activation_double_backward(name, rng):
    gradgradcheck_op(lambda x: ACTIVATIONS[name](F, x), [smooth(rng, (3, 2))])


@pytest.mark.parametrize("name", INPLACE)
def test_inplace_activation_matches_torch(name, rng):
    fn = INPLACE[name]
    x = kinked(rng)
    jt_leaf, th_leaf = to_jitorch(x, requires_grad=True), to_torch(x, requires_grad=True)
    jt_in, th_in = jt_leaf * 1.0, th_leaf * 1.0
    jt_out, th_out = fn(F, jt_in), fn(TF, th_in)
    assert jt_out is jt_in and th_out is th_in
    np.testing.assert_allclose(jt_in.detach().numpy(), th_in.detach().numpy(), **F32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    jt_in.backward(jitorch.tensor(g))
    th_in.backward(torch.from_numpy(g))
    np.testing.assert_allclose(jt_leaf.grad.numpy(), th_leaf.grad.numpy(), **F32)


@pytest.mark.parametrize("name", ["relu", "leaky_relu", "elu", "hardtanh", "threshold"])
def test_inplace_on_leaf_requiring_grad_raises(name):
    fn = INPLACE[name]
    check_error(lambda: fn(F, jitorch.ones(3, requires_grad=True)), lambda: fn(TF, torch.ones(3, requires_grad=True)),
                match="leaf Variable")


def test_inplace_without_grad_writes_input(rng):
    x = kinked(rng)
    jt = to_jitorch(x)
    assert F.elu(jt, inplace=True) is jt
    np.testing.assert_allclose(jt.numpy(), TF.elu(torch.from_numpy(x)).numpy(), **F32)


@pytest.mark.parametrize("shape", [(5,), (2, 3), (2, 3, 4), ()])
@pytest.mark.parametrize("num", [1, 3])
def test_prelu_matches_torch(shape, num, rng):
    x = rng.uniform(-2, 2, shape).astype(np.float32)
    w = np.array([0.25, 0.1, -0.3][:num], dtype=np.float32)
    check_op(F.prelu, TF.prelu, [x, w], **F32)


def test_rrelu_training_samples_slopes_in_range(rng):
    x = -jitorch.rand(2000) - 0.5
    out = F.rrelu(x, 0.1, 0.3, training=True)
    slopes = (out / x).numpy()
    assert slopes.min() >= 0.1 - 1e-6 and slopes.max() <= 0.3 + 1e-6 and slopes.std() > 0.03
    pos = jitorch.rand(10)
    assert jitorch.equal(F.rrelu(pos, training=True), pos)


@pytest.mark.parametrize("call,error", [
    (lambda F, lib: F.hardtanh(lib.ones(2), 2.0, 1.0), ValueError),
    (lambda F, lib: F.gelu(lib.ones(2), approximate="foo"), RuntimeError),
    (lambda F, lib: F.glu(lib.ones(3, 5), 1), RuntimeError),
    (lambda F, lib: F.glu(lib.tensor(1.0)), RuntimeError),
    (lambda F, lib: F.prelu(lib.ones(4, 3), lib.ones(2)), RuntimeError),
    (lambda F, lib: F.prelu(lib.ones(4, 3), lib.ones(1, 3)), RuntimeError),
    (lambda F, lib: F.celu(lib.ones(2), alpha=0.0), RuntimeError),
    (lambda F, lib: F.softshrink(lib.ones(2), -1.0), RuntimeError),
])
def test_activation_errors_match_torch(call, error):
    with pytest.raises(error):
        call(TF, torch)
    with pytest.raises(error):
        call(F, jitorch)


# -- softmax family -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "softmin"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_family_matches_torch(name, dim, rng):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32) * 3
    check_op(lambda t: getattr(F, name)(t, dim), lambda t: getattr(TF, name)(t, dim), [x], **F32)
    check_op(lambda t: getattr(F, name)(t, dim, dtype=jitorch.float64),
             lambda t: getattr(TF, name)(t, dim, dtype=torch.float64), [x], atol=1e-6, rtol=1e-6)
    gradcheck_op(lambda t: getattr(F, name)(t, dim), [x.astype(np.float64)])


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "softmin"])
@pytest.mark.parametrize("shape", [(4,), (2, 3), (2, 3, 4), (2, 3, 4, 5)])
def test_softmax_implicit_dim_warns_and_matches_torch(name, shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    with pytest.warns(UserWarning, match="Implicit dimension choice"):
        out = getattr(F, name)(to_jitorch(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = getattr(TF, name)(torch.from_numpy(x))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), **F32)


def test_softmax_double_backward(rng):
    gradgradcheck_op(lambda t: F.log_softmax(t, 1), [rng.standard_normal((2, 3))])


def test_gumbel_softmax_soft_and_hard(rng):
    logits = jitorch.tensor(rng.standard_normal((500, 4)).astype(np.float32), requires_grad=True)
    soft = F.gumbel_softmax(logits, tau=0.5)
    np.testing.assert_allclose(soft.sum(-1).detach().numpy(), np.ones(500), atol=1e-5)
    hard = F.gumbel_softmax(logits, hard=True)
    values = hard.detach().numpy()
    assert set(np.unique(values)) <= {0.0, 1.0} and (values.sum(-1) == 1).all()
    hard.backward(jitorch.randn(500, 4))  # straight-through: gradients of the soft sample
    assert logits.grad is not None and float(logits.grad.abs().sum()) > 0
    # Samples follow softmax(logits): class frequencies over many draws of one row.
    row = jitorch.tensor([[1.0, 0.0, -1.0]]).expand(20000, 3)
    freq = F.gumbel_softmax(row, hard=True).mean(0).numpy()
    np.testing.assert_allclose(freq, torch.softmax(torch.tensor([1.0, 0.0, -1.0]), 0).numpy(), atol=0.02)


# -- linear maps ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 3), (2, 5, 3), (3,)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_torch(shape, bias, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal(2).astype(np.float32)
    if bias:
        check_op(F.linear, TF.linear, [x, w, b], **F32)
    else:
        check_op(F.linear, TF.linear, [x, w], **F32)
    gradcheck_op(F.linear, [x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)])


def test_linear_with_vector_weight(rng):
    check_op(F.linear, TF.linear, [rng.standard_normal((4, 3)).astype(np.float32),
                                   rng.standard_normal(3).astype(np.float32)], **F32)


def test_linear_shape_and_dtype_errors_name_the_problem():
    check_error(F.linear, TF.linear, [np.ones((4, 3), np.float32), np.ones((2, 5), np.float32)],
                match=["linear", "4x3", "5x2"])
    check_error(F.linear, TF.linear, [np.ones((4, 3), np.float64), np.ones((2, 3), np.float32)],
                match=["linear", "Double", "Float"])
    check_error(F.linear, TF.linear, [np.ones((4, 3), np.float32), np.ones((2, 3), np.float32),
                                      np.ones(2, np.float64)], match=["bias", "Double"])


@pytest.mark.parametrize("lead", [(4,), (2, 3), ()])
def test_bilinear_matches_torch(lead, rng):
    x1 = rng.standard_normal(lead + (3,)).astype(np.float32)
    x2 = rng.standard_normal(lead + (2,)).astype(np.float32)
    w = rng.standard_normal((5, 3, 2)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    check_op(F.bilinear, TF.bilinear, [x1, x2, w, b], **F32)
    check_op(F.bilinear, TF.bilinear, [x1, x2, w], **F32)
    gradcheck_op(F.bilinear, [a.astype(np.float64) for a in (x1, x2, w, b)])


@pytest.mark.parametrize("shapes", [((4, 3), (4, 2), (5, 3, 3)), ((4, 3), (5, 2), (5, 3, 2)),
                                    ((4, 3), (4, 2, 1), (5, 3, 2))])
def test_bilinear_errors_match_torch(shapes):
    check_error(F.bilinear, TF.bilinear, [np.ones(s, np.float32) for s in shapes], match="bilinear")


# -- dropout --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn,shape", [(F.dropout, (2, 3)), (F.alpha_dropout, (2, 3)),
                                      (F.feature_alpha_dropout, (2, 3, 4)), (F.dropout1d, (2, 3, 4)),
                                      (F.dropout2d, (2, 3, 4, 5)), (F.dropout3d, (2, 3, 4, 5, 6))])
def test_dropout_identity_when_not_training_or_p0(fn, shape):
    x = jitorch.randn(*shape)
    assert fn(x, 0.5, training=False) is x
    assert fn(x, 0.0, training=True) is x
    th = torch.randn(*shape)
    assert getattr(TF, fn.__name__)(th, 0.5, training=False) is th


@pytest.mark.parametrize("p", [0.2, 0.5])
def test_dropout_scales_kept_elements_and_masks_gradient(p):
    x = jitorch.rand(200, 100) + 0.5
    x.requires_grad_(True)
    out = F.dropout(x, p)
    kept = (out != 0).detach()
    assert abs(1 - float(kept.float().mean()) - p) < 0.02
    np.testing.assert_allclose(out[kept].detach().numpy(), (x[kept] / (1 - p)).detach().numpy(), rtol=1e-6)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), kept.float().numpy() / (1 - p), rtol=1e-6)


def test_dropout_p1_zeroes_and_inplace_writes_input():
    x = jitorch.ones(3, 4)
    assert float(F.dropout(x, 1.0).abs().sum()) == 0
    y = jitorch.ones(1000)
    assert F.dropout(y, 0.5, inplace=True) is y
    assert set(np.unique(y.numpy())) <= {0.0, 2.0}


@pytest.mark.parametrize("fn,shape,batched", [(F.dropout1d, (8, 50, 6), True), (F.dropout1d, (50, 6), False),
                                              (F.dropout2d, (8, 50, 3, 3), True),
                                              (F.dropout3d, (8, 50, 2, 2, 2), True),
                                              (F.dropout3d, (50, 2, 2, 2), False)])
def test_feature_dropout_drops_whole_channels(fn, shape, batched):
    out = fn(jitorch.ones(*shape), 0.5).numpy()
    channels = out.reshape((shape[0], shape[1], -1) if batched else (1, shape[0], -1))
    assert (channels.std(-1) == 0).all()  # each channel is all 0 or all 2
    assert set(np.unique(channels)) <= {0.0, 2.0}
    assert 0.3 < (channels[..., 0] == 0).mean() < 0.7


def test_alpha_dropout_keeps_mean_and_variance():
    x = jitorch.randn(200000)
    out = F.alpha_dropout(x, 0.3, training=True).numpy()
    assert abs(out.mean()) < 0.02 and abs(out.std() - 1) < 0.02
    feat = F.feature_alpha_dropout(jitorch.randn(400, 300, 4), 0.3, training=True).numpy()
    assert abs(feat.mean()) < 0.03 and abs(feat.std() - 1) < 0.03


@pytest.mark.parametrize("call,error,match", [
    (lambda F, lib: F.dropout(lib.ones(3), 1.5), ValueError, "between 0 and 1"),
    (lambda F, lib: F.dropout(lib.ones(3), -0.1), ValueError, "between 0 and 1"),
    (lambda F, lib: F.dropout1d(lib.ones(3), 0.5), RuntimeError, "dropout1d"),
    (lambda F, lib: F.alpha_dropout(lib.ones(3), 2.0), ValueError, "between 0 and 1"),
])
def test_dropout_errors_match_torch(call, error, match):
    with pytest.raises(error):
        call(TF, torch)
    with pytest.raises(error, match=match):
        call(F, jitorch)


def test_dropout2d_warns_like_torch():
    with pytest.warns(UserWarning, match="dropout2d: Received a 3D input"):
        F.dropout2d(jitorch.ones(2, 3, 4), 0.5)
    with pytest.warns(UserWarning, match="dropout2d: Received a 2-D input"):
        F.dropout2d(jitorch.ones(2, 3), 0.5)


# -- embedding and one_hot ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
@pytest.mark.parametrize("scale_grad_by_freq", [False, True])
def test_embedding_matches_torch(padding_idx, scale_grad_by_freq, rng):
    w = rng.standard_normal((6, 3)).astype(np.float32)
    idx = np.array([[0, 2, 5, 2], [5, 5, 1, 0]])
    check_op(lambda i, w: F.embedding(i, w, padding_idx, scale_grad_by_freq=scale_grad_by_freq),
             lambda i, w: TF.embedding(i, w, padding_idx, scale_grad_by_freq=scale_grad_by_freq), [idx, w], **F32)
    check_op(lambda i, w: F.embedding(i, w), lambda i, w: TF.embedding(i, w), [idx[0].astype(np.int32), w], **F32)


@pytest.mark.parametrize("norm_type", [2.0, 1.0])
def test_embedding_max_norm_renormalizes_rows_in_place(norm_type, rng):
    w = (rng.standard_normal((6, 4)) * 3).astype(np.float32)
    idx = np.array([1, 3, 3, 5])
    jt_w, th_w = to_jitorch(w), to_torch(w)
    out = F.embedding(to_jitorch(idx), jt_w, max_norm=1.5, norm_type=norm_type)
    expected = TF.embedding(to_torch(idx), th_w, max_norm=1.5, norm_type=norm_type)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), **F32)
    np.testing.assert_allclose(jt_w.numpy(), th_w.numpy(), **F32)  # rows 1, 3, 5 rescaled; others untouched


def test_embedding_gradcheck(rng):
    # Without padding_idx: its row's gradient is defined as 0 although the output depends on it.
    idx = jitorch.tensor([[0, 2], [2, 1]])
    gradcheck_op(lambda w: F.embedding(idx, w), [rng.standard_normal((3, 2))])



@pytest.mark.parametrize("call,error", [
    (lambda F, lib: F.embedding(lib.tensor([1, 5]), lib.ones(4, 3)), IndexError),
    (lambda F, lib: F.embedding(lib.tensor([-1]), lib.ones(4, 3)), IndexError),
    (lambda F, lib: F.embedding(lib.tensor([1.0]), lib.ones(4, 3)), RuntimeError),
    (lambda F, lib: F.embedding(lib.tensor([1]), lib.ones(4, 3), padding_idx=4), AssertionError),
    (lambda F, lib: F.embedding(lib.tensor([1]), lib.ones(4, 3), padding_idx=-5), AssertionError),
])
def test_embedding_errors_match_torch(call, error):
    with pytest.raises(error):
        call(TF, torch)
    with pytest.raises(error):
        call(F, jitorch)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 0])
def test_embedding_bag_matches_torch(mode, padding_idx, rng):
    w = rng.standard_normal((7, 3)).astype(np.float32)
    idx2d = np.array([[1, 0, 4], [6, 6, 0], [0, 0, 0]])
    check_op(lambda i, w: F.embedding_bag(i, w, mode=mode, padding_idx=padding_idx),
             lambda i, w: TF.embedding_bag(i, w, mode=mode, padding_idx=padding_idx), [idx2d, w], **F32)
    flat, offsets = np.array([1, 0, 4, 6, 2, 0, 3]), np.array([0, 2, 2, 5])
    check_op(lambda i, o, w: F.embedding_bag(i, w, o, mode=mode, padding_idx=padding_idx),
             lambda i, o, w: TF.embedding_bag(i, w, o, mode=mode, padding_idx=padding_idx), [flat, offsets, w],
             **F32)
    last = np.array([0, 2, 2, 5, 7])
    check_op(lambda i, o, w: F.embedding_bag(i, w, o, mode=mode, include_last_offset=True),
             lambda i, o, w: TF.embedding_bag(i, w, o, mode=mode, include_last_offset=True), [flat, last, w], **F32)


def test_embedding_bag_per_sample_weights(rng):
    w = rng.standard_normal((5, 3)).astype(np.float32)
    psw = rng.standard_normal(6).astype(np.float32)
    flat, offsets = np.array([1, 0, 4, 2, 2, 3]), np.array([0, 3])
    check_op(lambda i, o, w, s: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=s),
             lambda i, o, w, s: TF.embedding_bag(i, w, o, mode="sum", per_sample_weights=s),
             [flat, offsets, w, psw], **F32)


@pytest.mark.parametrize("num_classes", [-1, 6])
@pytest.mark.parametrize("shape", [(5,), (2, 3), ()])
def test_one_hot_matches_torch(num_classes, shape, rng):
    x = rng.integers(0, 4, shape).astype(np.int64)
    check_op(lambda t: F.one_hot(t, num_classes), lambda t: TF.one_hot(t, num_classes), [x])


@pytest.mark.parametrize("x,num_classes", [(np.array([1, 2], np.int32), -1), (np.array([1, -2]), -1),
                                           (np.array([1, 4]), 3), (np.zeros(0, np.int64), -1)])
def test_one_hot_errors_match_torch(x, num_classes):
    check_error(lambda t: F.one_hot(t, num_classes), lambda t: TF.one_hot(t, num_classes), [x])


# -- normalization --------------------------------------------------------------------------------------------------
def both(arr, requires_grad=False):
    return to_jitorch(arr, requires_grad=requires_grad), to_torch(arr, requires_grad=requires_grad)


@pytest.mark.parametrize("shape,normalized", [((2, 3, 4), (4,)), ((2, 3, 4), (3, 4)), ((5,), (5,))])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
def test_layer_norm_matches_torch(shape, normalized, affine, rng):
    x = rng.standard_normal(shape).astype(np.float32) * 2 + 1
    w = rng.standard_normal(normalized).astype(np.float32)
    b = rng.standard_normal(normalized).astype(np.float32)
    extra = {"none": [], "weight": [w], "both": [w, b]}[affine]
    check_op(lambda x, *wb: F.layer_norm(x, normalized, *wb, eps=1e-3),
             lambda x, *wb: TF.layer_norm(x, normalized, *wb, eps=1e-3), [x] + extra, **F32)
    gradcheck_op(lambda x, *wb: F.layer_norm(x, normalized, *wb), [a.astype(np.float64) for a in [x] + extra])


@pytest.mark.parametrize("shape", [(4,), (2, 3)])
def test_rms_norm_matches_torch(shape, rng):
    x = rng.standard_normal((2, 3) + shape).astype(np.float32)
    w = rng.standard_normal(shape).astype(np.float32)
    check_op(lambda x, w: F.rms_norm(x, shape, w), lambda x, w: TF.rms_norm(x, shape, w), [x, w], **F32)
    check_op(lambda x: F.rms_norm(x, shape, eps=0.1), lambda x: TF.rms_norm(x, shape, eps=0.1), [x], **F32)
    gradcheck_op(lambda x, w: F.rms_norm(x, shape, w), [x.astype(np.float64), w.astype(np.float64)])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rms_norm_half_default_eps_is_float32s(dtype):
    # eps=None means float32's epsilon for half inputs (computed upcast), not the half type's much larger one
    x = (np.random.default_rng(0).standard_normal((2, 5)) * 0.05).astype(np_dtype(dtype))
    w = np.random.default_rng(1).standard_normal(5).astype(np_dtype(dtype))
    atol, rtol = tol_for(dtype)  # half eps (1e-3 against a mean square of 2.5e-3) was off by 15%
    check_op(lambda x, w: F.rms_norm(x, (5,), w), lambda x, w: TF.rms_norm(x, (5,), w), [x, w], grad=False,
             atol=atol, rtol=rtol)


# Not (2, 6) with 6 groups: one value per group, where both frameworks output rounding noise / sqrt(eps).
@pytest.mark.parametrize("groups,shape", [(g, s) for g in (1, 2, 3, 6) for s in ((2, 6), (2, 6, 5), (3, 6, 2, 3))
                                          if (g, s) != (6, (2, 6))])
def test_group_norm_matches_torch(groups, shape, rng):
    x = rng.standard_normal(shape).astype(np.float32) * 3
    w, b = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    check_op(lambda x, w, b: F.group_norm(x, groups, w, b), lambda x, w, b: TF.group_norm(x, groups, w, b),
             [x, w, b], **F32)
    gradcheck_op(lambda x, w, b: F.group_norm(x, groups, w, b, eps=1e-3),
                     [a.astype(np.float64) for a in (x, w, b)])


@pytest.mark.parametrize("call", [
    lambda F, lib: F.layer_norm(lib.ones(2, 3, 4), [5]),
    lambda F, lib: F.layer_norm(lib.ones(2, 3), [3], weight=lib.ones(2)),
    lambda F, lib: F.layer_norm(lib.ones(2, 3), [3], bias=lib.ones(2)),
    lambda F, lib: F.layer_norm(lib.ones(2, 3), 3),
    lambda F, lib: F.rms_norm(lib.ones(2, 3, 4), [5]),
    lambda F, lib: F.group_norm(lib.ones(2, 6, 4), 4),
    lambda F, lib: F.group_norm(lib.ones(1, 2), 2),
    lambda F, lib: F.group_norm(lib.ones(2, 6, 4), 3, weight=lib.ones(2)),
    lambda F, lib: F.group_norm(lib.ones(6), 3),
])
def test_norm_errors_match_torch(call):
    check_error(lambda: call(F, jitorch), lambda: call(TF, torch))


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 4, 2)])
@pytest.mark.parametrize("momentum", [0.1, 0.5])
def test_batch_norm_training_matches_torch(shape, momentum, rng):
    x = rng.standard_normal(shape).astype(np.float32) * 2 + 0.5
    w, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    rm, rv = rng.standard_normal(3).astype(np.float32), rng.uniform(0.5, 2, 3).astype(np.float32)
    jt_rm, th_rm = both(rm)
    jt_rv, th_rv = both(rv)
    check_op(lambda x, w, b: F.batch_norm(x, jt_rm, jt_rv, w, b, True, momentum),
             lambda x, w, b: TF.batch_norm(x, th_rm, th_rv, w, b, True, momentum), [x, w, b], **F32)
    np.testing.assert_allclose(jt_rm.numpy(), th_rm.numpy(), **F32)
    np.testing.assert_allclose(jt_rv.numpy(), th_rv.numpy(), **F32)  # unbiased batch variance
    assert not jt_rm.requires_grad and jt_rm.grad_fn is None
    gradcheck_op(lambda x, w, b: F.batch_norm(x, None, None, w, b, True), [a.astype(np.float64) for a in (x, w, b)])


@pytest.mark.parametrize("shape", [(6, 3), (2, 3, 4, 2)])
def test_batch_norm_eval_and_stat_free_training_match_torch(shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    w, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    rm, rv = rng.standard_normal(3).astype(np.float32), rng.uniform(0.5, 2, 3).astype(np.float32)
    (jt_rm, th_rm), (jt_rv, th_rv) = both(rm), both(rv)
    check_op(lambda x, w, b: F.batch_norm(x, jt_rm, jt_rv, w, b, False, eps=1e-3),
             lambda x, w, b: TF.batch_norm(x, th_rm, th_rv, w, b, False, eps=1e-3), [x, w, b], **F32)
    check_op(lambda x: F.batch_norm(x, None, None, training=True),
             lambda x: TF.batch_norm(x, None, None, training=True), [x], **F32)
    rm64, rv64 = jitorch.tensor(rm.astype(np.float64)), jitorch.tensor(rv.astype(np.float64))
    gradcheck_op(lambda x, w: F.batch_norm(x, rm64, rv64, w), [a.astype(np.float64) for a in (x, w)])


@pytest.mark.parametrize("call", [
    lambda F, lib: F.batch_norm(lib.ones(4, 3), None, None, training=False),
    lambda F, lib: F.batch_norm(lib.ones(4, 3), lib.zeros(2), lib.ones(2), training=True),
    lambda F, lib: F.batch_norm(lib.ones(1, 3), lib.zeros(3), lib.ones(3), training=True),
    lambda F, lib: F.batch_norm(lib.ones(4, 3), lib.zeros(3), lib.ones(3), weight=lib.ones(2)),
    lambda F, lib: F.batch_norm(lib.ones(4, 3), lib.zeros(3), lib.ones(3), training=True, eps=0.0),
    lambda F, lib: F.batch_norm(lib.ones(4, 3), lib.zeros(3), None, training=True),
    lambda F, lib: F.instance_norm(lib.ones(2, 3, 1)),
    lambda F, lib: F.batch_norm(lib.ones(4, 3), lib.zeros(3, requires_grad=True), lib.ones(3)),
])
def test_batch_and_instance_norm_errors_match_torch(call):
    check_error(lambda: call(F, jitorch), lambda: call(TF, torch))


@pytest.mark.parametrize("shape", [(2, 3, 5), (3, 3, 2, 4)])
def test_instance_norm_matches_torch(shape, rng):
    x = rng.standard_normal(shape).astype(np.float32) * 2
    w, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    check_op(lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
             lambda x, w, b: TF.instance_norm(x, weight=w, bias=b), [x, w, b], **F32)
    rm, rv = rng.standard_normal(3).astype(np.float32), rng.uniform(0.5, 2, 3).astype(np.float32)
    jt_rm, th_rm = both(rm)
    jt_rv, th_rv = both(rv)
    check_op(lambda x: F.instance_norm(x, jt_rm, jt_rv, momentum=0.3),
             lambda x: TF.instance_norm(x, th_rm, th_rv, momentum=0.3), [x], **F32)
    np.testing.assert_allclose(jt_rm.numpy(), th_rm.numpy(), **F32)
    np.testing.assert_allclose(jt_rv.numpy(), th_rv.numpy(), **F32)
    check_op(lambda x: F.instance_norm(x, jt_rm, jt_rv, use_input_stats=False),
             lambda x: TF.instance_norm(x, th_rm, th_rv, use_input_stats=False), [x], **F32)
    gradcheck_op(lambda x, w, b: F.instance_norm(x, weight=w, bias=b), [a.astype(np.float64) for a in (x, w, b)])


@pytest.mark.parametrize("shape", [(2, 7, 5), (2, 6, 3, 4), (1, 5, 2, 2, 3)])
@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_local_response_norm_matches_torch(shape, size, rng):
    x = rng.standard_normal(shape).astype(np.float32) * 3
    check_op(lambda x: F.local_response_norm(x, size, alpha=0.1, beta=0.6, k=2.0),
             lambda x: TF.local_response_norm(x, size, alpha=0.1, beta=0.6, k=2.0), [x], **F32)


@pytest.mark.parametrize("p,dim", [(2.0, 1), (1.0, 0), (3.0, -1)])
def test_normalize_matches_torch(p, dim, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    x[1] = 0.0  # a zero vector: the eps floor
    check_op(lambda x: F.normalize(x, p, dim), lambda x: TF.normalize(x, p, dim), [x], **F32)
    gradcheck_op(lambda x: F.normalize(x, p, dim), [rng.standard_normal((3, 4))])


def test_half_precision_norms_compute_in_float32(rng):
    x = rng.standard_normal((4, 8)).astype(np.float16)
    for name, args in [("layer_norm", ([8],)), ("rms_norm", ([8],)), ("group_norm", (2,))]:
        check_op(lambda t: getattr(F, name)(t, *args), lambda t: getattr(TF, name)(t, *args), [x], atol=2e-3,
                 rtol=2e-3, grad=False)


# -- similarities and distances -------------------------------------------------------------------------------------
@pytest.mark.parametrize("shapes,dim", [(((3, 4), (3, 4)), 1), (((3, 4), (4,)), -1), (((2, 3, 4), (2, 1, 4)), 2),
                                        (((5,), (5,)), 0)])
def test_cosine_similarity_matches_torch(shapes, dim, rng):
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    a.reshape(-1)[:4] = 1e-10  # a nearly zero vector: its norm is floored at eps (value only, as PyTorch)
    check_op(lambda a, b: F.cosine_similarity(a, b, dim), lambda a, b: TF.cosine_similarity(a, b, dim), [a, b],
             atol=1e-5, rtol=1e-4)
    gradcheck_op(lambda a, b: F.cosine_similarity(a, b, dim), [rng.standard_normal(s) for s in shapes])


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 4), (4,)), ((4,), (4,))])
@pytest.mark.parametrize("keepdim", [False, True])
def test_pairwise_distance_matches_torch(p, shapes, keepdim, rng):
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    check_op(lambda a, b: F.pairwise_distance(a, b, p, keepdim=keepdim),
             lambda a, b: TF.pairwise_distance(a, b, p, keepdim=keepdim), [a, b], **F32)
    gradcheck_op(lambda a, b: F.pairwise_distance(a, b, p), [rng.standard_normal(s) for s in shapes])


@pytest.mark.parametrize("p", [2.0, 1.0])
def test_pdist_matches_torch(p, rng):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    check_op(lambda x: F.pdist(x, p), lambda x: TF.pdist(x, p), [x], **F32)


# -- attention ------------------------------------------------------------------------------------------------------
def _qkv(rng, lead=(2, 3), length=4, source=5, e=6, ev=7):
    return [rng.standard_normal(lead + s).astype(np.float32) for s in ((length, e), (source, e), (source, ev))]


@pytest.mark.parametrize("kwargs", [{}, {"scale": 0.3}, {"is_causal": True}])
@pytest.mark.parametrize("lead", [(2, 3), (3,), ()])
def test_sdpa_matches_torch(kwargs, lead, rng):
    qkv = _qkv(rng, lead)
    check_op(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs),
             lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, **kwargs), qkv, **F32)


@pytest.mark.parametrize("kind", ["bool", "float", "bool_broadcast"])
def test_sdpa_masks_match_torch(kind, rng):
    q, k, v = _qkv(rng)
    if kind == "float":
        mask = rng.standard_normal((4, 5)).astype(np.float32)
        mask[1] = -np.inf  # a query that may attend to nothing: zeros
    else:
        mask = rng.random((2, 1, 4, 5) if kind == "bool_broadcast" else (4, 5)) < 0.6
        mask[..., 2, :] = False
    check_op(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
             lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, attn_mask=m), [q, k, v, mask], **F32)


def test_sdpa_gqa_and_gradcheck(rng):
    q = rng.standard_normal((2, 4, 3, 5)).astype(np.float32)
    k, v = (rng.standard_normal((2, 2, 6, 5)).astype(np.float32) for _ in range(2))
    check_op(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
             lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, enable_gqa=True), [q, k, v], **F32)
    mask = jitorch.tensor(rng.random((3, 6)) < 0.7)
    gradcheck_op(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                 [a[:1].astype(np.float64) for a in (q[:, :2], k, v)])


def test_sdpa_dropout_drops_attention_weights(rng):
    q, k, v = (jitorch.tensor(a) for a in _qkv(rng))
    plain = F.scaled_dot_product_attention(q, k, v)
    assert jitorch.allclose(F.scaled_dot_product_attention(q, k, v, dropout_p=0.0), plain)
    assert not jitorch.allclose(F.scaled_dot_product_attention(q, k, v, dropout_p=0.5), plain)


def test_sdpa_errors_match_torch(rng):
    q, k, v = _qkv(rng)
    check_error(F.scaled_dot_product_attention, TF.scaled_dot_product_attention, [q.astype(np.float64), k, v],
                match="same dtype")
    mask = np.ones((4, 5), bool)
    check_error(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m, is_causal=True),
                lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, m, is_causal=True), [q, k, v, mask],
                match="is_causal")


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("masks", ["none", "key_padding", "attn_bool", "attn_float", "causal"])
def test_multi_head_attention_forward_matches_torch(need_weights, masks, rng):
    length, batch, embed, heads = 4, 2, 6, 3
    x = rng.standard_normal((length, batch, embed)).astype(np.float32)
    w_in = rng.standard_normal((3 * embed, embed)).astype(np.float32) * 0.3
    b_in = rng.standard_normal(3 * embed).astype(np.float32)
    w_out = rng.standard_normal((embed, embed)).astype(np.float32) * 0.3
    b_out = rng.standard_normal(embed).astype(np.float32)
    kw = {}
    if masks == "key_padding":
        kw["key_padding_mask"] = np.array([[False, False, True, False], [False, True, True, False]])
    elif masks == "attn_bool":
        kw["attn_mask"] = np.triu(np.ones((length, length), bool), 1)
    elif masks == "attn_float":
        kw["attn_mask"] = rng.standard_normal((length, length)).astype(np.float32)
    elif masks == "causal":
        kw["attn_mask"] = np.triu(np.ones((length, length), bool), 1)
        kw["is_causal"] = True

    def run(mha, lib):
        def fn(x, w_in, b_in, w_out, b_out):
            tensors = {k: (lib.tensor(v) if lib is jitorch else torch.from_numpy(v)) for k, v in kw.items()
                       if k != "is_causal"}
            return mha(x, x, x, embed, heads, w_in, b_in, None, None, False, 0.0, w_out, b_out,
                       need_weights=need_weights, is_causal=kw.get("is_causal", False), **tensors)
        return fn
    check_op(run(F.multi_head_attention_forward, jitorch), run(TF.multi_head_attention_forward, torch),
             [x, w_in, b_in, w_out, b_out], atol=1e-5, rtol=1e-4)
