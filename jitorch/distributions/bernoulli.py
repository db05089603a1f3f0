"""``Bernoulli``: a coin parametrized by ``probs`` or ``logits``."""
from __future__ import annotations

import jitorch as torch
import jitorch.nn.functional as F

from . import constraints
from ._mixins import ProbsOrLogitsParam
from .exp_family import ExponentialFamily
from .utils import broadcast_all

__all__ = ["Bernoulli"]


class Bernoulli(ProbsOrLogitsParam, ExponentialFamily):
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True
    _mean_carrier_measure = 0
    _batch_params = ("probs", "logits")

    def __init__(self, probs=None, logits=None, validate_args=None):
        (self._param,) = self._set_probs_or_logits(probs, logits)
        super().__init__(self._param.size(), validate_args=validate_args)

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        mode = (self.probs >= 0.5).to(self.probs.dtype)
        return torch.where(self.probs == 0.5, torch.full_like(mode, float("nan")), mode)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        with torch.no_grad():
            return torch.bernoulli(self.probs.expand(shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -F.binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self):
        return F.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand=True):
        return self._enumerated(torch.arange(2, dtype=self._param.dtype, device=self._param.device), expand)

    @property
    def _natural_params(self):
        return (torch.logit(self.probs),)

    def _log_normalizer(self, x):
        return torch.log1p(torch.exp(x))
