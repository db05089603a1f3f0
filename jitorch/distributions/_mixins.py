"""Mixins for what several families share beyond ``Distribution``: a location that is both mean and mode, parameters
given as ``probs`` or ``logits``, and the folding of a zero-centred distribution onto ``[0, inf)``.

Each goes before the ``Distribution`` base in a family's bases, so that its members win over the base's.
"""
from __future__ import annotations

import math

import jitorch as torch

from .utils import _delegated, _one_of, broadcast_all, lazy_property, logits_to_probs, probs_to_logits

__all__ = ["FoldedAtZero", "MeanModeAtLoc", "ProbsOrLogits", "ProbsOrLogitsParam"]


class MeanModeAtLoc:
    """Symmetric unimodal families with a mean (Normal, Laplace, the multivariate normals, VonMises): mean and mode
    are both ``loc``."""

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc


class ProbsOrLogits:
    """Families given ``probs`` or ``logits``, exactly one: the one given is stored, the other is a ``lazy_property``
    computed from it on first access (and then held too, which ``expand`` carries over)."""

    _is_binary = True  # each entry a Bernoulli probability (sigmoid/logit); False: a softmax over the last dim

    def _set_probs_or_logits(self, probs, logits, *others):
        """Store the given one of ``probs``/``logits`` broadcast with ``others``; returns ``(*others, it)``."""
        _one_of(probs, logits)
        name, value = ("probs", probs) if probs is not None else ("logits", logits)
        *others, value = broadcast_all(*others, value)
        setattr(self, name, value)
        return (*others, value)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=self._is_binary)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=self._is_binary)


class ProbsOrLogitsParam(ProbsOrLogits):
    """``ProbsOrLogits`` that also keep the given tensor as ``_param`` (all of torch's but Geometric), for its shape,
    dtype and device."""

    @property
    def param_shape(self):
        return self._param.size()

    def _new(self, *args, **kwargs):
        return self._param.new(*args, **kwargs)

    def expand(self, batch_shape, _instance=None):
        new = super().expand(batch_shape, _instance)
        # torch's order: where both are held, ``_param`` follows ``logits``.
        new._param = new.logits if "logits" in self.__dict__ else new.probs
        return new


class FoldedAtZero:
    """``|X|`` for ``X ~ base_dist`` symmetric about 0 (HalfNormal, HalfCauchy): the density doubles on ``[0, inf)``,
    the cdf is ``2 F - 1``, the entropy loses ``log 2``."""

    scale = _delegated("base_dist", "scale")

    @property
    def mode(self):
        return torch.zeros_like(self.scale)

    def _folded_value(self, value):
        return value

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = self._folded_value(value)
        log_prob = self.base_dist.log_prob(value) + math.log(2)
        return torch.where(value >= 0, log_prob, -math.inf)

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 2 * self.base_dist.cdf(value) - 1

    def icdf(self, prob):
        return self.base_dist.icdf((prob + 1) / 2)

    def entropy(self):
        return self.base_dist.entropy() - math.log(2)
