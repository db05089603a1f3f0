"""The families added after the first set (ContinuousBernoulli, FisherSnedecor, GeneralizedPareto, InverseGamma,
Kumaraswamy, LKJCholesky, LogisticNormal, NegativeBinomial, Pareto, Weibull, Wishart): log_prob, cdf, icdf, entropy
and the moments against torch.distributions in float64 with broadcast batched parameters, and the gradients in the
parameters and the value under a random upstream gradient (``dist_helpers.compare``); then float32."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from dist_helpers import compare

import jitorch
import jitorch.distributions as JD
import torch.distributions as TD

RNG = np.random.default_rng(11)
POS = np.abs(RNG.standard_normal((3, 4))) + 0.5
POS4 = np.abs(RNG.standard_normal(4)) + 0.5
LOC = RNG.standard_normal((3, 4))
NONNEG = np.abs(RNG.standard_normal((2, 3, 4))) + 0.05
UNIT = RNG.uniform(0.02, 0.98, (2, 3, 4))
REAL = RNG.standard_normal((2, 3, 4))
# Both sides of ContinuousBernoulli's Taylor region (0.499, 0.501) and its upper edge; right below 0.499 the closed
# forms cancel catastrophically (torch's own values carry ~1e-4 relative error there), so no point sits on that edge.
CB_PROBS = np.array([[0.05, 0.3, 0.4995, 0.5], [0.5005, 0.501, 0.7, 0.97], [0.49, 0.2, 0.8, 0.5001]])
COUNT = RNG.integers(0, 8, (2, 3, 4)).astype(np.float64)
SIMPLEX5 = RNG.dirichlet(np.ones(5), (2, 3))
CONC = np.array([[-0.4, -0.1, 0.0, 0.2], [0.3, 0.45, 0.6, 1.2], [0.0, 0.1, -0.3, 0.8]])

MOMENTS = ("entropy", "mean", "mode", "variance")


def _method(make, method):
    """``method`` of ``make(D, T, *params)``; the last array is the value where the method takes one (icdf
    gets it through a sigmoid: probabilities, still differentiable)."""
    def fn(D, T, *args):
        if method in ("log_prob", "cdf", "icdf"):
            d, value = make(D, T, *args[:-1]), args[-1]
            return getattr(d, method)(T.sigmoid(value) if method == "icdf" else value)
        d = make(D, T, *args)
        return d.entropy() if method == "entropy" else getattr(d, method)
    return fn


def _shifted(D, T, s, a, x):
    return D.Pareto(s, a).log_prob(s + x)


# name: (make, params, value for log_prob/cdf, methods)
FAMILIES = {
    "Pareto": (lambda D, T, s, a: D.Pareto(s, a), (POS, POS4 + 2.5), None, ("icdf",) + MOMENTS),
    "Pareto_low_alpha": (lambda D, T, s, a: D.Pareto(s, a), (POS, POS4 * 0.5 + 0.5), None, ("mean", "variance")),
    "Weibull": (lambda D, T, s, k: D.Weibull(s, k), (POS, POS4 + 0.5), NONNEG, ("log_prob", "cdf", "icdf") + MOMENTS),
    "InverseGamma": (lambda D, T, a, b: D.InverseGamma(a + 2, b), (POS, POS4), NONNEG, ("log_prob",) + MOMENTS),
    "InverseGamma_low": (lambda D, T, a, b: D.InverseGamma(a, b), (POS, POS4), None, ("mean", "variance")),
    # gammainc has no derivative in the concentration (torch's neither).
    "InverseGamma_cdf": (lambda D, T, a, b: D.InverseGamma(a.detach(), b), (POS, POS4), NONNEG, ("cdf",)),
    "Kumaraswamy": (lambda D, T, a, b: D.Kumaraswamy(a + 0.6, b + 0.6), (POS, POS4), UNIT,
                    ("log_prob", "cdf", "icdf") + MOMENTS),
    "Kumaraswamy_low": (lambda D, T, a, b: D.Kumaraswamy(a * 0.3, b), (POS, POS4), UNIT, ("log_prob", "mode")),
    "LogisticNormal": (lambda D, T, m, s: D.LogisticNormal(m, s), (LOC, POS4), SIMPLEX5, ("log_prob",)),
    "FisherSnedecor": (lambda D, T, a, b: D.FisherSnedecor(a * 4, b * 5), (POS, POS4), NONNEG,
                       ("log_prob", "mean", "mode", "variance")),
    "FisherSnedecor_low": (lambda D, T, a, b: D.FisherSnedecor(a, b * 2), (POS, POS4), None,
                           ("mean", "mode", "variance")),
    "NegativeBinomial_probs": (lambda D, T, n, p: D.NegativeBinomial(n, probs=p), (POS * 3, UNIT[0] * 0.9), COUNT,
                               ("log_prob", "mean", "mode", "variance")),
    "NegativeBinomial_logits": (lambda D, T, n, lg: D.NegativeBinomial(n, logits=lg), (POS * 3, LOC), COUNT,
                                ("log_prob", "mean", "mode", "variance")),
    "ContinuousBernoulli_probs": (lambda D, T, p: D.ContinuousBernoulli(probs=p), (CB_PROBS,), UNIT,
                                  ("log_prob", "cdf", "icdf", "entropy", "mean", "variance", "stddev")),
    "ContinuousBernoulli_logits": (lambda D, T, lg: D.ContinuousBernoulli(logits=lg), (LOC * 3,), UNIT,
                                   ("log_prob", "cdf", "icdf", "entropy", "mean", "variance")),
}
CASES = [(name, m) for name, spec in FAMILIES.items() for m in spec[3]]


@pytest.mark.parametrize("family,method", CASES)
def test_family_matches_torch(family, method):
    make, params, value, _ = FAMILIES[family]
    arrays = params + ((REAL if method == "icdf" else value),) if method in ("log_prob", "cdf", "icdf") else params
    compare(_method(make, method), *arrays, rtol=1e-8, atol=1e-10)


def test_pareto_log_prob_and_cdf_on_its_support():
    compare(_shifted, POS, POS4 + 0.5, NONNEG)
    compare(lambda D, T, s, a, x: D.Pareto(s, a).cdf(s + x), POS, POS4 + 0.5, NONNEG)


@pytest.fixture
def torch_float64_default():
    # torch's GeneralizedPareto compares with a default-dtype 0 (``torch.tensor(0.0)``), which fails for float64
    # parameters unless that default is float64; jitorch's works either way.
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.mark.parametrize("method", ["log_prob", "cdf", "icdf", "entropy", "mean", "mode", "variance"])
def test_generalized_pareto_matches_torch(method, torch_float64_default):
    def make(D, T, m, s, c):
        return D.GeneralizedPareto(m, s, c)
    # Values inside the support of every member (the bounded ones end at loc - scale / concentration >= loc + 0.6).
    x = LOC + NONNEG * 0.2
    arrays = (LOC, POS4, CONC) + ((REAL if method == "icdf" else x),) if method in ("log_prob", "cdf", "icdf") else (
        LOC, POS4, CONC)
    compare(_method(make, method), *arrays, rtol=1e-8, atol=1e-10)


def test_lkj_cholesky_log_prob_matches_torch():
    torch.manual_seed(0)
    for dim, conc in ((2, POS4), (3, POS4 + 1.0), (5, POS[0] * 0.5)):
        value = TD.LKJCholesky(dim, torch.tensor(conc)).sample((2,)).numpy()
        compare(lambda D, T, c, v: D.LKJCholesky(dim, c).log_prob(v), conc, value)


def _spd(n, batch=()):
    a = RNG.standard_normal(batch + (n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


@pytest.mark.parametrize("param", ["covariance_matrix", "precision_matrix", "scale_tril"])
@pytest.mark.parametrize("method", ["log_prob", "entropy", "mean", "mode", "variance"])
def test_wishart_matches_torch(param, method):
    cov = _spd(3, (2,))
    mat = np.linalg.cholesky(cov) if param == "scale_tril" else cov
    df = np.array([4.5, 7.0])
    value = _spd(3, (4, 2))

    def fn(D, T, df, m, v=None):
        d = D.Wishart(df, **{param: m})
        if method == "log_prob":
            return d.log_prob(v)
        return d.entropy() if method == "entropy" else getattr(d, method)
    arrays = (df, mat, value) if method == "log_prob" else (df, mat)
    compare(fn, *arrays, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("name", ["Pareto", "Weibull", "Kumaraswamy", "FisherSnedecor", "ContinuousBernoulli_probs",
                                  "NegativeBinomial_logits", "InverseGamma"])
def test_float32_matches_torch(name):
    make, params, value, methods = FAMILIES[name]
    jt = [jitorch.tensor(p, dtype=jitorch.float32) for p in params]
    th = [torch.tensor(p, dtype=torch.float32) for p in params]
    dj, dt = make(JD, jitorch, *jt), make(TD, torch, *th)
    for m in methods:
        if m in ("log_prob", "cdf", "icdf"):
            v = value if m != "icdf" else UNIT
            a = getattr(dj, m)(jitorch.tensor(v, dtype=jitorch.float32))
            b = getattr(dt, m)(torch.tensor(v, dtype=torch.float32))
        else:
            a = dj.entropy() if m == "entropy" else getattr(dj, m)
            b = dt.entropy() if m == "entropy" else getattr(dt, m)
        assert a.dtype == jitorch.float32, (name, m, a.dtype)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-5, atol=2e-6, err_msg=f"{name}.{m}")
