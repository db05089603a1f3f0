"""Distribution, embedding and margin losses of ``nn.functional``: ``kl_div``, ``poisson_nll_loss``,
``gaussian_nll_loss``, ``cosine_embedding_loss``, ``margin_ranking_loss``, ``hinge_embedding_loss``,
``triplet_margin_loss``, ``triplet_margin_with_distance_loss``, ``soft_margin_loss``, ``multi_margin_loss``,
``multilabel_margin_loss`` and ``multilabel_soft_margin_loss``.

Logs that PyTorch masks afterwards (``0 * log(0)``) read a safe value here, so a masked entry's gradient is 0, not NaN.

>>> import jitorch
>>> import jitorch.nn.functional as F
>>> F.kl_div(jitorch.tensor([[0.5, 0.5]]).log(), jitorch.tensor([[0.5, 0.5]]), reduction="batchmean")
tensor(0.)
>>> F.margin_ranking_loss(jitorch.tensor([1.0]), jitorch.tensor([2.0]), jitorch.tensor([1.0]))
tensor(1.)
"""
from __future__ import annotations

import math

from .._stat_checks import warn_at_caller
from .. import _creation, _dtype
from .._pointwise import minimum, where
from ..amp._cast_mode import autocast_float32
from ..autograd.grad_mode import is_grad_enabled, no_grad
from ._functional_activation import logsigmoid, softplus
from ._functional_attention import _clamp_min_value_only, pairwise_distance
from ._functional_loss import legacy_reduction, reduce_loss, resolve_reduction

__all__ = ["kl_div", "poisson_nll_loss", "gaussian_nll_loss", "cosine_embedding_loss", "margin_ranking_loss",
           "hinge_embedding_loss", "triplet_margin_loss", "triplet_margin_with_distance_loss", "soft_margin_loss",
           "multi_margin_loss", "multilabel_margin_loss", "multilabel_soft_margin_loss"]


def _xlogx(t):
    """``t * log(t)`` with 0 at ``t == 0`` (and a finite gradient there)."""
    zero = t == 0
    return where(zero, 0.0, t * where(zero, 1.0, t).log())


@autocast_float32
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """Kullback-Leibler divergence ``target * (log(target) - input)`` for log-probabilities ``input``.

    ``reduction='batchmean'`` divides the sum by the batch size (the mathematical KL divergence); ``'mean'`` divides
    by the number of elements, with PyTorch's warning.
    """
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce)
    elif reduction == "mean":
        warn_at_caller("reduction: 'mean' divides the total loss by both the batch size and the support size."
                       "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                       "'mean' will be changed to behave the same as 'batchmean' in the next major release.")
    if reduction != "batchmean":
        reduction = resolve_reduction(None, None, reduction)
    if log_target:
        loss = target.exp() * (target - input)
    else:
        loss = _xlogx(target) - target * input
    if reduction == "batchmean":
        total = loss.sum()
        return total / input.shape[0] if input.dim() != 0 else total
    return reduce_loss(loss, reduction)


@autocast_float32
def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                     reduction="mean"):
    """Poisson negative log likelihood: ``exp(input) - target * input`` (``log_input``), else
    ``input - target * log(input + eps)``; ``full`` adds Stirling's approximation of ``log(target!)``."""
    reduction = resolve_reduction(size_average, reduce, reduction)
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        small = target <= 1
        safe = where(small, 2.0, target)  # the masked entries would be log(0) = -inf
        stirling = safe * safe.log() - safe + 0.5 * (2 * math.pi * safe).log()
        loss = loss + where(small, 0.0, stirling)
    return reduce_loss(loss, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """Gaussian negative log likelihood ``0.5 * (log(var) + (input - target) ** 2 / var)`` (var clamped at eps)."""
    if isinstance(var, (int, float)):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = var * _creation.ones_like(input)
    elif bool((var < 0).any()):
        raise ValueError("var has negative entry/entries")
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)
        elif input.dim() == var.dim() and sum(y for x, y in zip(input.shape, var.shape) if x != y) == 1:
            pass  # one broadcast dim of size 1: homoscedastic along it
        else:
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    var = _clamp_min_value_only(var, eps)  # PyTorch clamps a clone in place under no_grad
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return reduce_loss(loss, reduction)


@autocast_float32
def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """``1 - cos(x1, x2)`` where ``target == 1``, ``max(0, cos(x1, x2) - margin)`` where ``target == -1``."""
    reduction = resolve_reduction(size_average, reduce, reduction)
    dim = target.dim()
    if dim not in (0, 1):
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if dim == 1 and (input1.dim() != 2 or input2.dim() != 2):
        raise RuntimeError(f"1D target tensor expects 2D input tensors, but found inputs with sizes "
                           f"{list(input1.shape)} and {list(input2.shape)}.")
    if dim == 0 and (input1.dim() != 1 or input2.dim() != 1):
        raise RuntimeError(f"0D target tensor expects 1D input tensors, but found inputs with sizes "
                           f"{list(input1.shape)} and {list(input2.shape)}.")
    prod = (input1 * input2).sum(dim)
    mag1 = (input1 * input1).sum(dim) + 1e-12
    mag2 = (input2 * input2).sum(dim) + 1e-12
    cos = prod / (mag1 * mag2).sqrt()
    loss = where(target == 1, 1 - cos, 0.0) + where(target == -1, (cos - margin).clamp_min(0), 0.0)
    return reduce_loss(loss, reduction)


@autocast_float32
def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """``max(0, -target * (input1 - input2) + margin)``."""
    reduction = resolve_reduction(size_average, reduce, reduction)
    if input1.dim() != input2.dim() or input1.dim() != target.dim():
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension but got sizes: "
                           f"input1: {input1.size()}, input2: {input2.size()}, target: {target.size()} ")
    return reduce_loss((-target * (input1 - input2) + margin).clamp_min(0), reduction)


@autocast_float32
def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    """``input`` where ``target == 1``, ``max(0, margin - input)`` where ``target == -1``."""
    reduction = resolve_reduction(size_average, reduce, reduction)
    loss = where(target != 1, (margin - input).clamp_min(0), 0.0) + where(target != -1, input, 0.0)
    return reduce_loss(loss, reduction)


def _check_triplet_dims(anchor, positive, negative):
    a, p, n = anchor.dim(), positive.dim(), negative.dim()
    if not a == p == n:
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have the same number of "
                           f"dimensions, but got: anchor {a}D, positive {p}D, and negative {n}D inputs")


@autocast_float32
def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    """``max(0, margin + d(anchor, positive) - d(anchor, negative))`` with the p-norm pairwise distance ``d``."""
    reduction = resolve_reduction(size_average, reduce, reduction)
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    _check_triplet_dims(anchor, positive, negative)
    dist_pos = pairwise_distance(anchor, positive, p, eps)
    dist_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        dist_neg = minimum(dist_neg, pairwise_distance(positive, negative, p, eps))
    return reduce_loss((margin + dist_pos - dist_neg).clamp_min(0), reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None, margin=1.0, swap=False,
                                      reduction="mean"):
    """``triplet_margin_loss`` with any ``distance_function(x, y)`` (default: ``pairwise_distance``)."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    _check_triplet_dims(anchor, positive, negative)
    distance = pairwise_distance if distance_function is None else distance_function
    dist_pos = distance(anchor, positive)
    dist_neg = distance(anchor, negative)
    if swap:
        dist_neg = minimum(dist_neg, distance(positive, negative))
    return reduce_loss((margin + dist_pos - dist_neg).clamp_min(0), reduction)


@autocast_float32
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Two-class logistic loss ``log(1 + exp(-target * input))`` (targets are 1 or -1)."""
    reduction = resolve_reduction(size_average, reduce, reduction)
    if target.requires_grad and is_grad_enabled():
        # ATen's kernel has no target gradient and refuses one rather than silently dropping it.
        raise RuntimeError("The function 'soft_margin_loss' is not differentiable with respect to argument 'target'. "
                           "This input cannot have requires_grad True.")
    return reduce_loss(softplus(-input * target), reduction)


def _multi_targets(input, target, op):
    if target.dtype is not _dtype.int64:
        raise RuntimeError(f"{op}: expected target of dtype int64, but got {target.dtype}")
    flat_input = input.unsqueeze(0) if input.dim() <= 1 else input
    if flat_input.dim() != 2:
        raise RuntimeError(f"{op}: Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(input.shape)}")
    return flat_input


@autocast_float32
def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None, reduction="mean"):
    """Multi-class hinge loss: ``sum_{i != y} max(0, margin - x[y] + x[i]) ** p / C`` (times ``weight[y]``)."""
    reduction = resolve_reduction(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.dim() != 1:
        raise ValueError("weight must be one-dimensional")
    x = _multi_targets(input, target, "multi_margin_loss")
    y = target.reshape(-1)
    classes = x.shape[1]
    if y.numel() != x.shape[0]:
        raise RuntimeError(f"inconsistent target size, expected {x.shape[0]} but got {list(target.shape)}")
    if y.numel() and (bool((y < 0).any()) or bool((y >= classes).any())):
        raise RuntimeError("target out of range")
    # relu, not clamp_min: ATen's backward counts a term only where it is > 0, so a term exactly at the margin gets 0
    z = (margin - x.gather(1, y.unsqueeze(1)) + x).relu()
    if p == 2:
        z = z * z
    if weight is not None:
        z = z * weight[y].unsqueeze(1)
    others = y.unsqueeze(1) != _creation.arange(classes, device=x.device)
    loss = (z * others).sum(1) / classes
    if input.dim() <= 1:
        loss = loss.reshape(())
    return reduce_loss(loss, reduction)


@autocast_float32
def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Multi-label hinge loss: ``sum_{j in targets, i not in targets} max(0, 1 - (x[j] - x[i])) / C``.

    Each row of ``target`` lists class indices, ended by the first -1.
    """
    reduction = resolve_reduction(size_average, reduce, reduction)
    x = _multi_targets(input, target, "multilabel_margin_loss")
    y = target.reshape(x.shape)
    classes = x.shape[1]
    listed = (y != -1).long().cumprod(1).bool()  # the entries before the first -1
    if bool((listed & ((y < 0) | (y >= classes))).any()):
        raise RuntimeError("multilabel_margin_loss: target index out of range")
    with no_grad():
        # A class listed twice contributes its hinge terms twice (ATen loops over the listed entries, not the set).
        listings = x.new_zeros(x.shape, dtype=_dtype.int64).scatter_add_(1, where(listed, y, 0), listed.long())
        is_target = listings > 0
        pairs = listings.unsqueeze(2) * (~is_target).unsqueeze(1)
    hinge = (1 - (x.unsqueeze(2) - x.unsqueeze(1))).relu()  # [N, j, i]; relu: no gradient exactly at the margin
    loss = (hinge * pairs.to(x.dtype)).sum((1, 2)) / classes
    if input.dim() <= 1:
        loss = loss.reshape(())
    return reduce_loss(loss, reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """Multi-label one-versus-all logistic loss, averaged over the classes (last dim)."""
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce)
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    class_dim = input.dim() - 1
    loss = loss.sum(class_dim) / input.shape[class_dim]
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    return reduce_loss(loss, reduction)
