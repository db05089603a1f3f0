"""``kl_divergence`` and ``register_kl``: closed-form KL(p || q) looked up by the types of ``p`` and ``q``."""
from __future__ import annotations

import math

import jitorch as torch
import jitorch.nn.functional as F

from .discrete import Bernoulli, Categorical
from .distribution import Distribution
from .multivariate_normal import Independent, MultivariateNormal, _batch_mahalanobis, _sum_rightmost
from .normal import Normal, Uniform

__all__ = ["kl_divergence", "register_kl"]

_KL_REGISTRY = {}


def register_kl(type_p, type_q):
    """Decorator registering a pairwise function ``kl(p, q)`` for ``kl_divergence``."""
    if not (isinstance(type_p, type) and issubclass(type_p, Distribution)):
        raise TypeError(f"Expected type_p to be a Distribution subclass but got {type_p}")
    if not (isinstance(type_q, type) and issubclass(type_q, Distribution)):
        raise TypeError(f"Expected type_q to be a Distribution subclass but got {type_q}")

    def decorator(fun):
        _KL_REGISTRY[type_p, type_q] = fun
        return fun

    return decorator


def _dispatch_kl(type_p, type_q):
    matches = [(p, q) for p, q in _KL_REGISTRY if issubclass(type_p, p) and issubclass(type_q, q)]
    if not matches:
        return None
    mro_p, mro_q = type_p.__mro__, type_q.__mro__
    best = min(matches, key=lambda m: (mro_p.index(m[0]), mro_q.index(m[1])))
    return _KL_REGISTRY[best]


def kl_divergence(p, q):
    """KL(p || q) for a registered pair of distribution types; batch-shaped."""
    fun = _dispatch_kl(type(p), type(q))
    if fun is None:
        raise NotImplementedError(f"No KL(p || q) is implemented for p type {p.__class__.__name__} and "
                                  f"q type {q.__class__.__name__}")
    return fun(p, q)


def _where(cond, fill, t):
    return torch.where(cond, torch.full_like(t, fill), t)


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    var_ratio = (p.scale / q.scale).pow(2)
    t1 = ((p.loc - q.loc) / q.scale).pow(2)
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    t1 = p.probs * (F.softplus(-q.logits) - F.softplus(-p.logits))
    t1 = _where(p.probs == 0, 0.0, _where(q.probs == 0, math.inf, t1))
    t2 = (1 - p.probs) * (F.softplus(q.logits) - F.softplus(p.logits))
    t2 = _where(p.probs == 1, 0.0, _where(q.probs == 1, math.inf, t2))
    return t1 + t2


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    t = p.probs * (p.logits - q.logits)
    t = _where((q.probs == 0).expand_as(t), math.inf, t)
    t = _where((p.probs == 0).expand_as(t), 0.0, t)
    return t.sum(-1)


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = ((q.high - q.low) / (p.high - p.low)).log()
    return _where((q.low > p.low) | (q.high < p.high), math.inf, result)


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_mvn_mvn(p, q):
    if p.event_shape != q.event_shape:
        raise ValueError("KL-divergence between two Multivariate Normals with different event shapes cannot be "
                         "computed")
    half_det_p = p._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    half_det_q = q._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    n = p.event_shape[0]
    shape = torch.broadcast_shapes(tuple(p._unbroadcasted_scale_tril.shape[:-2]),
                                   tuple(q._unbroadcasted_scale_tril.shape[:-2]))
    q_L = q._unbroadcasted_scale_tril.expand(tuple(shape) + (n, n))
    p_L = p._unbroadcasted_scale_tril.expand(tuple(shape) + (n, n))
    term2 = torch.linalg.solve_triangular(q_L, p_L, upper=False).pow(2).flatten(-2).sum(-1)
    diff = q.loc - p.loc
    q_L = q._unbroadcasted_scale_tril.expand(tuple(diff.shape[:-1]) + (n, n))
    term3 = _batch_mahalanobis(q_L, diff)
    return half_det_q - half_det_p + 0.5 * (term2 + term3 - n)


@register_kl(Independent, Independent)
def _kl_independent_independent(p, q):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError
    return _sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)
