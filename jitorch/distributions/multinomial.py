"""``Multinomial``: counts of ``total_count`` categorical draws."""
from __future__ import annotations

import math

import jitorch as torch

from . import constraints
from .binomial import Binomial
from .categorical import CategoricalBased
from .distribution import Distribution
from .utils import broadcast_all

__all__ = ["Multinomial"]


class Multinomial(CategoricalBased, Distribution):
    """``total_count`` must be one int (``log_prob`` does not need it: it is the sum of the value's counts).

    >>> import jitorch
    >>> import jitorch.distributions as D
    >>> d = D.Multinomial(10, probs=jitorch.tensor([1.0, 1.0, 2.0]))
    >>> d.sample().sum().item(), round(d.log_prob(jitorch.tensor([3.0, 2.0, 5.0])).exp().item(), 4)
    (10.0, 0.0769)
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    # As torch, ``_binomial`` (which only ``entropy`` uses) is not carried over by ``expand``.
    _batch_params = ("_categorical",)
    _shared_attrs = ("total_count",)

    @property
    def mean(self):
        return self.probs * self.total_count

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        if not isinstance(total_count, int):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = total_count
        batch_shape, event_shape = self._set_categorical(probs, logits)
        self._binomial = Binomial(total_count=total_count, probs=self.probs)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.multinomial(self.total_count)

    def sample(self, sample_shape=torch.Size()):
        sample_shape = torch.Size(sample_shape)
        samples = self._categorical.sample(torch.Size((self.total_count,)) + sample_shape)
        # (total_count, *sample, *batch) indices -> (*sample, *batch, total_count), then counted per category.
        samples = samples.permute(*range(1, samples.dim()), 0)
        counts = torch.zeros(self._extended_shape(sample_shape), dtype=samples.dtype, device=samples.device)
        counts = counts.scatter_add(-1, samples, torch.ones_like(samples))
        return counts.type_as(self.probs)

    def entropy(self):
        n = torch.tensor(self.total_count)
        cat_entropy = self._categorical.entropy()
        term1 = n * cat_entropy - torch.lgamma(n + 1)
        support = self._binomial.enumerate_support(expand=False)[1:]
        binomial_probs = torch.exp(self._binomial.log_prob(support))
        weights = torch.lgamma(support + 1)
        term2 = (binomial_probs * weights).sum([0, -1])
        return term1 + term2

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        log_factorial_n = torch.lgamma(value.sum(-1) + 1)
        log_factorial_xs = torch.lgamma(value + 1).sum(-1)
        # A category of probability 0 drawn 0 times contributes 0 (not 0 * -inf = nan).
        logits = torch.where((value == 0) & (logits == -math.inf), torch.zeros_like(logits), logits)
        log_powers = (logits * value).sum(-1)
        return log_factorial_n - log_factorial_xs + log_powers
