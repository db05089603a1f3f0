"""Sampling, shapes and validation of the later families against torch.distributions: batch/event shapes, flags,
support and constraints, seeded sample moments within a few standard errors of torch's analytic moments (or of torch's
own samples), reparameterized samples carrying gradients, expand, float32 samples and validate_args errors."""
from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest
import torch

import jitorch
from helpers import assert_sample_moments
import jitorch.distributions as JD
import torch.distributions as TD


def _make(D, T, dtype=None):
    def t(x):
        return T.tensor(x, dtype=dtype or T.float64)
    return {
        "ContinuousBernoulli": D.ContinuousBernoulli(t([0.1, 0.5, 0.8])),
        "FisherSnedecor": D.FisherSnedecor(t([5.0, 12.0]), t([12.0, 20.0])),
        "GeneralizedPareto": D.GeneralizedPareto(t([0.0, 1.0, -1.0]), t([1.0, 2.0, 0.5]), t([0.2, 0.0, -0.3])),
        "InverseGamma": D.InverseGamma(t([5.0, 8.0]), t([1.0, 3.0])),
        "Kumaraswamy": D.Kumaraswamy(t([0.5, 2.0, 5.0]), t([0.7, 3.0, 1.5])),
        "LKJCholesky": D.LKJCholesky(3, t([0.5, 2.0])),
        "LogisticNormal": D.LogisticNormal(t([[0.0, 1.0, -1.0]]), t([[1.0, 0.5, 0.3]])),
        "NegativeBinomial": D.NegativeBinomial(t([3.0, 10.0, 0.5]), probs=t([0.3, 0.6, 0.2])),
        "Pareto": D.Pareto(t([1.0, 0.5]), t([5.0, 7.0])),
        "Weibull": D.Weibull(t([1.0, 2.0]), t([0.8, 3.0])),
        "Wishart": D.Wishart(t([5.0, 8.0]), covariance_matrix=t([[2.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 1.5]])),
    }


# torch 2.13 tests its Wishart singularity mask the wrong way round and warns on every healthy draw.
pytestmark = pytest.mark.filterwarnings("ignore:Singular sample detected")

J, T = _make(JD, jitorch), _make(TD, torch)
NAMES = sorted(J)


@contextlib.contextmanager
def _torch_float64():
    # torch's GeneralizedPareto compares its float64 parameters with a default-dtype 0 and raises unless that default
    # is float64 (jitorch's compares with a zero of the parameter's dtype).
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@pytest.mark.parametrize("name", NAMES)
def test_shapes_flags_and_support_match_torch(name):
    j, t = J[name], T[name]
    assert tuple(j.batch_shape) == tuple(t.batch_shape) and tuple(j.event_shape) == tuple(t.event_shape)
    assert j.has_rsample == t.has_rsample and j.has_enumerate_support == t.has_enumerate_support
    assert repr(j.support).split("(")[0] == repr(t.support).split("(")[0]
    assert j.support.event_dim == t.support.event_dim and j.support.is_discrete == t.support.is_discrete
    assert sorted(j.arg_constraints) == sorted(t.arg_constraints)
    jitorch.manual_seed(0)
    s = j.sample((2, 3))
    assert tuple(s.shape) == tuple(t.sample((2, 3)).shape) and s.dtype == jitorch.float64
    assert bool(j.support.check(s).all())
    with _torch_float64():
        lp_j, lp_t = j.log_prob(s), t.log_prob(torch.tensor(s.numpy()))
    assert tuple(lp_j.shape) == tuple(lp_t.shape)
    np.testing.assert_allclose(lp_j.numpy(), lp_t.numpy(), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name", NAMES)
def test_sample_moments(name):
    j, t = J[name], T[name]
    n = 40000
    jitorch.manual_seed(1)
    x = j.sample((n,)).numpy()
    assert_sample_moments(x, t, n, var_rtol=0.08)


def test_discrete_and_constrained_samples():
    jitorch.manual_seed(2)
    nb = J["NegativeBinomial"].sample((2000,)).numpy()
    assert (nb == np.round(nb)).all() and (nb >= 0).all()
    lkj = J["LKJCholesky"].sample((500,))
    corr = (lkj @ lkj.transpose(-1, -2)).numpy()
    np.testing.assert_allclose(np.diagonal(corr, axis1=-2, axis2=-1), 1.0, rtol=1e-12)
    gp = J["GeneralizedPareto"].sample((2000,)).numpy()
    assert (gp[:, 2] <= -1.0 + 0.5 / 0.3 + 1e-12).all()  # bounded above for negative concentration


RSAMPLE = {  # name: (make(D, *params), params); each parameter gets a finite, nonzero gradient through rsample
    "ContinuousBernoulli": (lambda D, p: D.ContinuousBernoulli(p), ([0.2, 0.9],)),
    "FisherSnedecor": (lambda D, a, b: D.FisherSnedecor(a, b), ([3.0, 10.0], [5.0, 8.0])),
    "GeneralizedPareto": (lambda D, m, s, c: D.GeneralizedPareto(m, s, c), ([0.0, 1.0], [1.0, 2.0], [0.3, -0.2])),
    "InverseGamma": (lambda D, a, b: D.InverseGamma(a, b), ([2.0, 4.0], [1.0, 3.0])),
    "Kumaraswamy": (lambda D, a, b: D.Kumaraswamy(a, b), ([0.5, 2.0], [3.0, 1.5])),
    "LogisticNormal": (lambda D, m, s: D.LogisticNormal(m, s), ([0.0, 1.0], [1.0, 0.5])),
    "Pareto": (lambda D, s, a: D.Pareto(s, a), ([1.0, 2.0], [3.0, 4.0])),
    "Weibull": (lambda D, s, k: D.Weibull(s, k), ([1.0, 2.0], [0.8, 3.0])),
    "Wishart": (lambda D, df, c: D.Wishart(df, covariance_matrix=c), (4.0, [[2.0, 0.5], [0.5, 1.0]])),
}


@pytest.mark.parametrize("name", sorted(RSAMPLE))
def test_rsample_is_differentiable(name):
    make, params = RSAMPLE[name]
    ps = [jitorch.tensor(p, dtype=jitorch.float64, requires_grad=True) for p in params]
    d = make(JD, *ps)
    jitorch.manual_seed(3)
    (d.rsample((50,)) ** 2).sum().backward()
    for p in ps:
        assert p.grad is not None and np.isfinite(p.grad.numpy()).all() and (p.grad.numpy() != 0).any(), name


@pytest.mark.parametrize("name", NAMES)
def test_expand_matches_torch(name):
    j, t = J[name], T[name]
    shape = (2,) + tuple(j.batch_shape)
    je, te = j.expand(shape), t.expand(shape)
    assert type(je) is type(j) and tuple(je.batch_shape) == tuple(te.batch_shape)
    jitorch.manual_seed(4)
    s = je.sample()
    assert tuple(s.shape) == tuple(te.sample().shape)
    with _torch_float64():
        expected = te.log_prob(torch.tensor(s.numpy())).numpy()
    np.testing.assert_allclose(je.log_prob(s).numpy(), expected, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name", NAMES)
def test_float32_samples(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = _make(JD, jitorch, jitorch.float32)[name]
    jitorch.manual_seed(5)
    s = d.sample((4,))
    assert s.dtype == jitorch.float32 and d.log_prob(s).dtype == jitorch.float32
    assert np.isfinite(d.log_prob(s).numpy()).all()


def _t(x):
    return jitorch.tensor(x, dtype=jitorch.float64)


@pytest.mark.parametrize("build", [
    lambda: JD.Pareto(_t([1.0, -1.0]), _t([1.0, 1.0]), validate_args=True),
    lambda: JD.Weibull(_t([1.0]), _t([0.0]), validate_args=True),
    lambda: JD.FisherSnedecor(_t([-1.0]), _t([1.0]), validate_args=True),
    lambda: JD.GeneralizedPareto(_t([0.0]), _t([-1.0]), _t([0.1]), validate_args=True),
    lambda: JD.InverseGamma(_t([0.0]), _t([1.0]), validate_args=True),
    lambda: JD.Kumaraswamy(_t([1.0]), _t([-2.0]), validate_args=True),
    lambda: JD.NegativeBinomial(_t([-1.0]), probs=_t([0.5]), validate_args=True),
    lambda: JD.NegativeBinomial(_t([1.0]), probs=_t([1.0]), validate_args=True),
    lambda: JD.ContinuousBernoulli(_t([1.5]), validate_args=True),
    lambda: JD.LKJCholesky(3, _t([-1.0]), validate_args=True),
    lambda: JD.LKJCholesky(1),
    lambda: JD.LogisticNormal(_t([0.0]), _t([-1.0]), validate_args=True),
    lambda: JD.Wishart(_t(1.5), covariance_matrix=jitorch.eye(3, dtype=jitorch.float64)),
    lambda: JD.NegativeBinomial(_t([1.0])),
])
def test_invalid_parameters_raise_value_error(build):
    with pytest.raises(ValueError):
        build()


@pytest.mark.parametrize("name,value", [("Pareto", [0.5, 3.0]), ("Weibull", [-1.0, 1.0]),
                                        ("Kumaraswamy", [0.5, 1.5, 0.2]), ("NegativeBinomial", [1.5, 2.0, 0.0]),
                                        ("ContinuousBernoulli", [0.5, 1.2, 0.1]),
                                        ("GeneralizedPareto", [-1.0, 1.0, 0.0])])
def test_values_outside_the_support_raise(name, value):
    d = J[name]
    with pytest.raises(ValueError, match="support"):
        d.log_prob(_t(value))


def test_wishart_rejects_more_than_one_matrix_and_warns_on_low_df():
    eye = jitorch.eye(2, dtype=jitorch.float64)
    with pytest.raises(AssertionError, match="Exactly one"):
        JD.Wishart(_t(3.0), covariance_matrix=eye, scale_tril=eye)
    with pytest.warns(UserWarning, match="Low df"):
        JD.Wishart(_t(1.5), covariance_matrix=eye)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a healthy draw warns of nothing (torch 2.13 warns on every draw)
        JD.Wishart(_t(5.0), covariance_matrix=eye).rsample((3,))
