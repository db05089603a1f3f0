"""``NegativeBinomial``: failures before ``total_count`` successes; sampled as a Gamma-Poisson mixture."""
from __future__ import annotations

import jitorch as torch
import jitorch.nn.functional as F

from . import constraints
from ._mixins import ProbsOrLogitsParam
from .distribution import Distribution
from .gamma import Gamma
from .utils import lazy_property

__all__ = ["NegativeBinomial"]


class NegativeBinomial(ProbsOrLogitsParam, Distribution):
    """``NegativeBinomial(total_count, probs=None, logits=None)`` on the nonnegative integers; ``probs`` is the
    success probability of each trial, as torch's.

    >>> import jitorch
    >>> import jitorch.distributions as D
    >>> d = D.NegativeBinomial(jitorch.tensor([3.0]), probs=jitorch.tensor([0.25]))
    >>> round(d.mean.item(), 4), round(d.log_prob(jitorch.tensor([2.0])).item(), 4)
    (1.0, -1.8439)
    """

    arg_constraints = {"total_count": constraints.greater_than_eq(0), "probs": constraints.half_open_interval(0.0, 1.0),
                       "logits": constraints.real}
    support = constraints.nonnegative_integer
    _batch_params = ("total_count", "probs", "logits")

    def __init__(self, total_count, probs=None, logits=None, validate_args=None):
        total_count, self._param = self._set_probs_or_logits(probs, logits, total_count)
        self.total_count = total_count.type_as(self._param)
        super().__init__(self._param.size(), validate_args=validate_args)

    @property
    def mean(self):
        return self.total_count * torch.exp(self.logits)

    @property
    def mode(self):
        return ((self.total_count - 1) * self.logits.exp()).floor().clamp(min=0.0)

    @property
    def variance(self):
        return self.mean / torch.sigmoid(-self.logits)

    @lazy_property
    def _gamma(self):
        # The Poisson rate's mixing distribution: Gamma(total_count, rate = (1 - p) / p).
        return Gamma(concentration=self.total_count, rate=torch.exp(-self.logits), validate_args=False)

    def sample(self, sample_shape=torch.Size()):
        with torch.no_grad():
            rate = self._gamma.sample(sample_shape=sample_shape)
            return torch.poisson(rate)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_unnormalized_prob = self.total_count * F.logsigmoid(-self.logits) + value * F.logsigmoid(self.logits)
        log_normalization = (-torch.lgamma(self.total_count + value) + torch.lgamma(1.0 + value)
                             + torch.lgamma(self.total_count))
        # total_count + value == 0 is the certain outcome of a zero-trial distribution: lgamma(0) would make it nan.
        log_normalization = log_normalization.masked_fill(self.total_count + value == 0.0, 0.0)
        return log_unnormalized_prob - log_normalization
