"""``Gamma``: shape ``concentration``, inverse scale ``rate``; reparameterized through implicit gradients."""
from __future__ import annotations

import jitorch as torch

from . import constraints
from ._gamma_math import _gammainc, _StandardGamma
from .exp_family import ExponentialFamily
from .utils import broadcast_all

__all__ = ["Gamma"]


def _standard_gamma(concentration):
    """Gamma(concentration, 1) draws whose gradient in ``concentration`` is the implicit one (``_gamma_math``)."""
    return _StandardGamma.apply(concentration)


class Gamma(ExponentialFamily):
    """``Gamma(concentration, rate)``; ``rsample`` is differentiable in both parameters.

    >>> import jitorch
    >>> import jitorch.distributions as D
    >>> d = D.Gamma(jitorch.tensor([2.0]), jitorch.tensor([3.0]))
    >>> round(d.mean.item(), 4), round(d.log_prob(jitorch.tensor([1.0])).item(), 4)
    (0.6667, -0.8028)
    """

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0
    _batch_params = ("concentration", "rate")

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self):
        return self.concentration / self.rate.pow(2)

    def __init__(self, concentration, rate, validate_args=None):
        self.concentration, self.rate = broadcast_all(concentration, rate)
        super().__init__(self.concentration.size(), validate_args=validate_args)

    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        value = _standard_gamma(self.concentration.expand(shape)) / self.rate.expand(shape)
        # A large rate can underflow the quotient: keep it a positive normal number (in place, outside autograd).
        value.detach().clamp_(min=torch.finfo(value.dtype).tiny)
        return value

    def log_prob(self, value):
        value = torch.as_tensor(value, dtype=self.rate.dtype, device=self.rate.device)
        if self._validate_args:
            self._validate_sample(value)
        return (torch.xlogy(self.concentration, self.rate) + torch.xlogy(self.concentration - 1, value)
                - self.rate * value - torch.lgamma(self.concentration))

    def entropy(self):
        return (self.concentration - torch.log(self.rate) + torch.lgamma(self.concentration)
                + (1.0 - self.concentration) * torch.digamma(self.concentration))

    @property
    def _natural_params(self):
        return (self.concentration - 1, -self.rate)

    def _log_normalizer(self, x, y):
        return torch.lgamma(x + 1) + (x + 1) * torch.log(-y.reciprocal())

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return _gammainc(self.concentration, self.rate * value)
