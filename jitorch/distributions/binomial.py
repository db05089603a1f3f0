"""``Binomial``: successes in ``total_count`` trials of ``probs``; its sampler (inversion for small means,
Hormann's BTRS rejection otherwise, as torch's) draws from jitorch's generator: torch's counts on torch's CPU stream
(float32/float64, ``_torch_binomial``), vectorised rounds otherwise."""
from __future__ import annotations

import math

import jitorch as torch

from . import constraints
from ._mixins import ProbsOrLogitsParam
from ._torch_binomial import torch_binomial_replay
from .distribution import Distribution

__all__ = ["Binomial"]

# log(k!) - Stirling's approximation of it, tabulated for k < 10 (where the series below is inaccurate).
_STIRLING_TAIL = (0.0810614667953272, 0.0413406959554092, 0.0276779256849983, 0.02079067210376509,
                  0.0166446911898211, 0.0138761288230707, 0.0118967099458917, 0.0104112652619720,
                  0.00925546218271273, 0.00833056343336287)


def _stirling_tail(k):
    kp1sq = (k + 1) * (k + 1)
    series = (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / kp1sq) / kp1sq) / (k + 1)
    table = torch.tensor(_STIRLING_TAIL, dtype=k.dtype, device=k.device)
    return torch.where(k < 10, table[k.clamp(0, 9).long()], series)


def _inversion(count, prob):
    """Count geometric waiting times until they pass ``count`` (fast where ``count * prob < 10``)."""
    out = torch.zeros_like(count)
    geom_sum = torch.zeros_like(count)
    logprob = torch.log1p(-prob)
    pending = torch.arange(count.numel(), device=count.device)
    while pending.numel():
        u = torch.rand(pending.shape, dtype=count.dtype, device=count.device)
        geom_sum[pending] = geom_sum[pending] + torch.ceil(torch.log(u) / logprob[pending])
        done = geom_sum[pending] > count[pending]
        out[pending[~done]] = out[pending[~done]] + 1
        pending = pending[~done]
    return out


def _btrs(count, prob):
    """Transformed rejection with squeeze (Hormann 1993), for ``count * prob >= 10`` and ``prob <= 1/2``."""
    stddev = torch.sqrt(count * prob * (1 - prob))
    b = 1.15 + 2.53 * stddev
    a = -0.0873 + 0.0248 * b + 0.01 * prob
    c = count * prob + 0.5
    v_r = 0.92 - 4.2 / b
    r = prob / (1 - prob)
    alpha = (2.83 + 5.1 / b) * stddev
    m = torch.floor((count + 1) * prob)
    out = torch.zeros_like(count)
    pending = torch.arange(count.numel(), device=count.device)
    while pending.numel():
        n, a_, b_, c_, r_, m_ = count[pending], a[pending], b[pending], c[pending], r[pending], m[pending]
        u = torch.rand(pending.shape, dtype=count.dtype, device=count.device) - 0.5
        v = torch.rand(pending.shape, dtype=count.dtype, device=count.device)
        us = 0.5 - u.abs()
        k = torch.floor((2 * a_ / us + b_) * u + c_)
        valid = (k >= 0) & (k <= n)
        box = valid & (us >= 0.07) & (v <= v_r[pending])
        kc = k.clamp(min=0)
        nk = (n - kc).clamp(min=0)
        log_v = torch.log(v * alpha[pending] / (a_ / (us * us) + b_))
        upper = ((m_ + 0.5) * torch.log((m_ + 1) / (r_ * (n - m_ + 1))) + (n + 1) * torch.log((n - m_ + 1) / (nk + 1))
                 + (kc + 0.5) * torch.log(r_ * (nk + 1) / (kc + 1)) + _stirling_tail(m_) + _stirling_tail(n - m_)
                 - _stirling_tail(kc) - _stirling_tail(nk))
        accept = box | (valid & (log_v <= upper))
        out[pending[accept]] = k[accept]
        pending = pending[~accept]
    return out


def _sample_binomial(count, prob):
    """Binomial draws of the broadcast shape of ``count`` and ``prob`` (no autograd)."""
    with torch.no_grad():
        count, prob = torch.broadcast_tensors(count.detach(), prob.detach())
        replayed = torch_binomial_replay(count, prob)
        if replayed is not None:
            return replayed
        dtype, shape = prob.dtype, prob.shape
        n, p = count.to(torch.float64).reshape(-1), prob.to(torch.float64).reshape(-1)
        # Sample the rarer outcome (q <= 1/2) and flip back.
        flip = p > 0.5
        q = torch.where(flip, 1 - p, p)
        live = (n > 0) & (q > 0)
        out = torch.zeros_like(n)
        for use, sampler in ((live & (n * q < 10), _inversion), (live & (n * q >= 10), _btrs)):
            idx = use.nonzero().squeeze(-1)
            if idx.numel():
                out[idx] = sampler(n[idx], q[idx])
        out = torch.where(flip, n - out, out)
        out = torch.where((n <= 0) | (p <= 0), 0.0, torch.where(p >= 1, n, out))
        return torch.where(torch.isnan(p), math.nan, out).to(dtype).reshape(shape)


def _clamp_by_zero(x):
    # max(x, 0) whose gradient at 0 is 1/2 (the average of the one-sided ones), as torch's.
    return (x.clamp(min=0) + x - x.clamp(max=0)) / 2


class Binomial(ProbsOrLogitsParam, Distribution):
    arg_constraints = {"total_count": constraints.nonnegative_integer, "probs": constraints.unit_interval,
                       "logits": constraints.real}
    has_enumerate_support = True
    _batch_params = ("total_count", "probs", "logits")

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        total_count, self._param = self._set_probs_or_logits(probs, logits, total_count)
        self.total_count = total_count.type_as(self._param)
        super().__init__(self._param.size(), validate_args=validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self):
        return self.total_count * self.probs

    @property
    def mode(self):
        return ((self.total_count + 1) * self.probs).floor().clamp(max=self.total_count)

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    def sample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        with torch.no_grad():
            return _sample_binomial(self.total_count.expand(shape), self.probs.expand(shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_factorial_n = torch.lgamma(self.total_count + 1)
        log_factorial_k = torch.lgamma(value + 1)
        log_factorial_nmk = torch.lgamma(self.total_count - value + 1)
        # n * log(1 + exp(logits)) in the overflow-free form max(l, 0) + log1p(exp(-|l|)).
        normalize_term = (self.total_count * _clamp_by_zero(self.logits)
                          + self.total_count * torch.log1p(torch.exp(-torch.abs(self.logits))) - log_factorial_n)
        return value * self.logits - log_factorial_k - log_factorial_nmk - normalize_term

    def entropy(self):
        total_count = int(self.total_count.max())
        if not self.total_count.min() == total_count:
            raise NotImplementedError("Inhomogeneous total count not supported by `entropy`.")
        log_prob = self.log_prob(self.enumerate_support(False))
        return -(torch.exp(log_prob) * log_prob).sum(0)

    def enumerate_support(self, expand=True):
        total_count = int(self.total_count.max())
        if not self.total_count.min() == total_count:
            raise NotImplementedError("Inhomogeneous total count not supported by `enumerate_support`.")
        values = torch.arange(1 + total_count, dtype=self._param.dtype, device=self._param.device)
        return self._enumerated(values, expand)
