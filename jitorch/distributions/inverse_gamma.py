"""``InverseGamma``: ``1 / X`` for ``X ~ Gamma(concentration, rate)`` (reparameterized through the Gamma's)."""
from __future__ import annotations

import math

import jitorch as torch

from . import constraints
from .gamma import Gamma
from .transformed_distribution import TransformedDistribution
from .transforms import PowerTransform
from .utils import _delegated

__all__ = ["InverseGamma"]


class InverseGamma(TransformedDistribution):
    """``InverseGamma(concentration, rate)`` on ``(0, inf)``.

    >>> import jitorch
    >>> import jitorch.distributions as D
    >>> d = D.InverseGamma(jitorch.tensor([3.0]), jitorch.tensor([2.0]))
    >>> round(d.mean.item(), 4), round(d.mode.item(), 4)
    (1.0, 0.5)
    """

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, concentration, rate, validate_args=None):
        base_dist = Gamma(concentration, rate, validate_args=validate_args)
        neg_one = -base_dist.rate.new_ones(())
        super().__init__(base_dist, PowerTransform(neg_one), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(InverseGamma, _instance)
        return super().expand(batch_shape, _instance=new)

    concentration = _delegated("base_dist", "concentration")
    rate = _delegated("base_dist", "rate")

    @property
    def mean(self):
        # Infinite where the first moment diverges (concentration <= 1).
        result = self.rate / (self.concentration - 1)
        return torch.where(self.concentration > 1, result, math.inf)

    @property
    def mode(self):
        return self.rate / (self.concentration + 1)

    @property
    def variance(self):
        result = self.rate.square() / ((self.concentration - 1).square() * (self.concentration - 2))
        return torch.where(self.concentration > 2, result, math.inf)

    def entropy(self):
        return (self.concentration + self.rate.log() + self.concentration.lgamma()
                - (1 + self.concentration) * self.concentration.digamma())
