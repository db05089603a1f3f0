"""jitorch.distributions against torch.distributions: values and parameter gradients of log_prob, entropy, mean,
variance and KL; reparameterized rsample gradients; sample shapes, seeded statistics; validation errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
import jitorch.distributions as JD
import torch.distributions as TD

RNG = np.random.default_rng(0)
POS = np.abs(RNG.standard_normal((3, 4))) + 0.5
LOC = RNG.standard_normal((3, 4))
X = RNG.standard_normal((2, 3, 4))
PROBS = RNG.uniform(0.1, 0.9, (3, 4))
BITS = (RNG.uniform(size=(3, 4)) < 0.5).astype(np.float64)
LOGITS5 = RNG.standard_normal((3, 5))
IDX = RNG.integers(0, 5, (2, 3))
A = RNG.standard_normal((2, 3, 3))
COV = A @ A.transpose(0, 2, 1) + 3 * np.eye(3)
MVLOC = RNG.standard_normal((2, 3))
MVX = RNG.standard_normal((4, 2, 3))


def _both(arrays):
    jt = [jitorch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    th = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    return jt, th


def _compare(fn, *arrays, atol=1e-9):
    """``fn(D, *params)`` with D the distributions module; compare value and gradients w.r.t. every float param."""
    jt, th = _both(arrays)
    out_j, out_t = fn(JD, jitorch, *jt), fn(TD, torch, *th)
    np.testing.assert_allclose(out_j.detach().numpy(), out_t.detach().numpy(), atol=atol, rtol=1e-7)
    assert tuple(out_j.shape) == tuple(out_t.shape)
    if out_t.requires_grad:
        out_j.sum().backward()
        out_t.sum().backward()
        for a, b in zip(jt, th):
            if b.requires_grad and b.grad is not None:
                np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=atol, rtol=1e-7)


CASES = {
    "normal_log_prob": (lambda D, T, m, s, x: D.Normal(m, s).log_prob(x), (LOC, POS, X)),
    "normal_entropy": (lambda D, T, m, s: D.Normal(m, s).entropy(), (LOC, POS)),
    "normal_stats": (lambda D, T, m, s: D.Normal(m, s).mean * 2 + D.Normal(m, s).variance + D.Normal(m, s).stddev,
                     (LOC, POS)),
    "normal_cdf": (lambda D, T, m, s, x: D.Normal(m, s).cdf(x), (LOC, POS, X)),
    "uniform_log_prob": (lambda D, T, lo, w: D.Uniform(lo, lo + w + 3).log_prob(lo + 0.5), (LOC, POS)),
    "uniform_stats": (lambda D, T, lo, w: D.Uniform(lo, lo + w).entropy() + D.Uniform(lo, lo + w).mean
                      + D.Uniform(lo, lo + w).variance, (LOC, POS)),
    "bernoulli_probs": (lambda D, T, p, x: D.Bernoulli(probs=p).log_prob(x) + D.Bernoulli(probs=p).entropy(),
                        (PROBS, BITS)),
    "bernoulli_logits": (lambda D, T, lg, x: D.Bernoulli(logits=lg).log_prob(x) + D.Bernoulli(logits=lg).entropy()
                         + D.Bernoulli(logits=lg).variance, (LOC, BITS)),
    "categorical_logits": (lambda D, T, lg, i: D.Categorical(logits=lg).log_prob(i)
                           + D.Categorical(logits=lg).entropy(), (LOGITS5, IDX)),
    "categorical_probs": (lambda D, T, p, i: D.Categorical(probs=p).log_prob(i) + D.Categorical(probs=p).entropy(),
                          (np.abs(LOGITS5) + 0.1, IDX)),
    "kl_normal": (lambda D, T, m, s: D.kl_divergence(D.Normal(m, s), D.Normal(m * 0.5, s.sqrt() + 0.1)), (LOC, POS)),
    "kl_bernoulli": (lambda D, T, p, lg: D.kl_divergence(D.Bernoulli(probs=p), D.Bernoulli(logits=lg)), (PROBS, LOC)),
    "kl_categorical": (lambda D, T, a, b: D.kl_divergence(D.Categorical(logits=a), D.Categorical(logits=b)),
                       (LOGITS5, LOGITS5[::-1].copy())),
    "kl_uniform": (lambda D, T, lo, w: D.kl_divergence(D.Uniform(lo, lo + w), D.Uniform(lo - 1, lo + w + 1)),
                   (LOC, POS)),
    "mvn_cov": (lambda D, T, m, c, x: D.MultivariateNormal(m, covariance_matrix=c).log_prob(x)
                + D.MultivariateNormal(m, covariance_matrix=c).entropy(), (MVLOC, COV, MVX)),
    "mvn_tril": (lambda D, T, m, c, x: D.MultivariateNormal(m, scale_tril=T.linalg.cholesky(c)).log_prob(x),
                 (MVLOC, COV, MVX)),
    "kl_mvn": (lambda D, T, m, c: D.kl_divergence(D.MultivariateNormal(m, c),
                                                  D.MultivariateNormal(m * 0, c + T.eye(3))), (MVLOC, COV)),
    "independent": (lambda D, T, m, s, x: D.Independent(D.Normal(m, s), 1).log_prob(x)
                    + D.kl_divergence(D.Independent(D.Normal(m, s), 1), D.Independent(D.Normal(m, s * 2), 1)),
                    (LOC, POS, X)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch(name):
    fn, arrays = CASES[name]
    _compare(fn, *arrays)


def test_rsample_gradients_are_reparameterized():
    loc = jitorch.tensor(LOC, requires_grad=True)
    scale = jitorch.tensor(POS, requires_grad=True)
    jitorch.manual_seed(3)
    y = JD.Normal(loc, scale).rsample((5,))
    jitorch.manual_seed(3)
    eps = jitorch.randn(5, 3, 4, dtype=jitorch.float64)
    np.testing.assert_allclose(y.detach().numpy(), (LOC + eps.numpy() * POS), rtol=1e-12)
    y.sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), np.full((3, 4), 5.0))
    np.testing.assert_allclose(scale.grad.numpy(), eps.numpy().sum(0), rtol=1e-12)
    lo = jitorch.tensor(LOC, requires_grad=True)
    hi = jitorch.tensor(LOC + POS, requires_grad=True)
    jitorch.manual_seed(4)
    u = JD.Uniform(lo, hi).rsample()
    jitorch.manual_seed(4)
    r = jitorch.rand(3, 4, dtype=jitorch.float64).numpy()
    u.sum().backward()
    np.testing.assert_allclose(lo.grad.numpy(), 1 - r, rtol=1e-12)
    np.testing.assert_allclose(hi.grad.numpy(), r, rtol=1e-12)
    assert not JD.Normal(loc, scale).sample().requires_grad


def test_mvn_rsample_gradient():
    L = np.linalg.cholesky(COV[0])
    loc = jitorch.tensor(MVLOC[0], requires_grad=True)
    tril = jitorch.tensor(L, requires_grad=True)
    jitorch.manual_seed(5)
    y = JD.MultivariateNormal(loc, scale_tril=tril).rsample((7,))
    jitorch.manual_seed(5)
    eps = jitorch.randn(7, 3, dtype=jitorch.float64).numpy()
    np.testing.assert_allclose(y.detach().numpy(), MVLOC[0] + eps @ L.T, rtol=1e-10)
    y.sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), np.full(3, 7.0))
    np.testing.assert_allclose(tril.grad.numpy(), np.ones((3, 1)) * eps.sum(0)[None, :], rtol=1e-10)


def test_sample_shapes_and_statistics():
    jitorch.manual_seed(0)
    n = JD.Normal(jitorch.tensor([1.0, -2.0]), jitorch.tensor([0.5, 2.0]))
    s = n.sample((20000,))
    assert s.shape == (20000, 2) and n.batch_shape == (2,) and n.event_shape == ()
    np.testing.assert_allclose(s.numpy().mean(0), [1.0, -2.0], atol=0.05)
    np.testing.assert_allclose(s.numpy().std(0), [0.5, 2.0], rtol=0.03)
    b = JD.Bernoulli(probs=jitorch.tensor([0.2, 0.7]))
    np.testing.assert_allclose(b.sample((20000,)).numpy().mean(0), [0.2, 0.7], atol=0.02)
    c = JD.Categorical(probs=jitorch.tensor([[0.1, 0.6, 0.3], [0.5, 0.25, 0.25]]))
    cs = c.sample((30000,))
    assert cs.shape == (30000, 2) and cs.dtype == jitorch.int64
    freq = np.stack([np.bincount(cs.numpy()[:, i], minlength=3) / 30000 for i in range(2)])
    np.testing.assert_allclose(freq, c.probs.numpy(), atol=0.02)
    assert c.sample().shape == (2,) and c.batch_shape == (2,)
    u = JD.Uniform(0.0, 2.0)
    us = u.sample((4, 5000)).numpy()
    assert us.shape == (4, 5000) and us.min() >= 0 and us.max() < 2
    m = JD.MultivariateNormal(jitorch.zeros(2), covariance_matrix=jitorch.tensor([[2.0, 0.5], [0.5, 1.0]]))
    ms = m.sample((30000,)).numpy()
    assert m.event_shape == (2,) and ms.shape == (30000, 2)
    np.testing.assert_allclose(np.cov(ms.T), [[2.0, 0.5], [0.5, 1.0]], atol=0.06)


def test_seeded_sampling_is_reproducible():
    d = JD.Categorical(logits=jitorch.randn(4, 6))
    jitorch.manual_seed(11)
    a = d.sample((10,))
    jitorch.manual_seed(11)
    assert bool((a == d.sample((10,))).all())
    g = JD.Normal(0.0, 1.0)
    jitorch.manual_seed(11)
    x = g.rsample((3,))
    jitorch.manual_seed(11)
    assert bool((x == g.rsample((3,))).all())


def test_shapes_expand_and_properties():
    n = JD.Normal(0.0, 1.0)
    assert n.batch_shape == () and n.sample().shape == () and n.sample((2, 3)).shape == (2, 3)
    e = JD.Normal(jitorch.zeros(3), 1.0).expand((4, 3))
    assert e.batch_shape == (4, 3) and e.log_prob(jitorch.zeros(4, 3)).shape == (4, 3)
    c = JD.Categorical(logits=jitorch.zeros(5)).expand((2,))
    assert c.sample((3,)).shape == (3, 2)
    bern = JD.Bernoulli(logits=jitorch.tensor([0.0, 1.0]))
    assert bern.enumerate_support().shape == (2, 2)
    np.testing.assert_allclose(bern.probs.numpy(), torch.sigmoid(torch.tensor([0.0, 1.0])).numpy(), rtol=1e-6)
    assert JD.Normal(0.0, 1.0).has_rsample and not JD.Bernoulli(0.3).has_rsample
    ind = JD.Independent(JD.Normal(jitorch.zeros(2, 3), 1.0), 1)
    assert ind.batch_shape == (2,) and ind.event_shape == (3,)


@pytest.mark.parametrize("make", [
    lambda D, T: D.Normal(T.tensor([0.0]), T.tensor([-1.0])),
    lambda D, T: D.Normal(0.0, 0.0),
    lambda D, T: D.Bernoulli(probs=T.tensor([1.5])),
    lambda D, T: D.Bernoulli(probs=T.tensor([0.5]), logits=T.tensor([0.0])),
    lambda D, T: D.Bernoulli(),
    lambda D, T: D.Categorical(probs=T.tensor([0.5, -0.1, 0.6])),
    lambda D, T: D.Categorical(probs=T.tensor(0.5)),
    lambda D, T: D.Uniform(1.0, 0.0),
    lambda D, T: D.MultivariateNormal(T.zeros(2), covariance_matrix=T.tensor([[1.0, 2.0], [2.0, 1.0]])),
    lambda D, T: D.Normal(0.0, 1.0).log_prob(T.tensor(float("nan"))),
    lambda D, T: D.Bernoulli(0.3).log_prob(T.tensor(0.5)),
    lambda D, T: D.Categorical(logits=T.zeros(3)).log_prob(T.tensor(3)),
])
def test_validation_errors_match_torch(make, monkeypatch):
    # torch.compile (run by earlier test files) turns torch's default argument validation off for the process.
    monkeypatch.setattr(TD.Distribution, "_validate_args", True)
    with pytest.raises(ValueError) as t_err:
        make(TD, torch)
    with pytest.raises(ValueError) as j_err:
        make(JD, jitorch)
    assert str(j_err.value).split(" (")[0] == str(t_err.value).split(" (")[0]


def test_validate_args_false_skips_checks():
    d = JD.Normal(0.0, -1.0, validate_args=False)
    assert d.scale.item() == -1.0


def test_kl_registry():
    class MyNormal(JD.Normal):
        pass

    p = MyNormal(0.0, 1.0)
    assert JD.kl_divergence(p, JD.Normal(1.0, 1.0)).item() == pytest.approx(0.5)

    @JD.register_kl(MyNormal, MyNormal)
    def _kl(p, q):
        return jitorch.tensor(42.0)

    assert JD.kl_divergence(p, MyNormal(0.0, 2.0)).item() == 42.0
    with pytest.raises(NotImplementedError, match="No KL"):
        JD.kl_divergence(JD.Normal(0.0, 1.0), JD.Categorical(jitorch.ones(2)))
    # Normal and Bernoulli are both exponential families: the Bregman fallback matches, and refuses, as torch's.
    with pytest.raises(NotImplementedError, match="different exponential families"):
        JD.kl_divergence(JD.Normal(0.0, 1.0), JD.Bernoulli(0.5))
    with pytest.raises(TypeError):
        JD.register_kl(int, JD.Normal)


def test_independent_expand_matches_torch():
    shapes = []
    for D, T in ((JD, jitorch), (TD, torch)):
        d = D.Independent(D.Normal(T.zeros(2, 3, dtype=T.float64), 1.0), 1).expand((5, 2))
        x = T.tensor(X[0, :2, :3].copy())
        shapes.append((tuple(d.batch_shape), tuple(d.event_shape), tuple(d.base_dist.batch_shape),
                       tuple(d.sample((4,)).shape), d.log_prob(x).detach().numpy()))
    assert shapes[0][:4] == shapes[1][:4]
    np.testing.assert_allclose(shapes[0][4], shapes[1][4], rtol=1e-12)
    with pytest.raises(NotImplementedError, match="cartesian product"):
        JD.Independent(JD.Bernoulli(jitorch.full((2,), 0.5)), 1).enumerate_support()


def test_shape_arithmetic_stays_a_size():
    # torch code writes batch_shape + event_shape and shape[:-1] + (n,): both are Sizes in torch.
    d = JD.MultivariateNormal(jitorch.zeros(4, 3), jitorch.eye(3))
    for s in (d.batch_shape + d.event_shape, d.batch_shape + (2,), (2,) + d.batch_shape, d.event_shape * 2):
        assert isinstance(s, jitorch.Size)
    assert d.batch_shape + d.event_shape == (4, 3) and repr(d.event_shape * 2) == "jitorch.Size([3, 3])"
