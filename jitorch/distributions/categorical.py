"""``Categorical``: one of ``K`` events, parametrized by ``probs`` or ``logits`` over the last dim."""
from __future__ import annotations

import jitorch as torch

from . import constraints
from ._mixins import ProbsOrLogitsParam
from .distribution import Distribution
from .utils import _delegated, _one_of

__all__ = ["Categorical"]


class Categorical(ProbsOrLogitsParam, Distribution):
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    has_enumerate_support = True
    _is_binary = False
    _batch_params = ("probs", "logits")
    _shared_attrs = ("_num_events",)

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits)
        if probs is not None:
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
        else:
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)
        self._param = self.probs if probs is not None else self.logits
        self._num_events = self._param.size()[-1]
        batch_shape = self._param.size()[:-1] if self._param.dim() > 1 else torch.Size()
        super().__init__(batch_shape, validate_args=validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @property
    def mean(self):
        return torch.full(self._extended_shape(), float("nan"), dtype=self.probs.dtype, device=self.probs.device)

    @property
    def mode(self):
        return self.probs.argmax(dim=-1)

    @property
    def variance(self):
        return torch.full(self._extended_shape(), float("nan"), dtype=self.probs.dtype, device=self.probs.device)

    def sample(self, sample_shape=torch.Size()):
        if not isinstance(sample_shape, torch.Size):
            sample_shape = torch.Size(sample_shape)
        with torch.no_grad():
            probs_2d = self.probs.reshape(-1, self._num_events)
            samples_2d = torch.multinomial(probs_2d, sample_shape.numel(), True).T
        return samples_2d.reshape(self._extended_shape(sample_shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = value.long().unsqueeze(-1)
        log_pmf = self.logits
        if value.shape[:-1] != log_pmf.shape[:-1]:  # sample dims, or size-1 dims, broadcast against the batch
            value, log_pmf = torch.broadcast_tensors(value, log_pmf)
            value = value[..., :1]
        return log_pmf.gather(-1, value).squeeze(-1)

    def entropy(self):
        min_real = torch.finfo(self.logits.dtype).min
        logits = torch.clamp(self.logits, min=min_real)
        p_log_p = logits * self.probs
        return -p_log_p.sum(-1)

    def enumerate_support(self, expand=True):
        return self._enumerated(torch.arange(self._num_events, dtype=torch.long, device=self._param.device), expand)


class CategoricalBased:
    """Mixin of the families built on a ``Categorical`` held as ``_categorical`` (OneHotCategorical,
    ExpRelaxedCategorical, Multinomial): its parameters are theirs."""

    probs = _delegated("_categorical", "probs")
    logits = _delegated("_categorical", "logits")
    param_shape = _delegated("_categorical", "param_shape")

    def _set_categorical(self, probs, logits):
        """Build ``_categorical`` from the given one of ``probs``/``logits``; returns the batch and event shapes."""
        self._categorical = Categorical(probs, logits)
        return self._categorical.batch_shape, self._categorical.param_shape[-1:]

    def _new(self, *args, **kwargs):
        return self._categorical._new(*args, **kwargs)
