"""Regression and classification losses of ``nn.functional``: ``mse_loss``, ``l1_loss``, ``smooth_l1_loss``,
``huber_loss``, ``nll_loss``, ``cross_entropy``, ``binary_cross_entropy`` and ``binary_cross_entropy_with_logits``.

Every loss takes ``reduction`` (``'none'``, ``'mean'`` or ``'sum'``; the deprecated ``size_average``/``reduce`` pair
is still understood, with PyTorch's warning). ``cross_entropy`` is ``log_softmax`` followed by ``nll_loss`` (never a
``log`` of a rounded probability) and takes class indices of shape ``(N, d1, ...)`` or class probabilities of the
input's shape; a weighted ``'mean'`` divides by the total weight of the targets that are not ``ignore_index``.

>>> import jitorch
>>> import jitorch.nn.functional as F
>>> logits = jitorch.tensor([[2.0, 0.0], [0.0, 2.0]])
>>> F.cross_entropy(logits, jitorch.tensor([0, 1]))
tensor(0.1269)
>>> F.mse_loss(jitorch.tensor([1.0, 2.0]), jitorch.tensor([1.0, 4.0]), reduction="sum")
tensor(4.)
"""
from __future__ import annotations

import functools
import warnings

import numpy as np

from .. import _dtype, _movement
from .._dispatch import TENSOR_TYPES, apply
from .._pointwise import where
from .._stat_checks import warn_at_caller
from ..amp._cast_mode import autocast_float32
from ..autograd.grad_mode import GradState
from ..ops.nn_fused import LOG_SOFTMAX, NLL_CHECK_TARGETS, NLL_LOSS, softmax_output
from ..ops.nn_nll import CASCADE_DTYPES, nll_of_rows
from ..ops.nn_ops import BCE_LOGITS, BINARY_CROSS_ENTROPY
from ..ops.regression_loss_ops import huber, mse, smooth_l1
from ._functional_activation import log_sigmoid_like
from ._functional_core import log_softmax, type_name
from ..autograd.graph import named


def _shown_as(name):
    """The loss's result shows torch's node name (``MseLossBackward0``): its composite's last op is a mean or a sum."""
    def wrap(fn):
        @functools.wraps(fn)
        def loss(*args, **kwargs):
            return named(fn(*args, **kwargs), name)
        return loss
    return wrap

__all__ = ["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "nll_loss", "cross_entropy",
           "binary_cross_entropy", "binary_cross_entropy_with_logits"]


# -- reductions -----------------------------------------------------------------------------------------------------
def legacy_reduction(size_average, reduce, emit_warning=True):
    """The ``reduction`` string for the deprecated ``size_average``/``reduce`` flags (PyTorch's mapping)."""
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    ret = "mean" if size_average and reduce else "sum" if reduce else "none"
    if emit_warning:
        warnings.warn(f"size_average and reduce args will be deprecated, please use reduction='{ret}' instead.",
                      stacklevel=3)
    return ret


def resolve_reduction(size_average, reduce, reduction):
    """The effective reduction, validated (``ValueError`` for an unknown one, as PyTorch)."""
    if size_average is not None or reduce is not None:
        return legacy_reduction(size_average, reduce)
    if reduction == "elementwise_mean":
        warnings.warn("reduction='elementwise_mean' is deprecated. Please use reduction='mean' instead.",
                      stacklevel=3)
        return "mean"
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def reduce_loss(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _warn_size(input, target):
    if tuple(target.shape) != tuple(input.shape):
        # At the user's line, as torch's: the wrappers between vary (``_shown_as``, modules, torch functions).
        warn_at_caller(f"Using a target size ({target.size()}) that is different to the input size "
                       f"({input.size()}). This will likely lead to incorrect results due to broadcasting. Please "
                       "ensure they have the same size.")


def _weighted(loss, weight, input, reduction, mean_by_weight=True):
    """PyTorch's optional elementwise ``weight`` of the regression losses."""
    if weight is None:
        return reduce_loss(loss, reduction)
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    loss = loss * weight
    if reduction == "mean" and mean_by_weight:
        return loss.sum() / weight.sum()
    return reduce_loss(loss, reduction)


def _same_float(input, target):
    """Whether ``input`` and ``target`` are plain tensors of one shape and one NumPy float dtype (the common case of
    the elementwise losses: their checks, promotion and broadcast are no-ops)."""
    if type(input) not in TENSOR_TYPES or type(target) not in TENSOR_TYPES:
        return False
    x, y = input._data, target._data
    return x.shape == y.shape and x.dtype == y.dtype and x.dtype.kind == "f"


# -- regression -----------------------------------------------------------------------------------------------------
@autocast_float32
@_shown_as("MseLossBackward0")
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Squared error ``(input - target) ** 2``, reduced (a weighted mean divides by the weights' sum)."""
    if _same_float(input, target):  # no size warning, promotion or broadcast to make
        reduction = resolve_reduction(size_average, reduce, reduction)
        return _weighted(mse(input, target), weight, input, reduction)
    _warn_size(input, target)
    reduction = resolve_reduction(size_average, reduce, reduction)
    dt = _dtype.result_type(input, target)
    if dt.category < _dtype.FLOAT:
        raise NotImplementedError(f"\"mse_cpu\" not implemented for '{type_name(dt)}'")
    x, y = _movement.broadcast_tensors(input, target)
    return _weighted(mse(x, y), weight, input, reduction)  # one row (ATen's kernel), its gradient one row too


@autocast_float32
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Absolute error ``|input - target|``, reduced (a weighted mean divides by the weights' sum)."""
    _warn_size(input, target)
    reduction = resolve_reduction(size_average, reduce, reduction)
    x, y = _movement.broadcast_tensors(input, target)
    return _weighted((x - y).abs(), weight, input, reduction)


@autocast_float32
@_shown_as("SmoothL1LossBackward0")
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """``0.5 * d ** 2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 * beta`` (``d = input - target``)."""
    _warn_size(input, target)
    reduction = resolve_reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    x, y = _movement.broadcast_tensors(input, target)
    if beta == 0.0:
        return reduce_loss((x - y).abs(), reduction)
    return reduce_loss(smooth_l1(x, y, beta), reduction)  # one row (ATen's kernel), its gradient one row too


@autocast_float32
@_shown_as("HuberLossBackward0")
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """``0.5 * d ** 2`` where ``|d| < delta``, else ``delta * (|d| - 0.5 * delta)`` (``d = input - target``)."""
    _warn_size(input, target)
    reduction = resolve_reduction(None, None, reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    x, y = _movement.broadcast_tensors(input, target)
    return _weighted(huber(x, y, delta), weight, input, reduction, mean_by_weight=False)


# -- classification -------------------------------------------------------------------------------------------------
def _check_class_weight(weight, input, classes):
    if weight is None:
        return
    if weight.dim() != 1 or weight.numel() != classes:
        raise RuntimeError(f"weight tensor should be defined either for all {classes} classes or no classes but got "
                           f"weight tensor of shape: {list(weight.shape)}")
    if weight.dtype is not input.dtype:
        raise RuntimeError(f"expected scalar type {type_name(input.dtype)} but found {type_name(weight.dtype)}")


def _check_nll_shapes(input, target):
    if input.dim() < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {input.dim()})")
    if input.dim() == 1:
        if target.dim() == 1 and target.shape[0] != 1:  # torch's ValueError
            raise ValueError(f"nll_loss: For 1D input, 1D target must have size 1, but got target size: "
                             f"{target.shape[0]}")
        if target.dim() > 1:
            raise RuntimeError(f"nll_loss: for a 1-D input (C), the target must be a scalar class index, but got "
                               f"target of shape {list(target.shape)}")
        return
    if target.dim() == 0 or input.shape[0] != target.shape[0]:
        batch = target.shape[0] if target.dim() else 1
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size ({batch}).")
    if tuple(target.shape[1:]) == tuple(input.shape[2:]):
        return
    hint = (f" (nll_loss: input {list(input.shape)}; the target must be the input's shape without the class dim 1; "
            f"class probabilities must have the input's shape)")
    if input.dim() == 2:
        raise RuntimeError(f"0D or 1D target tensor expected, multi-target not supported{hint}")
    # ATen's order: inputs of 3 or 5+ dims are reshaped and checked before the target's dtype, 4-D ones after it
    if input.dim() != 4:
        raise RuntimeError(f"Expected target size {[input.shape[0], *input.shape[2:]]}, got {list(target.shape)}"
                           f"{hint}")
    if target.dtype not in (_dtype.int64, _dtype.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {type_name(target.dtype)}")
    raise RuntimeError(f"size mismatch (got input: {list(input.shape)} , target: {list(target.shape)}{hint}")


def _class_targets(input, target, ignore_index, class_dim):
    """(safe int64 targets with ignored entries set to 0, mask of the entries not ignored)."""
    if target.dtype not in (_dtype.int64, _dtype.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {type_name(target.dtype)}")
    if target.dtype == _dtype.uint8 and input.dim() >= 3:
        # ATen's nll_loss2d (every input with spatial dims) reads the target as int64 only
        raise RuntimeError(f"expected scalar type Long but found Byte (nll_loss over input of shape "
                           f"{list(input.shape)}: spatial class targets must be int64; use target.long())")
    target = target.long().reshape(()) if input.dim() == 1 else target.long()
    # The range check runs inside a row's kernel (no value read into Python): a compiled loss stays one graph.
    target = apply(NLL_CHECK_TARGETS, target, classes=input.shape[class_dim], ignore_index=ignore_index)
    valid = target != ignore_index
    return where(valid, target, 0), valid


def _mean_by(total_loss, total_weight):
    """``total_loss / total_weight``, NaN when nothing was counted (as PyTorch) but with zero gradients then: a batch
    whose targets are all ``ignore_index`` must not put NaN into the parameters' gradients."""
    empty = total_weight == 0
    one = 1.0 if total_weight.dtype.category >= _dtype.FLOAT else 1  # an integer count stays exact
    return (total_loss / where(empty, one, total_weight)).masked_fill(empty, float("nan"))


_CLASS_INDEX_NP = (np.dtype(np.int64), np.dtype(np.uint8))


def _class_rows(input, target):
    """Whether ``input`` is a plain (N, C) float32/float64 tensor and ``target`` a plain (N,) int64/uint8 one: every
    shape and dtype check of `nll_loss` and `cross_entropy` passes, and the loss is `NLL_LOSS`'s one row (on 32 x 32
    the checks through Tensor.shape's Sizes took as long as the row)."""
    if type(input) not in TENSOR_TYPES or type(target) not in TENSOR_TYPES:
        return False
    x, t = input._data, target._data
    return x.ndim == 2 and t.ndim == 1 and x.shape[0] == t.shape[0] and x.dtype in CASCADE_DTYPES and \
        t.dtype in _CLASS_INDEX_NP


def _nll(logp, target, weight, ignore_index, reduction):
    if weight is None and logp.dim() == 2 and logp._data.dtype in CASCADE_DTYPES and target.dim() == 1:
        # One row (PyTorch's nll_loss): a gather forward, a scatter into zeros backward.
        if target.dtype not in (_dtype.int64, _dtype.uint8):
            raise RuntimeError(f"expected target dtype to be Long or Byte, but got {type_name(target.dtype)}")
        return apply(NLL_LOSS, logp, target, ignore_index=ignore_index, reduction=reduction)
    if weight is not None and weight.requires_grad and GradState.enabled:
        kernel = "nll_loss2d_forward" if logp.dim() >= 3 else "nll_loss_forward"
        raise RuntimeError(f"The function '{kernel}' is not differentiable with respect to argument 'weight'. This "
                           f"input cannot have requires_grad True.")
    class_dim = 0 if logp.dim() == 1 else 1
    safe, valid = _class_targets(logp, target, ignore_index, class_dim)
    picked = -logp.gather(class_dim, safe.unsqueeze(class_dim)).squeeze(class_dim)
    w = valid.to(logp.dtype) if weight is None else where(valid, weight[safe], 0.0)
    # Ignored targets are masked out, not multiplied by a zero weight: as in ATen, whose backward skips them, they
    # get no gradient even from a NaN or inf upstream (a focal loss's (1 - pt) ** gamma at pt == 1) or NaN logits
    loss = where(valid, picked if weight is None else picked * w, 0.0)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return _mean_by(loss.sum(), w.sum())


@autocast_float32
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """Negative log likelihood of log-probabilities ``input`` (``(N, C, d1, ...)`` or ``(C,)``) at the class
    indices ``target`` (``(N, d1, ...)`` or ``()``), optionally weighted per class; ``ignore_index`` targets count
    for nothing."""
    reduction = resolve_reduction(size_average, reduce, reduction)
    if weight is None and _class_rows(input, target):
        return apply(NLL_LOSS, input, target, ignore_index=ignore_index, reduction=reduction)
    _check_nll_shapes(input, target)
    _check_class_weight(weight, input, input.shape[0 if input.dim() == 1 else 1])
    return _nll(input, target, weight, ignore_index, reduction)


def _class_view(weight, ndim, class_dim):
    shape = [1] * ndim
    shape[class_dim] = weight.numel()
    return weight.reshape(shape)


def _probability_targets(logp, target, weight, reduction, label_smoothing, class_dim):
    if target.dtype.category < _dtype.FLOAT:
        raise RuntimeError(f"Expected floating point type for target with class probabilities, got "
                           f"{type_name(target.dtype)}")
    classes = logp.shape[class_dim]
    if label_smoothing > 0.0:
        target = target * (1 - label_smoothing) + label_smoothing / classes
    prod = logp * target
    if weight is not None:
        prod = prod * _class_view(weight, logp.dim(), class_dim)
    if reduction == "none":
        return -prod.sum(class_dim)
    if reduction == "sum":
        return -prod.sum()
    if logp.numel() == 0:
        return -prod.sum() * float("nan")
    return -prod.sum() / (logp.numel() // classes)


def _smoothed_indices(logp, target, weight, ignore_index, reduction, label_smoothing, class_dim):
    nll = _nll(logp, target, weight, ignore_index, reduction)
    if label_smoothing == 0.0:
        return nll
    classes = logp.shape[class_dim]
    safe, valid = _class_targets(logp, target, ignore_index, class_dim)
    if weight is not None:
        smooth = -(logp * _class_view(weight, logp.dim(), class_dim)).sum(class_dim)
    else:
        smooth = -logp.sum(class_dim)
    smooth = where(valid, smooth, 0.0)
    if reduction == "none":
        ret = smooth
    elif reduction == "sum":
        ret = smooth.sum()
    elif weight is not None:
        ret = _mean_by(smooth.sum(), where(valid, weight[safe], 0.0).sum())
    else:
        ret = _mean_by(smooth.sum(), valid.sum())
    return (1 - label_smoothing) * nll + ret * (label_smoothing / classes)


@autocast_float32
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0):
    """Cross entropy between the logits ``input`` (``(N, C, d1, ...)`` or ``(C,)``) and class indices or class
    probabilities; ``label_smoothing`` mixes the target with the uniform distribution."""
    reduction = resolve_reduction(size_average, reduce, reduction)
    if weight is None and label_smoothing == 0.0 and _class_rows(input, target):
        # Where the native row takes the logits (no mode, host arrays), both rows straight away: F.log_softmax's
        # frames and the dispatcher's were an eighth of a 32x32 loss.
        logp = softmax_output(LOG_SOFTMAX, input, 1)
        if logp is not None and type(target._data) is np.ndarray:
            return nll_of_rows(logp, target, ignore_index, reduction)
        return apply(NLL_LOSS, log_softmax(input, 1) if logp is None else logp, target, ignore_index=ignore_index,
                     reduction=reduction)
    if input.dim() < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {input.dim()})")
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    class_dim = 0 if input.dim() == 1 else 1
    _check_class_weight(weight, input, input.shape[class_dim])
    if tuple(input.shape) == tuple(target.shape):
        if ignore_index >= 0:
            raise RuntimeError("ignore_index is not supported for floating point target")
        logp = log_softmax(input, class_dim)
        return _probability_targets(logp, target, weight, reduction, label_smoothing, class_dim)
    _check_nll_shapes(input, target)
    if target.dtype.category >= _dtype.FLOAT:
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {type_name(target.dtype)}")
    logp = log_softmax(input, class_dim)
    return _smoothed_indices(logp, target, weight, ignore_index, reduction, label_smoothing, class_dim)


@autocast_float32
@_shown_as("BinaryCrossEntropyBackward0")
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """``-w * (y * log(x) + (1 - y) * log(1 - x))`` for probabilities ``x``; each log is floored at -100."""
    reduction = resolve_reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({target.size()}) that is different to the input size "
                         f"({input.size()}) is deprecated. Please ensure they have the same size.")
    if target.dtype is not input.dtype:  # ATen's check: an integer target would otherwise be silently promoted
        raise RuntimeError(f"binary_cross_entropy: Found dtype {type_name(target.dtype)} but expected "
                           f"{type_name(input.dtype)}")
    loss = apply(BINARY_CROSS_ENTROPY, input, target)
    if weight is not None:
        loss = loss * weight.expand(_movement.broadcast_shapes(tuple(target.shape), tuple(weight.shape)))
    return reduce_loss(loss, reduction)


@autocast_float32
@_shown_as("BinaryCrossEntropyWithLogitsBackward0")
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """``binary_cross_entropy(sigmoid(x), y)`` computed from the logits ``x`` without overflow;
    ``pos_weight`` weighs the positive term (per class, broadcast over the last dim)."""
    reduction = resolve_reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Target size ({target.size()}) must be the same as input size ({input.size()})")
    # float32/64 as one row; half types keep the composite, whose every step rounds to half as ATen's does.
    if weight is None and pos_weight is None and input.dtype is target.dtype and \
            input.dtype in (_dtype.float32, _dtype.float64):
        return reduce_loss(apply(BCE_LOGITS, input, target), reduction)
    log_sig = log_sigmoid_like(input)
    if pos_weight is not None:
        log_sig = log_sig * ((pos_weight - 1) * target + 1)
    loss = (1 - target) * input - log_sig
    if weight is not None:
        loss = loss * weight
    return reduce_loss(loss, reduction)

