"""Matrix constraints (symmetric, positive definite/semidefinite) on batches broadcast with stride 0, against torch:
the answer per distinct matrix expanded back must equal torch's answer for every batch element."""
import numpy as np
import pytest
import torch

import jitorch

NAMES = ("symmetric", "positive_definite", "positive_semidefinite")


def _matrices():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4, 4))
    pd = a @ a.transpose(0, 2, 1) + 4 * np.eye(4)
    indefinite = pd[1] - 30 * np.eye(4)
    singular = np.outer(np.arange(1.0, 5.0), np.arange(1.0, 5.0))  # PSD, not PD
    asymmetric = pd[2] + np.triu(np.ones((4, 4)), 1)
    return np.stack([pd[0], indefinite, singular, asymmetric])


def _both(fn, array):
    return fn(jitorch, jitorch.tensor(array)), fn(torch, torch.tensor(array))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("which", range(4))
@pytest.mark.parametrize("batch", [(5,), (2, 3), (1,), (0,)])
def test_expanded_single_matrix(name, which, batch):
    m = _matrices()[which]
    jt, th = _both(lambda T, x: getattr(T.distributions.constraints, name).check(x.expand(batch + (4, 4))), m)
    assert tuple(jt.shape) == tuple(th.shape) == batch and jt.dtype == jitorch.bool
    np.testing.assert_array_equal(jt.numpy(), th.numpy())


@pytest.mark.parametrize("name", NAMES)
def test_partly_expanded_batches(name):
    ms = _matrices()  # (4, 4, 4): expanded along a new middle dim, and a real batch dim kept
    jt, th = _both(lambda T, x: getattr(T.distributions.constraints, name).check(x.unsqueeze(1).expand(4, 3, 4, 4)),
                   ms)
    assert tuple(jt.shape) == tuple(th.shape) == (4, 3)
    np.testing.assert_array_equal(jt.numpy(), th.numpy())
    jt, th = _both(lambda T, x: getattr(T.distributions.constraints, name).check(x), ms)  # not expanded at all
    np.testing.assert_array_equal(jt.numpy(), th.numpy())


def test_multivariate_normal_shared_covariance_validated_as_torch():
    loc = np.random.default_rng(1).standard_normal((64, 4)).astype(np.float32)
    cov = _matrices()[0].astype(np.float32)
    jd = jitorch.distributions.MultivariateNormal(jitorch.tensor(loc), covariance_matrix=jitorch.tensor(cov))
    td = torch.distributions.MultivariateNormal(torch.tensor(loc), covariance_matrix=torch.tensor(cov))
    value = np.random.default_rng(2).standard_normal((64, 4)).astype(np.float32)
    np.testing.assert_allclose(jd.log_prob(jitorch.tensor(value)).numpy(), td.log_prob(torch.tensor(value)).numpy(),
                               atol=1e-5, rtol=1e-5)
    bad = _matrices()[1].astype(np.float32)
    for T in (jitorch, torch):
        with pytest.raises(ValueError, match="covariance_matrix"):
            T.distributions.MultivariateNormal(T.tensor(loc), covariance_matrix=T.tensor(bad))
