"""``HalfCauchy``: ``|X|`` for ``X ~ Cauchy(0, scale)``."""
from __future__ import annotations

import math

import jitorch as torch

from . import constraints
from ._mixins import FoldedAtZero
from .cauchy import Cauchy
from .transformed_distribution import TransformedDistribution
from .transforms import AbsTransform

__all__ = ["HalfCauchy"]


class HalfCauchy(FoldedAtZero, TransformedDistribution):
    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, scale, validate_args=None):
        base_dist = Cauchy(0, scale, validate_args=False)
        super().__init__(base_dist, AbsTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(HalfCauchy, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def mean(self):
        return torch.full(self._extended_shape(), math.inf, dtype=self.scale.dtype, device=self.scale.device)

    @property
    def variance(self):
        return self.base_dist.variance

    def _folded_value(self, value):
        # torch's HalfCauchy (not its HalfNormal) takes the value in the scale's dtype, a number too.
        return torch.as_tensor(value, dtype=self.scale.dtype, device=self.scale.device)
