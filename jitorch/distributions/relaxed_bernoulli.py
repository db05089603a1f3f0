"""``RelaxedBernoulli`` (binary Concrete / Gumbel-softmax) and its logit-space base ``LogitRelaxedBernoulli``."""
from __future__ import annotations

import jitorch as torch

from . import constraints
from ._mixins import ProbsOrLogitsParam
from .distribution import Distribution
from .transformed_distribution import TransformedDistribution
from .transforms import SigmoidTransform
from .utils import _delegated, broadcast_all, clamp_probs

__all__ = ["LogitRelaxedBernoulli", "RelaxedBernoulli"]


class LogitRelaxedBernoulli(ProbsOrLogitsParam, Distribution):
    """The logit of a ``RelaxedBernoulli`` sample: ``(logit(u) + logits) / temperature``, ``u ~ U(0, 1)``."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.real
    _batch_params = ("probs", "logits")
    _shared_attrs = ("temperature",)

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        self.temperature = temperature
        (self._param,) = self._set_probs_or_logits(probs, logits)
        super().__init__(self._param.size(), validate_args=validate_args)

    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        probs = clamp_probs(self.probs.expand(shape))
        uniforms = clamp_probs(torch.rand(shape, dtype=probs.dtype, device=probs.device))
        return (uniforms.log() - (-uniforms).log1p() + probs.log() - (-probs).log1p()) / self.temperature

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        diff = logits - value.mul(self.temperature)
        return self.temperature.log() + diff - 2 * diff.exp().log1p()


class RelaxedBernoulli(TransformedDistribution):
    """A continuous relaxation of ``Bernoulli`` on (0, 1): ``sigmoid`` of a ``LogitRelaxedBernoulli``.

    >>> import jitorch
    >>> import jitorch.distributions as D
    >>> d = D.RelaxedBernoulli(jitorch.tensor(0.5), probs=jitorch.tensor([0.3, 0.9]))
    >>> d.rsample().shape, d.has_rsample
    (jitorch.Size([2]), True)
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        base_dist = LogitRelaxedBernoulli(temperature, probs, logits)
        super().__init__(base_dist, SigmoidTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(RelaxedBernoulli, _instance)
        return super().expand(batch_shape, _instance=new)

    temperature = _delegated("base_dist", "temperature")
    logits = _delegated("base_dist", "logits")
    probs = _delegated("base_dist", "probs")
