"""nn.functional (everything but the losses and the spatial ops) against PyTorch: values, input gradients with random
upstream gradients (kink points included, where PyTorch's one-sided choice is the contract), gradcheck in float64,
in-place forms, errors; dropout and gumbel_softmax statistically (jitorch's random stream is not PyTorch's)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import check_error, check_op, gradcheck_op, gradgradcheck_op, to_jitorch, to_torch

import jitorch
import jitorch.nn.functional as F

from nn_functional_helpers import F32
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
