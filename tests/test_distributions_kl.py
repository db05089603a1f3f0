"""kl_divergence against torch.distributions for every pair in torch's registry whose two families jitorch has:
values (finite or infinite) and parameter gradients; the registry itself, its dispatch and the Bregman fallback."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from dist_helpers import compare

import jitorch
import jitorch.distributions as JD
import torch.distributions as TD
from jitorch.distributions import kl as jkl
from torch.distributions import kl as tkl

R = np.random.default_rng(11)


def _pos(lo=0.5, hi=2.5, shape=(3,)):
    return R.uniform(lo, hi, shape)


def _low_rank(D, T, m, w, d):
    return D.LowRankMultivariateNormal(m, w, d)


def _mvn(D, T, m, a):
    return D.MultivariateNormal(m, scale_tril=T.tril(a, -1) + T.diag_embed(a.diagonal(dim1=-2, dim2=-1).abs() + 0.5))


# family: (make(D, T, *params), params of p, params of q)
FAMILIES = {
    "Bernoulli": (lambda D, T, p: D.Bernoulli(probs=p), (_pos(0.1, 0.9),), (_pos(0.1, 0.9),)),
    "Beta": (lambda D, T, a, b: D.Beta(a, b), (_pos(), _pos()), (_pos(), _pos())),
    "Binomial": (lambda D, T, p: D.Binomial(10, probs=p), (_pos(0.1, 0.9),), (_pos(0.1, 0.9),)),
    "Categorical": (lambda D, T, lg: D.Categorical(logits=lg), (R.standard_normal((3, 4)),),
                    (R.standard_normal((3, 4)),)),
    "Cauchy": (lambda D, T, m, s: D.Cauchy(m, s), (R.standard_normal(3), _pos()), (R.standard_normal(3), _pos())),
    "Dirichlet": (lambda D, T, c: D.Dirichlet(c), (_pos(shape=(3, 4)),), (_pos(shape=(3, 4)),)),
    "Exponential": (lambda D, T, r: D.Exponential(r), (_pos(),), (_pos(),)),
    "Gamma": (lambda D, T, a, b: D.Gamma(a, b), (_pos(), _pos()), (_pos(), _pos())),
    "Geometric": (lambda D, T, p: D.Geometric(probs=p), (_pos(0.1, 0.9),), (_pos(0.1, 0.9),)),
    "Gumbel": (lambda D, T, m, s: D.Gumbel(m, s), (R.standard_normal(3), _pos()), (R.standard_normal(3), _pos())),
    "HalfNormal": (lambda D, T, s: D.HalfNormal(s), (_pos(),), (_pos(),)),
    "Independent": (lambda D, T, m, s: D.Independent(D.Normal(m, s), 1),
                    (R.standard_normal((3, 4)), _pos(shape=(3, 4))), (R.standard_normal((3, 4)), _pos(shape=(4,)))),
    "Laplace": (lambda D, T, m, s: D.Laplace(m, s), (R.standard_normal(3), _pos()), (R.standard_normal(3), _pos())),
    "LowRankMultivariateNormal": (_low_rank, (R.standard_normal((3, 4)), R.standard_normal((3, 4, 2)),
                                              _pos(shape=(3, 4))),
                                  (R.standard_normal(4), R.standard_normal((4, 2)), _pos(shape=(4,)))),
    "MultivariateNormal": (_mvn, (R.standard_normal((3, 4)), R.standard_normal((3, 4, 4))),
                           (R.standard_normal(4), R.standard_normal((4, 4)))),
    "Normal": (lambda D, T, m, s: D.Normal(m, s), (R.standard_normal(3), _pos()), (R.standard_normal(3), _pos())),
    "OneHotCategorical": (lambda D, T, lg: D.OneHotCategorical(logits=lg), (R.standard_normal((3, 4)),),
                          (R.standard_normal((3, 4)),)),
    "Poisson": (lambda D, T, r: D.Poisson(r), (_pos(),), (_pos(),)),
    "TransformedDistribution": (lambda D, T, m, s: D.LogNormal(m, s), (R.standard_normal(3), _pos()),
                                (R.standard_normal(3), _pos())),
    # p inside (0, 1) for the Beta pairs; one q interval misses p's low end (an infinite KL there).
    "Uniform": (lambda D, T, lo, w: D.Uniform(lo, lo + w), (_pos(0.05, 0.3), _pos(0.2, 0.6)),
                (np.array([0.0, 0.2, -1.0]), np.array([2.0, 1.5, 3.0]))),
    # alpha on both sides of 1 and 2 (where Pareto's mean and variance, and so several KLs, become infinite); q's
    # scale above and below p's lower bounds (a Uniform's low, a Pareto's scale).
    "Pareto": (lambda D, T, s, a: D.Pareto(s, a), (np.array([0.5, 1.2, 0.3]), np.array([0.8, 1.5, 3.0])),
               (np.array([0.01, 0.1, 0.5]), np.array([2.0, 0.7, 1.3]))),
    # probs on both sides of ContinuousBernoulli's Taylor region around 1/2, and inside it.
    "ContinuousBernoulli": (lambda D, T, p: D.ContinuousBernoulli(probs=p), (np.array([0.2, 0.5, 0.85]),),
                            (np.array([0.7, 0.4, 0.5002]),)),
}


def _implemented(cls):
    return cls.__name__ in FAMILIES or cls.__name__ == "ExponentialFamily"


TORCH_PAIRS = sorted((p.__name__, q.__name__) for p, q in tkl._KL_REGISTRY if _implemented(p) and _implemented(q)
                     and "ExponentialFamily" not in (p.__name__, q.__name__))


def test_registry_has_torchs_pairs():
    ours = {(p.__name__, q.__name__) for p, q in jkl._KL_REGISTRY}
    theirs = {(p.__name__, q.__name__) for p, q in tkl._KL_REGISTRY if _implemented(p) and _implemented(q)}
    assert theirs <= ours, sorted(theirs - ours)
    assert len(TORCH_PAIRS) >= 60


@pytest.mark.parametrize("p_name,q_name", TORCH_PAIRS)
def test_kl_matches_torch(p_name, q_name):
    make_p, params_p, _ = FAMILIES[p_name]
    make_q, _, params_q = FAMILIES[q_name]
    n = len(params_p)

    def kl(D, T, *params):
        return D.kl_divergence(make_p(D, T, *params[:n]), make_q(D, T, *params[n:]))

    compare(kl, *params_p, *params_q, rtol=1e-8, atol=1e-10)


def test_kl_self_is_zero_and_subclasses_dispatch():
    for name in ("Beta", "Gamma", "Dirichlet", "Laplace", "Gumbel", "Poisson", "Exponential", "Cauchy"):
        make, params, _ = FAMILIES[name]
        d = make(JD, jitorch, *(jitorch.tensor(p) for p in params))
        np.testing.assert_allclose(JD.kl_divergence(d, d).numpy(), 0.0, atol=1e-12)
    # Chi2 is a Gamma: the Gamma pair applies, as in torch.
    a, b = jitorch.tensor([1.0, 3.0], dtype=jitorch.float64), jitorch.tensor([2.0, 5.0], dtype=jitorch.float64)
    ours = JD.kl_divergence(JD.Chi2(a), JD.Chi2(b)).numpy()
    ref = TD.kl_divergence(TD.Chi2(torch.tensor(a.numpy())), TD.Chi2(torch.tensor(b.numpy()))).numpy()
    np.testing.assert_allclose(ours, ref, rtol=1e-12)


def test_bregman_fallback_matches_closed_forms():
    # The exponential-family KL through autograd of the log normalizer equals each closed form.
    for name in ("Gamma", "Beta", "Dirichlet", "Exponential", "Poisson", "Normal", "Bernoulli"):
        make, params_p, params_q = FAMILIES[name]
        p = make(JD, jitorch, *(jitorch.tensor(a) for a in params_p))
        q = make(JD, jitorch, *(jitorch.tensor(a) for a in params_q))
        np.testing.assert_allclose(jkl._kl_expfamily_expfamily(p, q).detach().numpy(),
                                   JD.kl_divergence(p, q).numpy(), rtol=1e-9, atol=1e-12)
    with pytest.raises(NotImplementedError, match="different exponential families"):
        jkl._kl_expfamily_expfamily(JD.Gamma(1.0, 1.0), JD.Exponential(1.0))


def test_entropy_of_exponential_families_by_bregman():
    from jitorch.distributions.exp_family import ExponentialFamily

    # (Beta and Dirichlet do not define the mean carrier measure it needs, in torch neither.)
    for name in ("Gamma", "Exponential", "Normal", "Bernoulli"):
        make, params, _ = FAMILIES[name]
        d = make(JD, jitorch, *(jitorch.tensor(a) for a in params))
        np.testing.assert_allclose(ExponentialFamily.entropy(d).detach().numpy(), d.entropy().numpy(), rtol=1e-9)


def test_binomial_kl_with_fewer_trials_in_q_is_refused_as_in_torch():
    with pytest.raises(NotImplementedError, match="q.total_count > p.total_count"):
        JD.kl_divergence(JD.Binomial(3, probs=jitorch.tensor(0.5)), JD.Binomial(5, probs=jitorch.tensor(0.5)))
    kl = JD.kl_divergence(JD.Binomial(5, probs=jitorch.tensor([0.5])), JD.Binomial(3, probs=jitorch.tensor([0.5])))
    assert kl.item() == float("inf")


def test_ambiguous_registration_warns_like_torch():
    class A(JD.Normal):
        pass

    class B(JD.Normal):
        pass

    @JD.register_kl(A, JD.Normal)
    def _a(p, q):
        return jitorch.tensor(1.0)

    @JD.register_kl(JD.Normal, B)
    def _b(p, q):
        return jitorch.tensor(2.0)

    try:
        with pytest.warns(RuntimeWarning, match="Ambiguous kl_divergence"):
            assert JD.kl_divergence(A(0.0, 1.0), B(0.0, 1.0)).item() == 1.0
    finally:
        del jkl._KL_REGISTRY[A, JD.Normal], jkl._KL_REGISTRY[JD.Normal, B]
        jkl._KL_MEMOIZE.clear()
