"""Every family's log_prob, cdf, icdf, entropy, mean, mode, variance and stddev against torch.distributions in
float64, with broadcast parameter shapes; gradients in the parameters (and the value) under a random upstream
gradient. Tolerances are tight; where torch's trigamma (only ~5e-10 accurate) enters a gradient they are 1e-8."""
from __future__ import annotations

import numpy as np
import pytest
from dist_helpers import compare

RNG = np.random.default_rng(7)
POS = np.abs(RNG.standard_normal((3, 4))) + 0.5
POS4 = np.abs(RNG.standard_normal(4)) + 0.5  # broadcasts against (3, 4)
LOC = RNG.standard_normal((3, 4))
REAL = RNG.standard_normal((2, 3, 4)) * 2
NONNEG = np.abs(RNG.standard_normal((2, 3, 4))) + 0.05
UNIT = RNG.uniform(0.02, 0.98, (2, 3, 4))
PROB = RNG.uniform(0.05, 0.95, (3, 4))
COUNT = RNG.integers(0, 6, (2, 3, 4)).astype(np.float64)
SIMPLEX = RNG.dirichlet(np.ones(4), (2, 3))
LOGITS = RNG.standard_normal((3, 4))
ONE_HOT = np.eye(4)[RNG.integers(0, 4, (2, 3))]
MN_COUNTS = np.stack([RNG.multinomial(7, np.full(4, 0.25), 3) for _ in range(2)]).astype(np.float64)
ANGLE = RNG.uniform(-np.pi, np.pi, (2, 3, 4))
TEMP = np.array(0.7)

# name: (make(D, T, *params), params, value, methods, rtol)
FAMILIES = {
    "Gamma": (lambda D, T, a, b: D.Gamma(a, b), (POS, POS4), NONNEG,
              ("log_prob", "entropy", "mean", "mode", "variance", "stddev"), 1e-8),
    # gammainc has no derivative in the concentration (torch's neither): only the rate and the value carry one.
    "Gamma_cdf": (lambda D, T, a, b: D.Gamma(a.detach(), b), (POS, POS4), NONNEG, ("cdf",), 1e-9),
    "Chi2": (lambda D, T, k: D.Chi2(k), (POS * 3,), NONNEG, ("log_prob", "entropy", "mean", "mode", "variance"),
             1e-8),
    "Chi2_cdf": (lambda D, T, k: D.Chi2(k.detach()), (POS * 3,), NONNEG, ("cdf",), 1e-9),
    "Beta": (lambda D, T, a, b: D.Beta(a, b), (POS, POS4 + 1), UNIT,
             ("log_prob", "entropy", "mean", "mode", "variance", "stddev"), 1e-8),
    "Dirichlet": (lambda D, T, a: D.Dirichlet(a), (POS + 0.5,), SIMPLEX,
                  ("log_prob", "entropy", "mean", "mode", "variance"), 1e-8),
    "Exponential": (lambda D, T, r: D.Exponential(r), (POS,), NONNEG,
                    ("log_prob", "cdf", "icdf", "entropy", "mean", "mode", "variance", "stddev"), 1e-9),
    "Laplace": (lambda D, T, m, s: D.Laplace(m, s), (LOC, POS4), REAL,
                ("log_prob", "cdf", "icdf", "entropy", "mean", "mode", "variance", "stddev"), 1e-9),
    "LogNormal": (lambda D, T, m, s: D.LogNormal(m, s), (LOC, POS4), NONNEG,
                  ("log_prob", "cdf", "icdf", "entropy", "mean", "mode", "variance"), 1e-9),
    "StudentT": (lambda D, T, df, m, s: D.StudentT(df + 2, m, s), (POS, LOC, POS4), REAL,
                 ("log_prob", "entropy", "mean", "mode", "variance"), 1e-8),
    "StudentT_low_df": (lambda D, T, df, m, s: D.StudentT(df, m, s), (POS * 1.5, LOC, POS4), REAL,
                        ("log_prob", "mean", "variance"), 1e-8),
    "Cauchy": (lambda D, T, m, s: D.Cauchy(m, s), (LOC, POS4), REAL,
               ("log_prob", "cdf", "icdf", "entropy", "mean", "mode", "variance"), 1e-9),
    "HalfNormal": (lambda D, T, s: D.HalfNormal(s), (POS,), NONNEG,
                   ("log_prob", "cdf", "icdf", "entropy", "mean", "mode", "variance"), 1e-9),
    "HalfCauchy": (lambda D, T, s: D.HalfCauchy(s), (POS,), NONNEG,
                   ("log_prob", "cdf", "icdf", "entropy", "mean", "mode", "variance"), 1e-9),
    "Gumbel": (lambda D, T, m, s: D.Gumbel(m, s), (LOC, POS4), REAL,
               ("log_prob", "cdf", "icdf", "entropy", "mean", "mode", "variance", "stddev"), 1e-9),
    "VonMises": (lambda D, T, m, k: D.VonMises(m, k), (LOC, POS * 3), ANGLE,
                 ("log_prob", "mean", "mode", "variance"), 1e-9),
    "Normal": (lambda D, T, m, s: D.Normal(m, s), (LOC, POS4), REAL,
               ("log_prob", "cdf", "icdf", "entropy", "mean", "mode", "variance", "stddev"), 1e-9),
    "Poisson": (lambda D, T, r: D.Poisson(r), (POS * 2,), COUNT, ("log_prob", "mean", "mode", "variance"), 1e-9),
    "Binomial_probs": (lambda D, T, p: D.Binomial(5, probs=p), (PROB,), COUNT,
                       ("log_prob", "entropy", "mean", "mode", "variance"), 1e-9),
    "Binomial_logits": (lambda D, T, n, lg: D.Binomial(n, logits=lg), (np.full((3, 4), 6.0), LOGITS), COUNT,
                        ("log_prob", "mean", "variance"), 1e-9),
    "Geometric_probs": (lambda D, T, p: D.Geometric(probs=p), (PROB,), COUNT,
                        ("log_prob", "entropy", "mean", "mode", "variance"), 1e-9),
    "Geometric_logits": (lambda D, T, lg: D.Geometric(logits=lg), (LOGITS,), COUNT,
                         ("log_prob", "entropy", "mean", "variance"), 1e-9),
    "OneHotCategorical": (lambda D, T, lg: D.OneHotCategorical(logits=lg), (LOGITS,), ONE_HOT,
                          ("log_prob", "entropy", "mean", "mode", "variance"), 1e-9),
    "Multinomial": (lambda D, T, p: D.Multinomial(7, probs=p), (PROB,), MN_COUNTS,
                    ("log_prob", "entropy", "mean", "variance"), 1e-9),
    "RelaxedBernoulli": (lambda D, T, t, p: D.RelaxedBernoulli(t, probs=p), (TEMP, PROB), UNIT, ("log_prob",),
                         1e-9),
    "RelaxedOneHotCategorical": (lambda D, T, t, lg: D.RelaxedOneHotCategorical(t, logits=lg), (TEMP, LOGITS),
                                 SIMPLEX, ("log_prob",), 1e-9),
    "LowRankMultivariateNormal": (lambda D, T, m, w, d: D.LowRankMultivariateNormal(m, w.reshape(3, 4, 1) * 0.5, d),
                                  (LOC, LOC, POS4), REAL,
                                  ("log_prob", "entropy", "mean", "variance"), 1e-9),
    "MixtureSameFamily": (lambda D, T, lg, m, s: D.MixtureSameFamily(D.Categorical(logits=lg), D.Normal(m, s)),
                          (LOGITS, LOC, POS4), REAL[..., 0], ("log_prob", "cdf", "mean", "variance"), 1e-9),
}

CASES = [(family, method) for family, spec in FAMILIES.items() for method in spec[3]]


def _call(make, method, value_index):
    def fn(D, T, *args):
        d = make(D, T, *args[:value_index])
        if method in ("log_prob", "cdf"):
            return getattr(d, method)(args[value_index])
        if method == "icdf":
            return d.icdf(T.sigmoid(args[value_index]))  # probabilities in (0, 1), still differentiable
        if method == "entropy":
            return d.entropy()
        return getattr(d, method)

    return fn


@pytest.mark.parametrize("family,method", CASES)
def test_family_matches_torch(family, method):
    make, params, value, _, rtol = FAMILIES[family]
    arrays = params + (value,)
    if method == "icdf":
        arrays = params + (REAL,) if family != "MixtureSameFamily" else arrays
    compare(_call(make, method, len(params)), *arrays, rtol=rtol, atol=1e-10)


def test_cdf_and_icdf_are_compared_wherever_torch_has_them():
    import torch

    import torch.distributions as TD

    covered = {}
    for family, (_, _, _, methods, _) in FAMILIES.items():
        covered.setdefault(family.split("_")[0], set()).update(methods)
    for family, (make, params, value, _, _) in FAMILIES.items():
        d = make(TD, torch, *(torch.tensor(p) for p in params))
        for method, arg in (("cdf", torch.tensor(value)), ("icdf", torch.full(tuple(value.shape), 0.3))):
            try:
                getattr(d, method)(arg)
            except NotImplementedError:
                continue
            assert method in covered[family.split("_")[0]], (family, method)


def test_scalar_parameters_and_values():
    compare(lambda D, T, x: D.Gamma(2.0, 3.0).log_prob(x) + D.Laplace(0.5, 2.0).cdf(x), np.array(0.7))
    compare(lambda D, T, x: D.Beta(2.0, 0.5).log_prob(x), np.array(0.3))
    # Python-number parameters are float32 tensors: log(1.5) is rounded to float32 by NumPy and by ATen, which may
    # round it differently (an ulp on some CPUs), so this case gets float32's tolerance
    compare(lambda D, T, x: D.StudentT(3.0).log_prob(x) + D.Exponential(1.5).log_prob(x.abs()), np.array(-0.4),
            rtol=1e-6)


def test_float32_parameters_stay_float32():
    import jitorch
    import jitorch.distributions as JD

    a = jitorch.tensor([1.5, 2.5])
    for d in (JD.Gamma(a, a), JD.Beta(a, a), JD.Dirichlet(a), JD.StudentT(a), JD.Laplace(a, a), JD.Exponential(a)):
        x = d.sample((3,))
        assert x.dtype == jitorch.float32
        assert d.log_prob(x).dtype == jitorch.float32
