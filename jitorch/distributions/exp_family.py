"""``ExponentialFamily``: distributions with density ``exp(<t(x), theta> - F(theta) + k(x))``.

Subclasses give their natural parameters ``theta`` and log normalizer ``F``; the entropy (and the generic
same-family KL in ``kl.py``) then follow from the gradient of ``F`` (Bregman divergences, Nielsen & Nock).
"""
from __future__ import annotations

import jitorch as torch

from .distribution import Distribution

__all__ = ["ExponentialFamily"]


class ExponentialFamily(Distribution):
    @property
    def _natural_params(self):
        raise NotImplementedError

    def _log_normalizer(self, *natural_params):
        raise NotImplementedError

    @property
    def _mean_carrier_measure(self):
        raise NotImplementedError

    def entropy(self):
        """``F(theta) - <theta, grad F(theta)> - E[k(x)]``, the gradient taken by autograd (kept differentiable)."""
        result = -self._mean_carrier_measure
        nparams = [p.detach().requires_grad_() for p in self._natural_params]
        lg_normal = self._log_normalizer(*nparams)
        gradients = torch.autograd.grad(lg_normal.sum(), nparams, create_graph=True)
        result = result + lg_normal
        for param, grad in zip(nparams, gradients):
            result = result - (param * grad).reshape(tuple(self._batch_shape) + (-1,)).sum(-1)
        return result
