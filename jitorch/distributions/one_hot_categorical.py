"""``OneHotCategorical`` (samples are one-hot vectors) and ``OneHotCategoricalStraightThrough``."""
from __future__ import annotations

import jitorch as torch
import jitorch.nn.functional as F

from . import constraints
from .categorical import CategoricalBased
from .distribution import Distribution
from .utils import _delegated

__all__ = ["OneHotCategorical", "OneHotCategoricalStraightThrough"]


class OneHotCategorical(CategoricalBased, Distribution):
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.one_hot
    has_enumerate_support = True
    _batch_params = ("_categorical",)

    def __init__(self, probs=None, logits=None, validate_args=None):
        super().__init__(*self._set_categorical(probs, logits), validate_args=validate_args)

    _param = _delegated("_categorical", "_param")

    @property
    def mean(self):
        return self._categorical.probs

    @property
    def mode(self):
        probs = self._categorical.probs
        return F.one_hot(probs.argmax(dim=-1), num_classes=probs.shape[-1]).to(probs.dtype)

    @property
    def variance(self):
        return self._categorical.probs * (1 - self._categorical.probs)

    def sample(self, sample_shape=torch.Size()):
        probs = self._categorical.probs
        indices = self._categorical.sample(torch.Size(sample_shape))
        return F.one_hot(indices, self._categorical._num_events).to(probs.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        indices = value.max(-1)[1]
        return self._categorical.log_prob(indices)

    def entropy(self):
        return self._categorical.entropy()

    def enumerate_support(self, expand=True):
        values = torch.eye(self.event_shape[0], dtype=self._param.dtype, device=self._param.device)
        return self._enumerated(values, expand)


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """One-hot samples whose gradient is that of ``probs`` (the straight-through estimator, Bengio et al. 2013)."""

    has_rsample = True

    def rsample(self, sample_shape=torch.Size()):
        samples = self.sample(sample_shape)
        probs = self._categorical.probs
        return samples + (probs - probs.detach())
