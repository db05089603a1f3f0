"""Gamma-family numerics: the standard gamma sampler and the implicit reparameterization gradients of Gamma and
Dirichlet samples (PyTorch's ``_standard_gamma``/``_standard_gamma_grad``/``_dirichlet_grad``), as jitorch ops.

A gamma draw ``x = G(alpha, u)`` has no closed form, so its pathwise derivative comes from the CDF ``F(x; alpha)``
held fixed (implicit reparameterization, Figurnov et al. 2018): ``dx/dalpha = -(dF/dalpha) / f(x)``. PyTorch
evaluates that ratio with fitted approximations (a Taylor series for small ``x``, a saddle-point expansion for large
``alpha``, rational fits elsewhere; Jankowiak & Obermeyer 2018); the same formulas are used here, so gradients agree
with torch's for the same ``(alpha, x)``. tests/test_distributions_gamma.py also checks them against finite
differences of the CDF. Everything is computed in float64 (torch's CPU accumulation type) and cast back: on NumPy
arrays for plain CPU tensors (``_ArrayMath``), as jitorch ops otherwise (``_TensorMath``), by the same code.
"""
from __future__ import annotations

import math

import numpy as np

import jitorch as torch
from jitorch.autograd import Function

from .. import _random
from .._tensor import Tensor
from .._torch_rng import TorchCPUStream
from ._math_backends import _ArrayMath, _host_float64, _TensorMath
from ._torch_gamma import torch_dirichlet, torch_standard_gamma

__all__ = ["_Dirichlet", "_StandardGamma", "_dirichlet_grad", "_gammainc", "_standard_gamma_grad"]

# torch compares with float literals (``0.8f``, ``0.9f``, ``1.1f``): the same float32-rounded thresholds here.
_F32_0_8 = 0.800000011920929
_F32_0_9 = 0.8999999761581421
_F32_1_1 = 1.100000023841858


def _sample_standard_gamma(alpha):
    """Gamma(alpha, 1) draws of ``alpha``'s shape and dtype (no autograd), by Marsaglia & Tsang's rejection method
    (doi:10.1145/358407.358414) on jitorch's generator; ``alpha < 1`` is boosted: ``G(a) = G(a + 1) * U^(1/a)``."""
    with torch.no_grad():
        alpha = alpha.detach()
        arrays = _host_float64(alpha)
        tiny = torch.finfo(alpha.dtype).tiny
        if arrays is None:
            a = alpha.to(torch.float64)
            out = _gamma_draws(_TensorMath, a).to(alpha.dtype)
            # Underflow (tiny alpha) gives the smallest normal number, never 0: log(x) stays finite, as torch's.
            return torch.where(a == 0, out, out.clamp(min=tiny))
        stream = _torch_stream(alpha._data)
        if stream is not None:
            return Tensor._make(torch_standard_gamma(stream, alpha._data))
        with np.errstate(all="ignore"):
            out = _gamma_draws(_ArrayMath, arrays[0]).astype(alpha._data.dtype)
            return Tensor._make(np.where(arrays[0] == 0, out, np.maximum(out, out.dtype.type(tiny))))  # keeps bfloat16


def _torch_stream(alpha):
    """The default generator's stream where ATen's serial sampler runs on it (generated code), so a seeded run gets
    torch's numbers: torch's CPU stream and a float32/float64 ``alpha``; else None, and the vectorised rejection
    sampler draws (reproducible, not torch's)."""
    stream = _random._rng(None)
    if not isinstance(stream, TorchCPUStream) or alpha.dtype not in (np.float32, np.float64):
        return None
    return stream


def _gamma_draws(m, a):
    """The float64 draws of ``_sample_standard_gamma`` for the float64 ``a``, with the functions of ``m``."""
    boost = a < 1
    a1 = m.where(boost, a + 1, a)
    d = (a1 - 1.0 / 3.0).reshape(-1)
    c = 1.0 / m.sqrt(9.0 * d)
    out = m.zeros_like(d)
    # Only the still-rejected entries draw again: a few rounds, each on a shrinking index set. An alpha that is not
    # positive (unchecked under validate_args=False) never gets accepted: it is left out and ends as torch's, the
    # smallest normal number (nan stays nan, 0 stays 0).
    pending = m.arange(m.numel(d))[a.reshape(-1) > 0]
    while m.numel(pending):
        dd, cc = d[pending], c[pending]
        x = m.draws("normal", pending.shape)
        u = 1 - m.draws("uniform", pending.shape)
        y = 1 + cc * x
        v = y * y * y
        xx = x * x
        squeeze = u < 1 - 0.0331 * xx * xx  # the cheap acceptance test first, as Marsaglia-Tsang
        ok = (y > 0) & (squeeze | (m.log(u) < 0.5 * xx + dd * (1 - v + m.log(v))))
        out[pending[ok]] = (dd * v)[ok]
        pending = pending[~ok]
    out = out.reshape(a.shape)
    scale = (1 - m.draws("uniform", a.shape)) ** (1.0 / a)
    scale = m.where(a > 0, scale, 1.0)  # u^(1/a) of a negative a overflows, 0 * inf
    out = m.where(boost, out * scale, out)
    return m.where(m.isnan(a), a, out)


def _standard_gamma_grad(alpha, x):
    """``dx/dalpha`` of a Gamma(alpha, 1) sample ``x`` (torch's ``standard_gamma_grad_one``)."""
    arrays = _host_float64(alpha, x)
    if arrays is None:
        return _gamma_grad(_TensorMath, alpha.to(torch.float64), x.to(torch.float64)).to(x.dtype)
    with np.errstate(all="ignore"):
        return Tensor._make(_gamma_grad(_ArrayMath, *arrays).astype(x._data.dtype))


def _gamma_grad(m, a, x):
    """``_standard_gamma_grad`` on float64 ``a`` and ``x`` with the functions of ``m``."""
    # Small x: Taylor series of the CDF and of its alpha-derivative.
    numer, denom = m.ones_like(x), a
    series1, series2 = numer / denom, numer / (denom * denom)
    for i in range(1, 6):
        numer = numer * (-x / i)
        denom = denom + 1
        series1 = series1 + numer / denom
        series2 = series2 + numer / (denom * denom)
    pow_x_alpha = x ** a
    gamma_pdf = x ** (a - 1) * m.exp(-x)
    gamma_cdf = pow_x_alpha * series1
    gamma_cdf_alpha = (m.log(x) - m.digamma(a)) * gamma_cdf - pow_x_alpha * series2
    small = -gamma_cdf_alpha / gamma_pdf
    small = m.where(m.isnan(small), m.zeros_like(small), small)
    # Large alpha: Rice saddle-point expansion, with a polynomial near the singularity at x = alpha.
    near = (_F32_0_9 * a <= x) & (x <= _F32_1_1 * a)
    numer_1 = 1 + 24 * a * (1 + 12 * a)
    numer_2 = 1440 * (a * a) + 6 * x * (53 - 120 * x) - 65 * x * x / a + a * (107 + 3600 * x)
    near_value = numer_1 * numer_2 / (1244160 * (a * a) * (a * a))
    sq = m.sqrt(8 * a)
    term2 = sq / (a - x)
    term3 = (x - a - a * m.log(x / a)) ** -1.5
    term23 = m.where(x < a, term2 - term3, term2 + term3)
    term1 = m.log(x / a) * term23 - m.sqrt(2 / a) * (a + x) / ((a - x) * (a - x))
    stirling = 1 + 1 / (12 * a) * (1 + 1 / (24 * a))
    large = m.where(near, near_value, -stirling * x * term1 / sq)
    # Otherwise: a bivariate rational approximation in log(x / alpha) and log(alpha).
    u, v = m.log(x / a), m.log(a)
    coef = [c0 + u * (c1 + u * c2) for c0, c1, c2 in zip(*_GAMMA_GRAD_COEF)]
    p = coef[0] + v * (coef[1] + v * (coef[2] + v * coef[3]))
    q = coef[4] + v * (coef[5] + v * (coef[6] + v * coef[7]))
    middle = m.exp(p / q)
    return m.where(x < _F32_0_8, small, m.where(a > 8, large, middle))


_GAMMA_GRAD_COEF = (
    (0.16009398, -0.094634809, 0.025146376, -0.0030648343, 1, 0.32668115, 0.10406089, 0.0014179084),
    (0.53487893, 0.1298071, 0.065735949, -0.0015649758, 0.16639465, 0.020070113, -0.0035938915, -0.00058392623),
    (0.040121004, -0.0065914022, -0.0026286047, -0.0013441777, 0.017050642, -0.0021309326, 0.00085092367,
     -1.5247877e-07),
)


def _beta_grad_alpha_small(m, x, alpha, beta):
    """Taylor expansion in ``x`` near 0 of the Beta(alpha, beta) gradient wrt ``alpha``."""
    factor = m.digamma(alpha) - m.digamma(alpha + beta) - m.log(x)
    numer = m.ones_like(x)
    series = numer / alpha * (factor + 1 / alpha)
    for i in range(1, 11):
        numer = numer * ((i - beta) * x / i)
        denom = alpha + i
        series = series + numer / denom * (factor + 1 / denom)
    result = x * (1 - x) ** -beta * series
    return m.where(m.isnan(result), m.zeros_like(result), result)


def _beta_grad_beta_small(m, x, alpha, beta):
    """Taylor expansion in ``x`` near 0 of the Beta(alpha, beta) gradient wrt ``beta``."""
    factor = m.digamma(alpha + beta) - m.digamma(beta)
    numer, betas, dbetas = m.ones_like(x), m.ones_like(x), m.zeros_like(x)
    series = factor / alpha
    for i in range(1, 9):
        numer = numer * (-x / i)
        dbetas = dbetas * (beta - i) + betas
        betas = betas * (beta - i)
        series = series + numer / (alpha + i) * (dbetas + factor * betas)
    result = -(1 - x) ** (1 - beta) * series
    return m.where(m.isnan(result), m.zeros_like(result), result)


def _beta_grad_alpha_mid(m, x, alpha, beta):
    """Rice saddle-point expansion for large ``alpha`` and ``beta``, a polynomial near the mean."""
    total = alpha + beta
    mean = alpha / total
    std = m.sqrt(alpha * beta / (total + 1)) / total
    near = (mean - 0.1 * std <= x) & (x <= mean + 0.1 * std)
    b2 = beta * beta
    poly = 47 * x * b2 * b2 + alpha * ((43 + 20 * (16 + 27 * beta) * x) * b2 * beta + alpha * (
        3 * (59 + 180 * beta - 90 * x) * b2 + alpha * ((453 + 1620 * beta * (1 - x) - 455 * x) * beta + alpha * (
            8 * (1 - x) * (135 * beta - 11)))))
    prefactor_num = (1 + 12 * alpha) * (1 + 12 * beta) / (total * total)
    prefactor_den = 12960 * alpha * alpha * alpha * beta * beta * (1 + 12 * total)
    near_value = prefactor_num / (1 - x) * poly / prefactor_den
    prefactor = -x / m.sqrt(2 * alpha * beta / total)
    stirling = ((1 + 1 / (12 * alpha) + 1 / (288 * alpha * alpha)) * (1 + 1 / (12 * beta) + 1 / (288 * b2))
                / (1 + 1 / (12 * total) + 1 / (288 * total * total)))
    term1_num = 2 * (alpha * alpha) * (x - 1) + alpha * beta * (x - 1) - x * b2
    axbx = alpha * (x - 1) + beta * x
    term1 = term1_num / (m.sqrt(2 * alpha / beta) * total ** 1.5 * axbx * axbx)
    term2 = 0.5 * m.log(alpha / (total * x))
    term3 = m.sqrt(8 * alpha * beta / total) / (beta * x + alpha * (x - 1))
    term4 = (beta * m.log(beta / (total * (1 - x))) + alpha * m.log(alpha / (total * x))) ** -1.5
    term1234 = term1 + term2 * (term3 + m.where(x < mean, term4, -term4))
    return m.where(near, near_value, stirling * prefactor * term1234)


def _dirichlet_grad(x, alpha, total):
    """``dx/dalpha`` of the Beta(alpha, total - alpha) marginal of a Dirichlet sample (torch's
    ``dirichlet_grad_one``), the building block of the Dirichlet and Beta reparameterized gradients."""
    arrays = _host_float64(x, alpha, total)
    if arrays is None:
        wide = [t.to(torch.float64) for t in (x, alpha, total)]
        return _beta_marginal_grad(_TensorMath, *wide).to(x.dtype)
    with np.errstate(all="ignore"):
        return Tensor._make(_beta_marginal_grad_arrays(*arrays).astype(x._data.dtype))


def _beta_marginal_grad(m, x, alpha, total):
    """``_dirichlet_grad`` on float64 ``x``, ``alpha``, ``total`` with the functions of ``m``: every branch on every
    entry, then the one each entry takes (as torch's per-entry ``if``s; the later ``where`` wins)."""
    beta = total - alpha
    boundary = total * x * (1 - x)
    result = m.where((alpha > 6) & (beta > 6), _beta_grad_alpha_mid(m, x, alpha, beta),
                     _rational_fit(m, x, alpha, total, beta))
    result = m.where((x >= 0.5) & (boundary < 0.75), -_beta_grad_beta_small(m, 1 - x, beta, alpha), result)
    return m.where((x <= 0.5) & (boundary < 2.5), _beta_grad_alpha_small(m, x, alpha, beta), result)


def _beta_marginal_grad_arrays(x, alpha, total):
    """``_beta_marginal_grad`` on NumPy arrays, each branch computed on the entries that take it only (the branches
    are elementwise, so the values are the same; four series on every entry were most of a Dirichlet backward)."""
    x, alpha, total = np.broadcast_arrays(x, alpha, total)
    beta = total - alpha
    boundary = total * x * (1 - x)
    alpha_small = (x <= 0.5) & (boundary < 2.5)
    beta_small = (x >= 0.5) & (boundary < 0.75) & ~alpha_small
    rest = ~(alpha_small | beta_small)
    mid = rest & (alpha > 6) & (beta > 6)
    fit = rest & ~mid
    m = _ArrayMath
    result = np.empty(x.shape, dtype=np.float64)
    for sel, branch in ((alpha_small, lambda a, b, t, v: _beta_grad_alpha_small(m, v, a, b)),
                        (beta_small, lambda a, b, t, v: -_beta_grad_beta_small(m, 1 - v, b, a)),
                        (mid, lambda a, b, t, v: _beta_grad_alpha_mid(m, v, a, b)),
                        (fit, lambda a, b, t, v: _rational_fit(m, v, a, t, b))):
        if sel.any():
            result[sel] = branch(alpha[sel], beta[sel], total[sel], x[sel])
    return result


def _rational_fit(m, x, alpha, total, beta):
    """torch's bivariate rational approximation of the Beta gradient, away from the series' and Rice's ranges."""
    u = m.log(x)
    a = m.log(alpha) - u
    b = m.log(total) - a
    p = m.zeros_like(x)
    q = m.zeros_like(x)
    for i, pow_u in enumerate((1, u, u * u)):
        for j, pow_a in enumerate((1, a, a * a)):
            ua = pow_u * pow_a
            cp, cq = _DIRICHLET_GRAD_COEF[0][i][j], _DIRICHLET_GRAD_COEF[1][i][j]
            p = p + ua * (cp[0] + b * (cp[1] + b * (cp[2] + b * cp[3])))
            q = q + ua * (cq[0] + b * (cq[1] + b * (cq[2] + b * cq[3])))
    approx = x * (m.digamma(total) - m.digamma(alpha)) / beta
    return p / q * approx


_DIRICHLET_GRAD_COEF = (
    (((1.003668233, -0.01061107488, -0.0657888334, 0.01201642863),
      (0.6336835991, -0.3557432599, 0.05486251648, -0.001465281033),
      (-0.03276231906, 0.004474107445, 0.002429354597, -0.0001557569013)),
     ((0.221950385, -0.3187676331, 0.01799915743, 0.01074823814),
      (-0.2951249643, 0.06219954479, 0.01535556598, 0.001550077057),
      (0.02155310298, 0.004170831599, 0.001292462449, 6.976601077e-05)),
     ((-0.05980841433, 0.008441916499, 0.01085618172, 0.002319392565),
      (0.02911413504, 0.01400243777, -0.002721828457, 0.000751041181),
      (0.005900514878, -0.001936558688, -9.495446725e-06, 5.385558597e-05))),
    (((1, -0.02924021934, -0.04438342661, 0.007285809825),
      (0.6357567472, -0.3473456711, 0.05454656494, -0.002407477521),
      (-0.03301322327, 0.004845219414, 0.00231480583, -0.0002307248149)),
     ((0.5925320577, -0.1757678135, 0.01505928619, 0.000564515273),
      (0.1014815858, -0.06589186703, 0.01272886114, -0.0007316646956),
      (-0.007258481865, 0.001096195486, 0.0003934994223, -4.12701925e-05)),
     ((0.06469649321, -0.0236701437, 0.002902096474, -5.896963079e-05),
      (0.001925008108, -0.002869809258, 0.0008000589141, -6.063713228e-05),
      (-0.0003477407336, 6.959756487e-05, 1.097287507e-05, -1.650964693e-06))),
)


class _StandardGamma(Function):
    """``x ~ Gamma(alpha, 1)`` with the implicit gradient ``dx/dalpha`` (first order only, as torch's)."""

    @staticmethod
    def forward(ctx, alpha):
        x = _sample_standard_gamma(alpha)
        ctx.save_for_backward(alpha, x)
        return x

    @staticmethod
    def backward(ctx, grad):
        alpha, x = ctx.saved_tensors
        return grad * _standard_gamma_grad(alpha, x)


class _Dirichlet(Function):
    """``x ~ Dirichlet(alpha)`` (normalized gammas) with the implicit gradient of each Beta marginal, projected so
    the simplex constraint holds: ``d_i (g_i - sum_j x_j g_j)``."""

    @staticmethod
    def forward(ctx, alpha):
        host = _host_float64(alpha.detach())
        stream = None if host is None else _torch_stream(alpha.detach()._data)
        if stream is not None:  # torch's numbers: ATen's float64 gammas, normalised and clamped
            x = Tensor._make(torch_dirichlet(stream, alpha.detach()._data))
            ctx.save_for_backward(alpha, x)
            return x
        gammas = _sample_standard_gamma(alpha)
        x = gammas / gammas.sum(-1, True)
        # A sum that underflowed (every concentration tiny) leaves 0/0: the mass goes to the largest gamma.
        x = torch.where(torch.isnan(x), (gammas == gammas.max(-1, True)[0]).to(x.dtype), x)
        ctx.save_for_backward(alpha, x)
        return x

    @staticmethod
    def backward(ctx, grad):
        alpha, x = ctx.saved_tensors
        total = alpha.sum(-1, True).expand_as(alpha)
        return _dirichlet_grad(x, alpha, total) * (grad - (x * grad).sum(-1, True))


def _log_normalized_gamma(a, x):
    """``a log x - x - lgamma(a)``: the log of the prefactor ``x^a e^-x / Gamma(a)`` of both expansions below."""
    return torch.xlogy(a, x) - x - torch.lgamma(a)


def _gammainc_values(a, x):
    """The regularized lower incomplete gamma ``P(a, x)`` (no autograd): its power series where ``x < a + 1``,
    else ``1 - Q`` with ``Q`` from Legendre's continued fraction (modified Lentz), both iterated to float64 rounding
    (Numerical Recipes 6.2)."""
    with torch.no_grad():
        a, x = torch.broadcast_tensors(a.to(torch.float64), x.to(torch.float64))
        eps, tiny = 2.0**-53, 1e-300
        use_series = x < a + 1
        prefix = torch.exp(_log_normalized_gamma(a, x))
        ap, term, total = a, torch.ones_like(x), torch.ones_like(x)
        for _ in range(100000):
            ap = ap + 1
            term = term * x / ap
            total = total + term
            if not bool(((term > total * eps) & use_series).any()):
                break
        series = prefix * total / a
        b = x + 1 - a
        c = torch.full_like(x, 1 / tiny)
        d = 1 / torch.where(b.abs() < tiny, tiny, b)
        h = d
        for i in range(1, 100000):
            an = -i * (i - a)
            b = b + 2
            d = an * d + b
            d = 1 / torch.where(d.abs() < tiny, tiny, d)
            c = b + an / c
            c = torch.where(c.abs() < tiny, tiny, c)
            delta = d * c
            h = h * delta
            if not bool((((delta - 1).abs() > eps) & ~use_series).any()):
                break
        result = torch.where(use_series, series, 1 - prefix * h)
        result = torch.where(x == 0, 0.0, torch.where(torch.isinf(x), 1.0, result))
        return torch.where(torch.isnan(a) | torch.isnan(x), math.nan, result)


class _GammaInc(Function):
    """``P(a, x)``, differentiable in ``x`` (its derivative is the Gamma(a, 1) density); as torch's ``gammainc``,
    it has no derivative in ``a``."""

    @staticmethod
    def forward(ctx, a, x):
        ctx.save_for_backward(a, x)
        return _gammainc_values(a, x).to(torch.result_type(a, x))

    @staticmethod
    def backward(ctx, grad):
        a, x = ctx.saved_tensors
        if ctx.needs_input_grad[0]:
            raise NotImplementedError("the derivative of gammainc with respect to its first argument (the "
                                      "concentration) is not implemented, as in torch.special.gammainc")
        return None, grad * torch.exp(torch.xlogy(a - 1, x) - x - torch.lgamma(a))  # the Gamma(a, 1) density


def _gammainc(a, x):
    """``torch.special.gammainc(a, x)`` with its gradient in ``x``."""
    a, x = torch.broadcast_tensors(a, x)
    return _GammaInc.apply(a, x)
