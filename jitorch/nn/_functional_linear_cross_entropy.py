"""``linear_cross_entropy``: ``cross_entropy(linear(input, linear_weight, linear_bias), target, ...)`` (PyTorch 2.13).

``options=None`` runs exactly that composite (every target kind, reduction, label smoothing and double backward).
A ``LinearCrossEntropyOptions`` computes it a row chunk at a time instead (``nn/modules/linear_cross_entropy.py``), so
the ``(N, C)`` logits of a large vocabulary are never held whole; what the chunked path does not cover warns and
takes the composite, as PyTorch does.

A ``linear_weight`` of shape ``(C, d1, ..., dK, F)`` gives a K-dimensional loss: logits ``(N, C, d1, ..., dK)``.
``ignore_index=None`` means -100 for class-index targets; probability targets refuse any explicit value.

>>> import jitorch
>>> import jitorch.nn.functional as F
>>> x, w = jitorch.ones(2, 3), jitorch.zeros(4, 3)
>>> F.linear_cross_entropy(x, w, jitorch.tensor([0, 3]))
tensor(1.3863)
>>> options = jitorch.nn.LinearCrossEntropyOptions(batch_chunk_size=1)
>>> F.linear_cross_entropy(x, w, jitorch.tensor([0, 3]), options=options)  # two chunks of one row
tensor(1.3863)
"""
from __future__ import annotations

import dataclasses
import math

from .. import _dtype
from .._dispatch import is_compiling
from .._stat_checks import warn_at_caller
from ._functional_core import linear
from ._functional_loss import cross_entropy

__all__ = ["linear_cross_entropy"]

_CHUNKED_REDUCTIONS = ("mean", "sum", "none")


def _check_shapes(input, linear_weight, linear_bias):
    """(leading batch dims of ``input``, in_features, C, out_features) after PyTorch's shape checks."""
    if input.dim() < 1 or input.dim() > 2:
        raise RuntimeError(f"expected input with dimensionality 1 or 2, got {input.dim()}")
    if linear_weight.dim() < 2:
        raise RuntimeError(f"expected linear_weight with dimensionality at least 2, got {linear_weight.dim()}")
    batch, in_features = tuple(input.shape[:-1]), input.shape[-1]
    if in_features != linear_weight.shape[-1]:
        raise RuntimeError("expected equal input and linear_weight last dimensions (in_features), got "
                           f"{in_features} and {linear_weight.shape[-1]}, respectively")
    num_classes, out_features = linear_weight.shape[0], tuple(linear_weight.shape[1:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != (num_classes, *out_features):
        raise RuntimeError(f"expected linear_bias shape {(num_classes, *out_features)}, got "
                           f"{tuple(linear_bias.shape)}")
    if out_features and not batch:
        raise RuntimeError(f"K-dimensional loss defined by linear_weight shape {tuple(linear_weight.shape)} requires "
                           f"batched input, (N, {in_features}), got unbatched input with shape {tuple(input.shape)}")
    return batch, in_features, num_classes, out_features


def _is_tracing():
    from .. import jit  # (on use: ``jitorch.jit`` imports ``nn``)

    return jit.is_tracing()


def _chunked_fallback_reason(target, reduction, label_smoothing, out_features):
    """None when the chunked path takes the call, else the values PyTorch's fallback warning reports."""
    tracing = _is_tracing()
    if not out_features and reduction in _CHUNKED_REDUCTIONS and label_smoothing == 0.0 \
            and target.dtype == _dtype.int64 and not tracing:
        return None
    return (f"reduction={reduction!r}, label_smoothing={label_smoothing}, target.dtype={target.dtype}, "
            f"out_features={out_features}, tracing={tracing}")


def _chunked(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, options):
    # On use: ``nn.modules`` imports this package's ``functional``, which imports this file.
    from .modules.linear_cross_entropy import chunked_linear_cross_entropy

    batched = input.dim() == 2
    if not batched:
        input, target = input.unsqueeze(0), target.unsqueeze(0)
    options = options._adjust(num_batches=input.shape[0], in_features=input.shape[1],
                              num_classes=linear_weight.shape[0], dtype=input.dtype, device=input.device)
    if reduction != "none" and not options.allow_retain_graph and is_compiling():
        warn_at_caller("linear_cross_entropy: forcing allow_retain_graph=True under torch.compile (adds one "
                       "gradient-sized allocation/call). Construct options with allow_retain_graph=True to silence.")
        options = dataclasses.replace(options, allow_retain_graph=True)
    loss = chunked_linear_cross_entropy(input, linear_weight, target, linear_bias, weight, reduction, ignore_index,
                                        options)
    return loss if batched else loss.squeeze(0)


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None, reduction="mean",
                         ignore_index=None, label_smoothing=0.0, options=None):
    """Cross entropy of the logits ``linear(input, linear_weight, linear_bias)`` against ``target``.

    ``input``: ``(F,)`` or ``(N, F)``; ``linear_weight``: ``(C, F)`` or ``(C, d1, ..., dK, F)`` (K-dimensional
    loss, batched input only); ``linear_bias``: ``(C, d1, ..., dK)``. ``target``: class indices ``()``, ``(N,)``,
    ``(N, d1, ..., dK)``, or class probabilities of the logits' shape. ``weight``, ``reduction`` and
    ``label_smoothing`` as ``cross_entropy``; ``ignore_index=None`` is -100 for class indices.
    ``options``: a ``LinearCrossEntropyOptions`` to compute a row chunk at a time (no double backward there).

    >>> import jitorch
    >>> x = jitorch.tensor([[1.0, -1.0]], requires_grad=True)
    >>> loss = linear_cross_entropy(x, jitorch.eye(2), jitorch.tensor([0]))
    >>> loss.backward()
    >>> x.grad
    tensor([[-0.1192,  0.1192]])
    """
    batch, in_features, num_classes, out_features = _check_shapes(input, linear_weight, linear_bias)
    logits_shape = (*batch, num_classes, *out_features)
    if tuple(target.shape) == logits_shape and ignore_index is not None:  # probabilities: cross_entropy's own test
        raise RuntimeError("ignore_index cannot be specified when target contains probabilities")
    ignore_index = -100 if ignore_index is None else ignore_index
    if options is not None:
        reason = _chunked_fallback_reason(target, reduction, label_smoothing, out_features)
        if reason is None:
            return _chunked(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, options)
        bias_shape = None if linear_bias is None else tuple(linear_bias.shape)
        warn_at_caller("linear_cross_entropy: ``options`` ignored; chunked path needs reduction in "
                       "{'mean','sum','none'}, label_smoothing == 0, target.dtype == int64, out_features == (). "
                       f"Got {reason}, linear_bias.shape={bias_shape}.")
    if out_features:  # one (C * d1 * ... * dK, F) product, its columns read back as (C, d1, ..., dK)
        flat = math.prod(out_features, start=num_classes)
        linear_weight = linear_weight.reshape(flat, in_features)
        linear_bias = None if linear_bias is None else linear_bias.reshape(flat)
    logits = linear(input, linear_weight, linear_bias).reshape(logits_shape)
    return cross_entropy(logits, target, weight=weight, reduction=reduction, ignore_index=ignore_index,
                         label_smoothing=label_smoothing)
