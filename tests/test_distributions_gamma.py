"""Gamma-family sampling and reparameterized gradients: the implicit gradients against torch's own
(``torch._standard_gamma_grad``, ``torch._dirichlet_grad``) on every branch of their approximations, against finite
differences of the CDF, and in expectation (``d E[x] / d theta`` from rsample matches the closed form); sample
moments for fixed seeds; the regularized incomplete gamma behind ``Gamma.cdf``."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sp
import torch

import jitorch
import jitorch.distributions as JD
from jitorch.distributions._gamma_math import _dirichlet_grad, _gammainc, _standard_gamma_grad

# (alpha, x) spanning the branches: x < 0.8 (series), alpha > 8 near and far from x = alpha (saddle point),
# and the rational fit in between.
ALPHA = np.array([0.05, 0.3, 0.9, 1.0, 2.5, 5.0, 7.9, 8.5, 20.0, 20.0, 100.0, 100.0, 3.0, 0.5, 12.0, 50.0])
X = np.array([1e-4, 0.2, 0.79, 1.5, 0.5, 4.0, 10.0, 8.4, 19.0, 30.0, 95.0, 60.0, 0.81, 2.0, 2.0, 49.0])


def test_standard_gamma_grad_matches_torch_on_every_branch():
    ours = _standard_gamma_grad(jitorch.tensor(ALPHA), jitorch.tensor(X)).numpy()
    ref = torch._standard_gamma_grad(torch.tensor(ALPHA), torch.tensor(X)).numpy()
    np.testing.assert_allclose(ours, ref, rtol=1e-11, atol=1e-14)


def test_standard_gamma_grad_is_the_implicit_derivative_of_the_cdf():
    # dx/dalpha = -(dF/dalpha) / f(x) with F the regularized incomplete gamma: central differences in alpha.
    h = 1e-6
    dF = (sp.gammainc(ALPHA + h, X) - sp.gammainc(ALPHA - h, X)) / (2 * h)
    pdf = np.exp((ALPHA - 1) * np.log(X) - X - sp.gammaln(ALPHA))
    ours = _standard_gamma_grad(jitorch.tensor(ALPHA), jitorch.tensor(X)).numpy()
    # torch's approximations are within a few parts in a thousand of the exact derivative.
    np.testing.assert_allclose(ours, -dF / pdf, rtol=5e-3, atol=1e-6)


BETA_CASES = [  # (x, alpha, total) over the branches of dirichlet_grad_one
    (0.01, 0.5, 1.5), (0.3, 2.0, 3.0), (0.97, 3.0, 3.5), (0.6, 9.0, 16.0), (0.5, 10.0, 20.0), (0.4, 3.0, 7.0),
    (0.7, 1.5, 2.5), (0.2, 7.0, 40.0), (0.55, 4.0, 9.0), (0.999, 5.0, 5.2), (0.45, 30.0, 62.0), (0.1, 0.05, 0.1),
]


def test_dirichlet_grad_matches_torch_on_every_branch():
    x, alpha, total = (np.array(c) for c in zip(*BETA_CASES))
    ours = _dirichlet_grad(jitorch.tensor(x), jitorch.tensor(alpha), jitorch.tensor(total)).numpy()
    ref = torch._dirichlet_grad(torch.tensor(x), torch.tensor(alpha), torch.tensor(total)).numpy()
    np.testing.assert_allclose(ours, ref, rtol=1e-11, atol=1e-14)


def test_dirichlet_grad_is_the_implicit_derivative_of_the_beta_cdf():
    # The Beta(alpha, beta) marginal's implicit gradient in alpha (beta = total - alpha held fixed), scaled by
    # 1 / (1 - x): the Dirichlet backward turns it into the gradient of every coordinate on the simplex.
    x, alpha, total = (np.array(c) for c in zip(*BETA_CASES))
    beta, h = total - alpha, 1e-6
    dF = (sp.betainc(alpha + h, beta, x) - sp.betainc(alpha - h, beta, x)) / (2 * h)
    pdf = np.exp((alpha - 1) * np.log(x) + (beta - 1) * np.log1p(-x) - sp.betaln(alpha, beta))
    ours = _dirichlet_grad(jitorch.tensor(x), jitorch.tensor(alpha), jitorch.tensor(total)).numpy()
    np.testing.assert_allclose(ours, -dF / pdf / (1 - x), rtol=1e-3)


def test_gamma_rsample_gradient_is_torchs_for_the_drawn_values():
    alpha = jitorch.tensor([0.4, 1.5, 6.0, 30.0], dtype=jitorch.float64, requires_grad=True)
    rate = jitorch.tensor([2.0, 0.5, 1.0, 3.0], dtype=jitorch.float64, requires_grad=True)
    jitorch.manual_seed(1)
    x = JD.Gamma(alpha, rate).rsample((50,))
    g = np.random.default_rng(2).standard_normal(tuple(x.shape))
    (x * jitorch.tensor(g)).sum().backward()
    xs = x.detach().numpy()
    a_t = torch.tensor(alpha.detach().numpy()).expand(50, 4)
    standard = torch.tensor(xs * rate.detach().numpy())
    dx_dalpha = torch._standard_gamma_grad(a_t, standard).numpy() / rate.detach().numpy()
    np.testing.assert_allclose(alpha.grad.numpy(), (g * dx_dalpha).sum(0), rtol=1e-10)
    np.testing.assert_allclose(rate.grad.numpy(), (g * -xs / rate.detach().numpy()).sum(0), rtol=1e-10)


def _mean_grad(make, params, n, seed=0):
    """``d/dtheta`` of the mean of ``n`` rsamples: an unbiased estimate of ``d E[x] / d theta``."""
    ps = [jitorch.tensor(p, dtype=jitorch.float64, requires_grad=True) for p in params]
    jitorch.manual_seed(seed)
    make(*ps).rsample((n,)).mean(0).sum().backward()
    return [p.grad.numpy() for p in ps]


def test_rsample_gradients_match_the_mean_in_expectation():
    a, b = np.array([0.5, 2.0, 9.0]), np.array([1.5, 0.5, 4.0])
    da, db = _mean_grad(JD.Gamma, (a, b), 100000)
    np.testing.assert_allclose(da, 1 / b, rtol=0.03)  # E = a / b
    np.testing.assert_allclose(db, -a / b**2, rtol=0.03)
    da, db = _mean_grad(JD.Beta, (a, b), 100000)
    np.testing.assert_allclose(da, b / (a + b) ** 2, rtol=0.05)  # E = a / (a + b)
    np.testing.assert_allclose(db, -a / (a + b) ** 2, rtol=0.05)
    (dk,) = _mean_grad(JD.Chi2, (np.array([1.0, 4.0]),), 100000)
    np.testing.assert_allclose(dk, [1.0, 1.0], rtol=0.03)  # E = k
    # E[x_i] = c_i / sum(c): d/dc_j sums (over i weighted by 1) to 0, so weight the first coordinate only.
    c = jitorch.tensor([0.7, 2.0, 3.0], dtype=jitorch.float64, requires_grad=True)
    jitorch.manual_seed(3)
    JD.Dirichlet(c).rsample((100000,))[:, 0].mean().backward()
    total = 5.7
    np.testing.assert_allclose(c.grad.numpy(), [(total - 0.7) / total**2, -0.7 / total**2, -0.7 / total**2],
                               rtol=0.05)


def test_studentt_rsample_scale_gradient():
    # x - loc = scale * Y with Y free of loc and scale: per sample, |x - loc| has gradient |Y| = |x - loc| / scale
    # in scale and 0 in loc; df reaches x through the chi-squared draw (implicit gradient).
    loc = jitorch.tensor(0.5, dtype=jitorch.float64, requires_grad=True)
    scale = jitorch.tensor(2.0, dtype=jitorch.float64, requires_grad=True)
    df = jitorch.tensor(5.0, dtype=jitorch.float64, requires_grad=True)
    jitorch.manual_seed(4)
    x = JD.StudentT(df, loc, scale).rsample((50000,))
    mad = (x - loc).abs().mean()
    mad.backward()
    assert scale.grad.item() == pytest.approx(mad.item() / 2.0, rel=1e-9)
    assert loc.grad.item() == pytest.approx(0.0, abs=1e-9)
    assert df.grad is not None and np.isfinite(df.grad.item())


@pytest.mark.parametrize("alpha", [0.01, 0.2, 1.0, 3.3, 250.0])
def test_standard_gamma_samples_have_gamma_moments(alpha):
    jitorch.manual_seed(5)
    x = JD.Gamma(jitorch.full((100000,), alpha, dtype=jitorch.float64), 1.0).sample().numpy()
    assert x.min() > 0
    n = x.size
    assert abs(x.mean() - alpha) < 5 * np.sqrt(alpha / n)
    # The sample variance's relative standard error is sqrt((kurtosis + 2) / n), the excess kurtosis being 6 / alpha.
    np.testing.assert_allclose(x.var(), alpha, rtol=5 * np.sqrt((6 / alpha + 2) / n))
    # Kolmogorov-Smirnov distance to the exact CDF: about 1.36 / sqrt(n) at 5%.
    xs = np.sort(x)
    ecdf = np.arange(1, xs.size + 1) / xs.size
    assert np.abs(ecdf - sp.gammainc(alpha, xs)).max() < 1.6 / np.sqrt(xs.size)


def test_beta_and_dirichlet_samples_lie_on_the_support_with_beta_moments():
    jitorch.manual_seed(6)
    a, b = np.array([0.3, 2.0, 12.0]), np.array([0.7, 5.0, 3.0])
    s = JD.Beta(jitorch.tensor(a), jitorch.tensor(b)).sample((60000,)).numpy()
    assert ((s >= 0) & (s <= 1)).all()
    np.testing.assert_allclose(s.mean(0), a / (a + b), atol=0.006)
    np.testing.assert_allclose(s.var(0), a * b / ((a + b) ** 2 * (a + b + 1)), rtol=0.05)
    d = JD.Dirichlet(jitorch.tensor([[0.02, 0.03], [1.0, 1.0]], dtype=jitorch.float64)).sample((1000,)).numpy()
    np.testing.assert_allclose(d.sum(-1), 1.0, rtol=1e-12)
    assert np.isfinite(d).all()


def test_gammainc_matches_torch_and_its_value_gradient():
    a = np.array([0.1, 0.5, 1.0, 3.0, 10.0, 80.0, 500.0, 2.0, 2.0, 7.0])
    x = np.array([0.01, 2.0, 1.0, 2.9, 11.0, 75.0, 520.0, 0.0, 40.0, 1e-3])
    xj = jitorch.tensor(x, requires_grad=True)
    ours = _gammainc(jitorch.tensor(a), xj)
    xt = torch.tensor(x, requires_grad=True)
    ref = torch.special.gammainc(torch.tensor(a), xt)
    np.testing.assert_allclose(ours.detach().numpy(), sp.gammainc(a, x), rtol=1e-13, atol=1e-300)
    # torch's asymptotic expansion for large a is good to about 1e-9 (a = 80, x = 75: 6e-10 off).
    np.testing.assert_allclose(ours.detach().numpy(), ref.detach().numpy(), rtol=2e-9, atol=1e-300)
    g = np.random.default_rng(0).standard_normal(a.shape)
    (ours * jitorch.tensor(g)).sum().backward()
    (ref * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-10)
    alpha = jitorch.tensor(a, requires_grad=True)
    with pytest.raises(NotImplementedError, match="gammainc"):
        _gammainc(alpha, jitorch.tensor(x)).sum().backward()
