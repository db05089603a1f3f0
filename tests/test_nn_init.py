"""nn.init against PyTorch: gains and fan computations exactly, distributions statistically (jitorch's random
streams are not PyTorch's), deterministic fills exactly."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

import jitorch
from jitorch.nn import init

N = 200 * 200  # samples per statistical check: the mean is known to ~0.5% of the scale


def sample(fn, shape=(200, 200), **kwargs):
    t = jitorch.nn.Parameter(jitorch.empty(*shape))
    out = fn(t, **kwargs)
    assert out is t and t.grad_fn is None and t.requires_grad  # in place, not recorded
    return t.detach().numpy().astype(np.float64)


def assert_moments(x, mean, std, k=5.0):
    """Sample mean and std within ``k`` standard errors of the expected values."""
    n = x.size
    assert abs(x.mean() - mean) < k * std / math.sqrt(n), (x.mean(), mean)
    assert abs(x.std() - std) < k * std / math.sqrt(2 * n), (x.std(), std)


@pytest.mark.parametrize("name,param", [("linear", None), ("conv2d", None), ("conv_transpose3d", None),
                                        ("sigmoid", None), ("tanh", None), ("relu", None), ("selu", None),
                                        ("leaky_relu", None), ("leaky_relu", 0.2), ("leaky_relu", 3)])
def test_calculate_gain_matches_torch(name, param):
    assert init.calculate_gain(name, param) == torch.nn.init.calculate_gain(name, param)


@pytest.mark.parametrize("args", [("swish",), ("leaky_relu", "x"), ("leaky_relu", True)])
def test_calculate_gain_errors_match_torch(args):
    with pytest.raises(ValueError) as th_err:
        torch.nn.init.calculate_gain(*args)
    with pytest.raises(ValueError) as jt_err:
        init.calculate_gain(*args)
    assert str(jt_err.value) == str(th_err.value)


@pytest.mark.parametrize("shape", [(3, 5), (4, 3, 2), (8, 4, 3, 3), (2, 3, 1, 1, 2), (0, 4)])
def test_fan_in_and_fan_out_match_torch(shape):
    expected = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
    assert init._calculate_fan_in_and_fan_out(jitorch.empty(shape)) == expected
    for mode in ("fan_in", "fan_out", "FAN_IN"):
        assert init._calculate_correct_fan(jitorch.empty(shape), mode) == \
            torch.nn.init._calculate_correct_fan(torch.empty(shape), mode)


@pytest.mark.parametrize("call", [
    lambda nn_init, lib: nn_init._calculate_fan_in_and_fan_out(lib.empty(5)),
    lambda nn_init, lib: nn_init.xavier_uniform_(lib.empty(())),
    lambda nn_init, lib: nn_init.kaiming_normal_(lib.empty(3, 3), mode="fan_avg"),
    lambda nn_init, lib: nn_init.eye_(lib.empty(2, 2, 2)),
    lambda nn_init, lib: nn_init.dirac_(lib.empty(2, 2)),
    lambda nn_init, lib: nn_init.dirac_(lib.empty(3, 2, 3), groups=2),
    lambda nn_init, lib: nn_init.orthogonal_(lib.empty(4)),
    lambda nn_init, lib: nn_init.sparse_(lib.empty(2, 2, 2), 0.5),
])
def test_errors_match_torch(call):
    with pytest.raises(ValueError) as th_err:
        call(torch.nn.init, torch)
    with pytest.raises(ValueError) as jt_err:
        call(init, jitorch)
    assert str(jt_err.value) == str(th_err.value)


def test_uniform_and_normal():
    x = sample(init.uniform_, a=-2.0, b=3.0)
    assert x.min() >= -2.0 and x.max() < 3.0
    assert_moments(x, 0.5, 5 / math.sqrt(12))
    assert_moments(sample(init.normal_, mean=1.5, std=0.5), 1.5, 0.5)
    assert_moments(sample(lambda t: init.normal_(t, -1.0, 2.0)), -1.0, 2.0)  # positional mean, std


def test_deterministic_fills_match_torch():
    for fn, args in ((init.constant_, (0.25,)), (init.ones_, ()), (init.zeros_, ())):
        th = getattr(torch.nn.init, fn.__name__)(torch.empty(3, 4), *args)
        np.testing.assert_array_equal(fn(jitorch.empty(3, 4), *args).numpy(), th.numpy())
    for shape in ((3, 5), (5, 3), (4, 4)):
        np.testing.assert_array_equal(init.eye_(jitorch.empty(shape)).numpy(),
                                      torch.nn.init.eye_(torch.empty(shape)).numpy())
    for shape, groups in (((4, 2, 3), 1), ((6, 3, 3, 3), 2), ((2, 4, 3, 2, 5), 1), ((6, 2, 4, 4), 3)):
        np.testing.assert_array_equal(init.dirac_(jitorch.empty(shape), groups).numpy(),
                                      torch.nn.init.dirac_(torch.empty(shape), groups).numpy())
    half = init.ones_(jitorch.empty(2, dtype=jitorch.float16))
    assert half.dtype is jitorch.float16 and half.sum().item() == 2.0


@pytest.mark.parametrize("gain", [1.0, init.calculate_gain("relu")])
def test_xavier(gain):
    fan_in, fan_out = 200 * 3, 100 * 3
    std = gain * math.sqrt(2.0 / (fan_in + fan_out))
    x = sample(init.xavier_uniform_, shape=(100, 200, 3), gain=gain)
    bound = math.sqrt(3.0) * std
    assert np.abs(x).max() <= bound and np.abs(x).max() > 0.99 * bound
    assert_moments(x.ravel(), 0.0, std)
    assert_moments(sample(init.xavier_normal_, shape=(100, 200, 3), gain=gain).ravel(), 0.0, std)


@pytest.mark.parametrize("a,mode,nonlinearity", [(math.sqrt(5), "fan_in", "leaky_relu"), (0, "fan_out", "relu"),
                                                 (0.1, "fan_in", "leaky_relu"), (0, "fan_in", "tanh")])
def test_kaiming(a, mode, nonlinearity):
    shape = (50, 80, 3, 3)
    fan = torch.nn.init._calculate_correct_fan(torch.empty(shape), mode)
    std = torch.nn.init.calculate_gain(nonlinearity, a) / math.sqrt(fan)
    x = sample(init.kaiming_uniform_, shape=shape, a=a, mode=mode, nonlinearity=nonlinearity).ravel()
    assert np.abs(x).max() <= math.sqrt(3.0) * std
    assert_moments(x, 0.0, std)
    x = sample(init.kaiming_normal_, shape=shape, a=a, mode=mode, nonlinearity=nonlinearity).ravel()
    assert_moments(x, 0.0, std)


def test_zero_element_kaiming_warns_like_torch():
    for nn_init, lib in ((torch.nn.init, torch), (init, jitorch)):
        with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
            nn_init.kaiming_uniform_(lib.empty(0, 3))


@pytest.mark.parametrize("mean,std,a,b", [(0.0, 1.0, -2.0, 2.0), (0.5, 0.02, 0.46, 0.6), (0.0, 1.0, 1.5, 4.0),
                                          (1.0, 2.0, -10.0, 0.0)])
def test_trunc_normal(mean, std, a, b):
    x = sample(init.trunc_normal_, mean=mean, std=std, a=a, b=b)
    assert x.min() >= a and x.max() <= b
    expected = stats.truncnorm((a - mean) / std, (b - mean) / std, loc=mean, scale=std)
    assert_moments(x.ravel(), expected.mean(), expected.std())


def test_trunc_normal_far_from_bounds_warns():
    with pytest.warns(UserWarning, match="mean is more than 2 std from"):
        init.trunc_normal_(jitorch.empty(3), mean=10.0, std=1.0, a=-2.0, b=2.0)


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (5, 2, 3), (3, 3)])
def test_orthogonal(shape):
    w = init.orthogonal_(jitorch.empty(shape), gain=2.0).numpy().reshape(shape[0], -1).astype(np.float64)
    rows, cols = w.shape
    gram = w.T @ w if rows >= cols else w @ w.T
    np.testing.assert_allclose(gram, 4.0 * np.eye(min(rows, cols)), atol=1e-5)


def test_sparse():
    x = init.sparse_(jitorch.empty(10, 40), sparsity=0.25, std=0.5).numpy()
    assert all((x[:, c] == 0).sum() == math.ceil(0.25 * 10) for c in range(40))
    assert_moments(x[x != 0], 0.0, 0.5, k=6.0)


@pytest.mark.parametrize("fn,kwargs", [(init.uniform_, {}), (init.normal_, {}), (init.xavier_uniform_, {}),
                                       (init.xavier_normal_, {}), (init.kaiming_uniform_, {}),
                                       (init.kaiming_normal_, {}), (init.trunc_normal_, {}), (init.orthogonal_, {}),
                                       (init.sparse_, {"sparsity": 0.5})])
def test_generator_makes_draws_reproducible(fn, kwargs):
    def draw(seed):
        return fn(jitorch.empty(6, 5), generator=jitorch.Generator().manual_seed(seed), **kwargs).numpy().copy()

    np.testing.assert_array_equal(draw(3), draw(3))
    assert not np.array_equal(draw(3), draw(4))


def test_deprecated_aliases_warn():
    with pytest.warns(FutureWarning, match="nn.init.xavier_uniform` is now deprecated"):
        init.xavier_uniform(jitorch.empty(2, 2))
    with pytest.warns(FutureWarning):
        assert init.constant(jitorch.empty(2), 3.0).sum().item() == 6.0
