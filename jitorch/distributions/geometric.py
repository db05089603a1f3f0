"""``Geometric``: the number of failures before the first success of ``probs``."""
from __future__ import annotations

import jitorch as torch
import jitorch.nn.functional as F

from . import constraints
from ._mixins import ProbsOrLogits
from .distribution import Distribution
from .utils import broadcast_all

__all__ = ["Geometric"]


class Geometric(ProbsOrLogits, Distribution):
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.nonnegative_integer
    _batch_params = ("probs", "logits")

    def __init__(self, probs=None, logits=None, validate_args=None):
        (probs_or_logits,) = self._set_probs_or_logits(probs, logits)
        super().__init__(probs_or_logits.size(), validate_args=validate_args)
        # probs = 0 passes unit_interval but has no geometric distribution.
        if self._validate_args and probs is not None:
            value = self.probs
            valid = value > 0
            if not bool(valid.all()):
                raise ValueError(f"Expected parameter probs ({type(value).__name__} of shape {tuple(value.shape)}) of "
                                 f"distribution {self!r} to be positive but found invalid values:\n{value[~valid]}")

    @property
    def mean(self):
        return 1.0 / self.probs - 1.0

    @property
    def mode(self):
        return torch.zeros_like(self.probs)

    @property
    def variance(self):
        return (1.0 / self.probs - 1.0) / self.probs

    def sample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        tiny = torch.finfo(self.probs.dtype).tiny
        with torch.no_grad():
            # Inversion: floor(log(u) / log(1 - p)), u in [tiny, 1) so the log stays finite.
            u = torch.empty(shape, dtype=self.probs.dtype, device=self.probs.device).uniform_(tiny, 1)
            return (u.log() / (-self.probs).log1p()).floor()

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value, probs = broadcast_all(value, self.probs)
        # p = 1 puts all mass on 0: 0 * log(0) must be 0 there, not nan.
        probs = torch.where((probs == 1) & (value == 0), torch.zeros_like(probs), probs)
        return value * (-probs).log1p() + self.probs.log()

    def entropy(self):
        return F.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none") / self.probs
