"""``GeneralizedPareto``: the peaks-over-threshold family; exponential at ``concentration == 0``, bounded above for
negative ``concentration``. Sampled (reparameterized) by inverting its closed-form cdf."""
from __future__ import annotations

import math

import jitorch as torch

from . import constraints
from .distribution import Distribution
from .utils import broadcast_all

__all__ = ["GeneralizedPareto"]


def _eq_zero(concentration):
    # torch's ``isclose(concentration, 0)`` (atol 1e-8), against a zero of the parameter's own dtype: torch compares
    # with a float32 0 and so fails for float64 parameters, which are accepted here.
    return torch.isclose(concentration, torch.zeros_like(concentration))


class GeneralizedPareto(Distribution):
    """``GeneralizedPareto(loc, scale, concentration)``.

    >>> import jitorch
    >>> import jitorch.distributions as D
    >>> d = D.GeneralizedPareto(jitorch.tensor([0.0]), jitorch.tensor([1.0]), jitorch.tensor([0.5]))
    >>> round(d.mean.item(), 4), round(d.cdf(jitorch.tensor([1.0])).item(), 4)
    (2.0, 0.5556)
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive, "concentration": constraints.real}
    has_rsample = True
    _batch_params = ("loc", "scale", "concentration")

    def __init__(self, loc, scale, concentration, validate_args=None):
        self.loc, self.scale, self.concentration = broadcast_all(loc, scale, concentration)
        super().__init__(self.loc.size(), validate_args=validate_args)

    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        u = torch.rand(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.icdf(u)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        z = self._z(value)
        eq_zero = _eq_zero(self.concentration)
        safe_conc = torch.where(eq_zero, torch.ones_like(self.concentration), self.concentration)
        y = 1 / safe_conc + torch.ones_like(z)
        where_nonzero = torch.where(y == 0, y, y * torch.log1p(safe_conc * z))
        return -self.scale.log() - torch.where(eq_zero, z, where_nonzero)

    def log_survival_function(self, value):
        """``log(1 - cdf(value))``, accurate far in the upper tail."""
        if self._validate_args:
            self._validate_sample(value)
        z = self._z(value)
        eq_zero = _eq_zero(self.concentration)
        safe_conc = torch.where(eq_zero, torch.ones_like(self.concentration), self.concentration)
        where_nonzero = -torch.log1p(safe_conc * z) / safe_conc
        return torch.where(eq_zero, -z, where_nonzero)

    def log_cdf(self, value):
        """``log(cdf(value))``."""
        return torch.log1p(-torch.exp(self.log_survival_function(value)))

    def cdf(self, value):
        return torch.exp(self.log_cdf(value))

    def icdf(self, value):
        loc, scale, concentration = self.loc, self.scale, self.concentration
        eq_zero = _eq_zero(concentration)
        safe_conc = torch.where(eq_zero, torch.ones_like(concentration), concentration)
        logu = torch.log1p(-value)
        where_nonzero = loc + scale / safe_conc * torch.expm1(-safe_conc * logu)
        where_zero = loc - scale * logu
        return torch.where(eq_zero, where_zero, where_nonzero)

    def _z(self, x):
        return (x - self.loc) / self.scale

    @property
    def mean(self):
        valid = self.concentration < 1
        safe_conc = torch.where(valid, self.concentration, 0.5)
        return torch.where(valid, self.loc + self.scale / (1 - safe_conc), math.nan)

    @property
    def variance(self):
        valid = self.concentration < 0.5
        safe_conc = torch.where(valid, self.concentration, 0.25)
        result = self.scale**2 / ((1 - safe_conc) ** 2 * (1 - 2 * safe_conc))
        return torch.where(valid, result, math.nan)

    def entropy(self):
        ans = torch.log(self.scale) + self.concentration + 1
        return torch.broadcast_to(ans, self._batch_shape)

    @property
    def mode(self):
        return self.loc

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        lower = self.loc
        upper = torch.where(self.concentration < 0, lower - self.scale / self.concentration, math.inf)
        return constraints.interval(lower, upper)
