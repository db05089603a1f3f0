"""Sampling, shapes and validation for every family against torch.distributions: batch/event shapes, support and
flags, seeded sample moments within a few standard errors of torch's analytic moments (or of torch's own samples
where it has none), reparameterized samples carrying gradients, expand, enumerate_support, validate_args errors,
and the submodules torch code imports by path."""
from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch

import jitorch
from helpers import assert_sample_moments
import jitorch.distributions as JD
import torch.distributions as TD


def _make(D, T):
    t = lambda x: T.tensor(x, dtype=T.float64)  # noqa: E731
    return {
        "Gamma": D.Gamma(t([0.3, 1.0, 4.0, 50.0]), t([1.0, 2.0, 0.5, 3.0])),
        "Chi2": D.Chi2(t([1.0, 3.0, 10.0])),
        "Beta": D.Beta(t([0.5, 2.0, 8.0]), t([0.5, 3.0, 1.5])),
        "Dirichlet": D.Dirichlet(t([[0.5, 1.0, 2.0], [5.0, 5.0, 10.0]])),
        "Exponential": D.Exponential(t([0.5, 2.0])),
        "Laplace": D.Laplace(t([0.0, 2.0]), t([1.0, 0.5])),
        "LogNormal": D.LogNormal(t([0.0, 0.5]), t([0.5, 0.25])),
        "StudentT": D.StudentT(t([5.0, 10.0]), t([1.0, -1.0]), t([1.0, 2.0])),
        "Cauchy": D.Cauchy(t([0.0, 1.0]), t([1.0, 0.5])),
        "HalfNormal": D.HalfNormal(t([1.0, 3.0])),
        "HalfCauchy": D.HalfCauchy(t([1.0, 3.0])),
        "Gumbel": D.Gumbel(t([0.0, 1.0]), t([1.0, 2.0])),
        "VonMises": D.VonMises(t([0.0, 1.0, -2.5]), t([0.5, 4.0, 30.0])),
        "Poisson": D.Poisson(t([0.5, 4.0, 30.0])),
        "Binomial": D.Binomial(t([3.0, 10.0, 100.0, 40.0, 0.0]), probs=t([0.3, 0.5, 0.2, 0.9, 0.5])),
        "Geometric": D.Geometric(t([0.2, 0.7])),
        "OneHotCategorical": D.OneHotCategorical(probs=t([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])),
        "Multinomial": D.Multinomial(10, probs=t([0.2, 0.3, 0.5])),
        "RelaxedBernoulli": D.RelaxedBernoulli(t(0.5), probs=t([0.2, 0.7])),
        "RelaxedOneHotCategorical": D.RelaxedOneHotCategorical(t(0.5), probs=t([0.2, 0.3, 0.5])),
        "LowRankMultivariateNormal": D.LowRankMultivariateNormal(t([1.0, 0.0, -1.0]), t([[1.0], [0.5], [0.0]]),
                                                                 t([1.0, 2.0, 0.5])),
        "MixtureSameFamily": D.MixtureSameFamily(D.Categorical(probs=t([0.3, 0.7])),
                                                 D.Normal(t([-2.0, 2.0]), t([1.0, 0.5]))),
        "TransformedDistribution": D.TransformedDistribution(D.Normal(t([0.0, 1.0]), t([1.0, 0.3])),
                                                             [D.TanhTransform(), D.AffineTransform(2.0, 3.0)]),
        "Independent": D.Independent(D.Gamma(t([[1.0, 2.0], [3.0, 4.0]]), t(1.0)), 1),
    }


J, T = _make(JD, jitorch), _make(TD, torch)
NAMES = sorted(J)
HEAVY_TAILED = ("Cauchy", "HalfCauchy")  # no mean or variance: compared by quartiles


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
    assert tuple(s.shape) == tuple(t.sample((2, 3)).shape)
    assert tuple(j.log_prob(s).shape) == tuple(t.log_prob(torch.tensor(s.numpy())).shape)
    assert bool(j.support.check(s).all())
    np.testing.assert_allclose(j.log_prob(s).numpy(), t.log_prob(torch.tensor(s.numpy())).numpy(), rtol=1e-9,
                               atol=1e-10)


def _circular(x, loc):
    return np.stack([np.cos(x - loc).mean(0), np.sin(x - loc).mean(0)])


@pytest.mark.parametrize("name", NAMES)
def test_sample_moments(name):
    j, t = J[name], T[name]
    n = 40000
    jitorch.manual_seed(1)
    x = j.sample((n,)).numpy()
    if name == "VonMises":  # the circular mean resultant: E[cos(x - loc)] = 1 - variance, E[sin(x - loc)] = 0
        expected = np.stack([1 - t.variance.numpy(), np.zeros(3)])
        np.testing.assert_allclose(_circular(x, j.loc.numpy()), expected, atol=5 / np.sqrt(n))
        return
    if name in HEAVY_TAILED:
        p = torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64).reshape(3, 1)
        q = t.icdf(p)
        # A sample p-quantile has standard error sqrt(p (1 - p) / n) / density(quantile).
        se = (p * (1 - p) / n).sqrt().numpy() / t.log_prob(q).exp().numpy()
        assert np.all(np.abs(np.quantile(x, [0.25, 0.5, 0.75], axis=0) - q.numpy()) <= 6 * se)
        return
    assert_sample_moments(x, t, n, var_rtol=0.06)


def test_discrete_samples_take_support_values():
    jitorch.manual_seed(2)
    b = J["Binomial"].sample((5000,)).numpy()
    assert (b == np.round(b)).all() and (b >= 0).all() and (b <= J["Binomial"].total_count.numpy()).all()
    assert (b[:, 4] == 0).all()  # total_count 0
    p = J["Poisson"].sample((1000,)).numpy()
    assert (p == np.round(p)).all() and (p >= 0).all()
    m = J["Multinomial"].sample((1000,)).numpy()
    assert (m.sum(-1) == 10).all()
    oh = J["OneHotCategorical"].sample((1000,)).numpy()
    assert (oh.sum(-1) == 1).all() and set(np.unique(oh)) == {0.0, 1.0}


def test_extreme_binomial_and_poisson_parameters():
    jitorch.manual_seed(3)
    b = JD.Binomial(jitorch.tensor([1e6, 50.0, 7.0]), probs=jitorch.tensor([0.5, 1.0, 0.0])).sample((200,)).numpy()
    assert abs(b[:, 0].mean() - 5e5) < 6 * np.sqrt(2.5e5 / 200)
    assert (b[:, 1] == 50).all() and (b[:, 2] == 0).all()


RSAMPLE = {  # name: (make(D, *params), params); every parameter must get a finite gradient through rsample
    "Gamma": (lambda D, a, b: D.Gamma(a, b), ([0.3, 4.0], [1.0, 2.0])),
    "Chi2": (lambda D, k: D.Chi2(k), ([1.0, 7.0],)),
    "Beta": (lambda D, a, b: D.Beta(a, b), ([0.5, 3.0], [2.0, 0.7])),
    "Dirichlet": (lambda D, c: D.Dirichlet(c), ([0.5, 1.0, 4.0],)),
    "Exponential": (lambda D, r: D.Exponential(r), ([0.5, 2.0],)),
    "Laplace": (lambda D, m, s: D.Laplace(m, s), ([0.0, 1.0], [1.0, 2.0])),
    "LogNormal": (lambda D, m, s: D.LogNormal(m, s), ([0.0, 1.0], [1.0, 2.0])),
    "StudentT": (lambda D, df, m, s: D.StudentT(df, m, s), ([3.0, 9.0], [0.0, 1.0], [1.0, 2.0])),
    "Cauchy": (lambda D, m, s: D.Cauchy(m, s), ([0.0, 1.0], [1.0, 2.0])),
    "HalfNormal": (lambda D, s: D.HalfNormal(s), ([1.0, 2.0],)),
    "HalfCauchy": (lambda D, s: D.HalfCauchy(s), ([1.0, 2.0],)),
    "RelaxedBernoulli": (lambda D, t, p: D.RelaxedBernoulli(t, probs=p), (0.5, [0.2, 0.9])),
    "RelaxedOneHotCategorical": (lambda D, t, lg: D.RelaxedOneHotCategorical(t, logits=lg), (0.5, [0.2, 0.9, -1.0])),
    "LowRankMultivariateNormal": (lambda D, m, w, d: D.LowRankMultivariateNormal(m, w, d),
                                  ([0.0, 1.0], [[1.0], [0.5]], [1.0, 2.0])),
    "OneHotCategoricalStraightThrough": (lambda D, p: D.OneHotCategoricalStraightThrough(probs=p), ([0.2, 0.8],)),
}


@pytest.mark.parametrize("name", sorted(RSAMPLE))
def test_rsample_carries_gradients_to_every_parameter(name):
    make, params = RSAMPLE[name]
    ps = [jitorch.tensor(p, dtype=jitorch.float64, requires_grad=True) for p in params]
    d = make(JD, *ps)
    assert d.has_rsample == make(TD, *(torch.tensor(p, dtype=torch.float64) for p in params)).has_rsample
    jitorch.manual_seed(4)
    x = d.rsample((64,))
    assert x.requires_grad and not d.sample((2,)).requires_grad
    (x * jitorch.randn(x.shape, dtype=jitorch.float64)).sum().backward()
    for p in ps:
        assert p.grad is not None and np.isfinite(p.grad.numpy()).all() and np.abs(p.grad.numpy()).sum() > 0


@pytest.mark.parametrize("name", NAMES)
def test_expand_matches_torch(name):
    j, t = J[name].expand((4,) + tuple(J[name].batch_shape)), T[name].expand((4,) + tuple(T[name].batch_shape))
    assert tuple(j.batch_shape) == tuple(t.batch_shape) and tuple(j.event_shape) == tuple(t.event_shape)
    torch.manual_seed(0)
    value = t.sample((2,))
    np.testing.assert_allclose(j.log_prob(jitorch.tensor(value.numpy())).numpy(), t.log_prob(value).numpy(),
                               rtol=1e-9, atol=1e-10)
    assert tuple(j.sample((3,)).shape) == tuple(t.sample((3,)).shape)


@pytest.mark.parametrize("make", [
    lambda D, T: D.Binomial(T.tensor([4.0, 4.0]), probs=T.tensor([0.2, 0.6])),
    lambda D, T: D.OneHotCategorical(logits=T.zeros(2, 3)),
    lambda D, T: D.Independent(D.Bernoulli(T.tensor([0.3, 0.6])), 0),
    lambda D, T: D.Categorical(logits=T.zeros(2, 3)),
])
@pytest.mark.parametrize("expand", [True, False])
def test_enumerate_support_matches_torch(make, expand):
    np.testing.assert_array_equal(make(JD, jitorch).enumerate_support(expand).numpy(),
                                  make(TD, torch).enumerate_support(expand).numpy())


@pytest.mark.parametrize("make", [
    lambda D, T: D.Gamma(T.tensor([1.0]), T.tensor([-1.0])),
    lambda D, T: D.Gamma(T.tensor([0.0]), T.tensor([1.0])),
    lambda D, T: D.Beta(T.tensor([1.0]), T.tensor([-0.5])),
    lambda D, T: D.Dirichlet(T.tensor([1.0, -2.0])),
    lambda D, T: D.Dirichlet(T.tensor(1.0)),
    lambda D, T: D.Exponential(T.tensor([-1.0])),
    lambda D, T: D.Laplace(0.0, -1.0),
    lambda D, T: D.LogNormal(0.0, 0.0),
    lambda D, T: D.StudentT(T.tensor([-1.0])),
    lambda D, T: D.Cauchy(0.0, -2.0),
    lambda D, T: D.HalfNormal(T.tensor([-1.0])),
    lambda D, T: D.Poisson(T.tensor([-1.0])),
    lambda D, T: D.Binomial(T.tensor([2.5]), probs=T.tensor([0.5])),
    lambda D, T: D.Binomial(3, probs=T.tensor([1.5])),
    lambda D, T: D.Binomial(3),
    lambda D, T: D.Geometric(T.tensor([0.0])),
    lambda D, T: D.Geometric(T.tensor([1.5])),
    lambda D, T: D.Multinomial(3, probs=T.tensor([0.5, -0.5])),
    lambda D, T: D.OneHotCategorical(probs=T.tensor([0.5, -0.5])),
    lambda D, T: D.Chi2(T.tensor([-3.0])),
    lambda D, T: D.VonMises(0.0, -1.0),
    lambda D, T: D.LowRankMultivariateNormal(T.zeros(2), T.ones(2, 1), T.tensor([1.0, -1.0])),
    lambda D, T: D.LowRankMultivariateNormal(T.zeros(2), T.ones(3, 1), T.ones(2)),
    lambda D, T: D.MixtureSameFamily(D.Normal(0.0, 1.0), D.Normal(T.zeros(2), 1.0)),
    lambda D, T: D.MixtureSameFamily(D.Categorical(logits=T.zeros(3)), D.Normal(T.zeros(2), 1.0)),
    lambda D, T: D.TransformedDistribution(D.Normal(0.0, 1.0), "exp"),
    lambda D, T: D.Gamma(1.0, 1.0).log_prob(T.tensor(-1.0)),
    lambda D, T: D.Beta(1.0, 1.0).log_prob(T.tensor(1.5)),
    lambda D, T: D.Dirichlet(T.ones(3)).log_prob(T.tensor([0.5, 0.6, 0.1])),
    lambda D, T: D.Dirichlet(T.ones(3)).log_prob(T.tensor([0.5, 0.5])),
    lambda D, T: D.Poisson(2.0).log_prob(T.tensor(1.5)),
    lambda D, T: D.Binomial(3, probs=T.tensor(0.3)).log_prob(T.tensor(4.0)),
    lambda D, T: D.OneHotCategorical(logits=T.zeros(3)).log_prob(T.tensor([1.0, 1.0, 0.0])),
    lambda D, T: D.Multinomial(3, logits=T.zeros(2)).log_prob(T.tensor([3.0, 1.0])),
    lambda D, T: D.HalfNormal(1.0).log_prob(T.tensor(-0.5)),
    lambda D, T: D.LogNormal(0.0, 1.0).log_prob(T.tensor(0.0)),
    lambda D, T: D.RelaxedBernoulli(T.tensor(0.5), probs=T.tensor(0.3)).log_prob(T.tensor(1.5)),
    lambda D, T: D.Exponential(T.ones(3)).log_prob(T.ones(2)),
    lambda D, T: D.Dirichlet(T.ones(2, 3)).log_prob(T.full((3, 3), 1 / 3)),
])
def test_validation_errors_match_torch(make):
    with pytest.raises(ValueError) as t_err:
        make(TD, torch)
    with pytest.raises(ValueError) as j_err:
        make(JD, jitorch)
    assert str(j_err.value).replace("jitorch.", "torch.").split(" (")[0] == str(t_err.value).split(" (")[0]


def test_validate_args_false_and_unvalidated_values():
    assert JD.Gamma(-1.0, 1.0, validate_args=False).concentration.item() == -1.0
    d = JD.Beta(2.0, 2.0, validate_args=False)
    assert math.isnan(d.log_prob(jitorch.tensor(1.5)).item()) == math.isnan(
        TD.Beta(2.0, 2.0, validate_args=False).log_prob(torch.tensor(1.5)).item())


def test_seeded_samplers_are_reproducible():
    for name in ("Gamma", "Beta", "Dirichlet", "Binomial", "VonMises", "StudentT", "Multinomial"):
        jitorch.manual_seed(11)
        a = J[name].sample((50,))
        jitorch.manual_seed(11)
        assert bool((a == J[name].sample((50,))).all()), name


MODULES = ["bernoulli", "beta", "binomial", "categorical", "cauchy", "chi2", "constraint_registry", "constraints",
           "dirichlet", "distribution", "exp_family", "exponential", "gamma", "geometric", "gumbel", "half_cauchy",
           "half_normal", "independent", "kl", "laplace", "log_normal", "lowrank_multivariate_normal",
           "mixture_same_family", "multinomial", "multivariate_normal", "normal", "one_hot_categorical", "poisson",
           "relaxed_bernoulli", "relaxed_categorical", "studentT", "transformed_distribution", "transforms",
           "uniform", "utils", "von_mises"]


@pytest.mark.parametrize("module", MODULES)
def test_submodules_have_torchs_names(module):
    ours = importlib.import_module(f"jitorch.distributions.{module}")
    theirs = importlib.import_module(f"torch.distributions.{module}")
    missing = [name for name in getattr(theirs, "__all__", []) if not hasattr(ours, name)]
    assert not missing, missing


def test_package_exports_every_implemented_family():
    not_ported = {"ContinuousBernoulli", "FisherSnedecor", "GeneralizedPareto", "InverseGamma", "Kumaraswamy",
                  "LKJCholesky", "LogisticNormal", "NegativeBinomial", "Pareto", "Weibull", "Wishart"}
    missing = [name for name in TD.__all__ if not hasattr(JD, name) and name not in not_ported]
    assert not missing, missing
