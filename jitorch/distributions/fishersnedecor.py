"""``FisherSnedecor``: the ratio of two scaled chi-squared draws, ``(G1 / df1) / (G2 / df2)`` (reparameterized)."""
from __future__ import annotations

import math

import jitorch as torch

from . import constraints
from .distribution import Distribution
from .gamma import Gamma
from .utils import broadcast_all

__all__ = ["FisherSnedecor"]


class FisherSnedecor(Distribution):
    """``FisherSnedecor(df1, df2)``: the F distribution on ``(0, inf)``.

    >>> import jitorch
    >>> import jitorch.distributions as D
    >>> d = D.FisherSnedecor(jitorch.tensor([4.0]), jitorch.tensor([6.0]))
    >>> round(d.mean.item(), 4), round(d.log_prob(jitorch.tensor([1.0])).item(), 4)
    (1.5, -0.8802)
    """

    arg_constraints = {"df1": constraints.positive, "df2": constraints.positive}
    support = constraints.positive
    has_rsample = True
    _batch_params = ("df1", "df2", "_gamma1", "_gamma2")

    def __init__(self, df1, df2, validate_args=None):
        self.df1, self.df2 = broadcast_all(df1, df2)
        self._gamma1 = Gamma(self.df1 * 0.5, self.df1)
        self._gamma2 = Gamma(self.df2 * 0.5, self.df2)
        super().__init__(self.df1.size(), validate_args=validate_args)

    # torch writes nan into a copy where a moment is undefined; ``where`` on the argument first keeps the same zero
    # gradient there (a where after the formula would multiply 0 by an infinite derivative at df2 == 2).
    @property
    def mean(self):
        df2 = torch.where(self.df2 <= 2, math.nan, self.df2)
        return df2 / (df2 - 2)

    @property
    def mode(self):
        mode = (self.df1 - 2) / self.df1 * self.df2 / (self.df2 + 2)
        return torch.where(self.df1 <= 2, math.nan, mode)

    @property
    def variance(self):
        df2 = torch.where(self.df2 <= 4, math.nan, self.df2)
        return 2 * df2.pow(2) * (self.df1 + df2 - 2) / (self.df1 * (df2 - 2).pow(2) * (df2 - 4))

    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        X1 = self._gamma1.rsample(sample_shape).view(shape)
        X2 = self._gamma2.rsample(sample_shape).view(shape)
        # Both the denominator and the ratio stay positive normal numbers (a tiny df underflows the gamma draws).
        tiny = torch.finfo(X2.dtype).tiny
        return (X1 / X2.clamp(min=tiny)).clamp(min=tiny)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        ct1 = self.df1 * 0.5
        ct2 = self.df2 * 0.5
        ct3 = self.df1 / self.df2
        t1 = (ct1 + ct2).lgamma() - ct1.lgamma() - ct2.lgamma()
        t2 = ct1 * ct3.log() + (ct1 - 1) * torch.log(value)
        t3 = (ct1 + ct2) * torch.log1p(ct3 * value)
        return t1 + t2 - t3
