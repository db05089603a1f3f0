"""Dropout in ``nn.functional``: ``dropout``, ``dropout1d/2d/3d``, ``alpha_dropout``, ``feature_alpha_dropout``.

As in PyTorch, the kept elements are scaled by ``1 / (1 - p)`` in training (so evaluation needs no rescaling), the
input itself is returned when nothing is dropped (``training=False``, ``p=0`` or an empty input), and ``p=1`` zeroes
everything. The ``*1d/2d/3d`` forms drop whole channels. The mask is drawn as ATen draws it (``bernoulli_`` into
``empty_like(input)``, so in the input's memory order) from the generator's torch-compatible stream: after
``manual_seed`` a CPU run drops the positions torch drops.

>>> import jitorch
>>> import jitorch.nn.functional as F
>>> x = jitorch.ones(4)
>>> F.dropout(x, 0.5, training=False) is x
True
>>> sorted(set(F.dropout(jitorch.ones(1000), 0.5).tolist()))
[0.0, 2.0]
"""
from __future__ import annotations

import math
import warnings

from .. import _dtype
from .._dispatch import TORCH_TYPE_NAMES, apply
from .._memory_format import dense_order
from ..ops.random_ops import BERNOULLI_MASK

__all__ = ["dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"]

# SELU's alpha * scale: alpha dropout sets dropped units to SELU's negative saturation value.
_ALPHA = 1.7580993408473766


def _check_p(p):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _check_dtype(input, alpha):
    """torch's refusals, from its CPU kernels: the noise is drawn in the input's dtype (``bernoulli_``, which has no
    complex kernel), then scaled in place by a float (which an integer noise cannot hold; alpha dropout's shift has
    made a bool one int64 first)."""
    dt = input.dtype
    if dt.is_complex:
        raise NotImplementedError(f'"bernoulli_scalar_cpu_" not implemented for \'{TORCH_TYPE_NAMES[dt.name]}\'')
    if dt.category < _dtype.FLOAT:
        held = "Long" if alpha and dt is _dtype.bool else TORCH_TYPE_NAMES[dt.name]
        raise RuntimeError(f"result type Float can't be cast to the desired output type {held}")


def _mask_order(input):
    """``input``'s dims from outermost to innermost as ``empty_like`` lays them out, or None when row-major. torch
    draws the mask with ``empty_like(input).bernoulli_``, which fills memory order: a transposed input's mask is the
    transpose of a row-major draw."""
    strides = getattr(getattr(input, "_data", None), "strides", None)
    if strides is None or input.dim() < 2:
        return None
    order = tuple(dense_order(tuple(input.shape), strides))
    return None if order == tuple(range(input.dim())) else order


def _dropout(input, p, training, inplace, feature=False, alpha=False):
    """PyTorch's ``_dropout_impl``: ``feature`` drops whole channels, ``alpha`` keeps SELU's mean and variance."""
    if p == 0 or not training or input.numel() == 0:
        return input
    if p == 1:
        return input.mul_(0) if inplace else input * input.new_zeros(())
    _check_dtype(input, alpha)
    if feature:
        if input.dim() < 2:
            raise RuntimeError(f"Feature dropout requires at least 2 dimensions in the input, but got a "
                               f"{input.dim()}-D input")
        shape = tuple(input.shape[:2]) + (1,) * (input.dim() - 2)
        order = None  # torch's feature noise is a new (N, C, 1, ...) tensor: row-major
    else:
        shape = tuple(input.shape)
        order = _mask_order(input)
    # The mask is one row (see ops/random_ops.py), so a compiled graph draws it afresh on each run, from the same
    # generator and in the same order as this eager code. The 0-d tensor only carries the mask's dtype and device.
    ref = input.new_empty((), dtype=input.dtype)
    if order is None:
        noise = apply(BERNOULLI_MASK, ref, p=1 - p, shape=shape)
    else:
        noise = apply(BERNOULLI_MASK, ref, p=1 - p, shape=tuple(shape[d] for d in order))
        noise = noise.permute(tuple(sorted(range(len(order)), key=order.__getitem__)))
    if alpha:
        a = 1.0 / math.sqrt((_ALPHA * _ALPHA * p + 1) * (1 - p))
        shift = (noise - 1) * (_ALPHA * a) + _ALPHA * a * p
        noise = noise * a
        return input.mul_(noise).add_(shift) if inplace else input * noise + shift
    noise = noise / (1 - p)
    return input.mul_(noise) if inplace else input * noise


def dropout(input, p=0.5, training=True, inplace=False):
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)`` (only when ``training``)."""
    _check_p(p)
    return _dropout(input, p, training, inplace)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Dropout for SELU networks: dropped units take SELU's saturation value, then an affine map keeps the
    activations' mean and variance."""
    _check_p(p)
    return _dropout(input, p, training, inplace, alpha=True)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """``alpha_dropout`` of whole channels (dim 1)."""
    _check_p(p)
    return _dropout(input, p, training, inplace, feature=True, alpha=True)


def _unbatched_feature_dropout(input, p, training, inplace, batched):
    if batched:
        return _dropout(input, p, training, inplace, feature=True)
    # A view with a batch dim of 1: writing through it in place still writes ``input``.
    result = _dropout(input.unsqueeze(0), p, training, inplace, feature=True)
    return input if inplace else result.squeeze(0)


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of a ``(N, C, L)`` or ``(C, L)`` input with probability ``p``."""
    _check_p(p)
    if input.dim() not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input.dim()}D input. Note that "
                           "dropout1d exists to provide channel-wise dropout on inputs with 1 spatial dimension, a "
                           "channel dimension, and an optional batch dimension (i.e. 2D or 3D inputs).")
    return _unbatched_feature_dropout(input, p, training, inplace, input.dim() == 3)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of a ``(N, C, H, W)`` input with probability ``p``."""
    _check_p(p)
    ndim = input.dim()
    if ndim not in (3, 4):
        warnings.warn(f"dropout2d: Received a {ndim}-D input to dropout2d, which is deprecated and will result in an "
                      "error in a future release. To retain the behavior and silence this warning, please use dropout "
                      "instead. Note that dropout2d exists to provide channel-wise dropout on inputs with 2 spatial "
                      "dimensions, a channel dimension, and an optional batch dimension (i.e. 3D or 4D inputs).",
                      stacklevel=2)
    if ndim == 3:
        # PyTorch keeps its historical reading of a 3-D input as (N, C, L), with a warning.
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout behavior "
                      "is desired - input is interpreted as shape (N, C, L), where C is the channel dim. This behavior "
                      "will change in a future release to interpret the input as one without a batch dimension, i.e. "
                      "shape (C, H, W). To maintain the 1D channel-wise dropout behavior, please switch to using "
                      "dropout1d instead.", stacklevel=2)
    return _dropout(input, p, training, inplace, feature=True)


def dropout3d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of a ``(N, C, D, H, W)`` or ``(C, D, H, W)`` input with probability ``p``."""
    _check_p(p)
    ndim = input.dim()
    if ndim not in (4, 5):
        warnings.warn(f"dropout3d: Received a {ndim}-D input to dropout3d, which is deprecated and will result in an "
                      "error in a future release. To retain the behavior and silence this warning, please use dropout "
                      "instead. Note that dropout3d exists to provide channel-wise dropout on inputs with 3 spatial "
                      "dimensions, a channel dimension, and an optional batch dimension (i.e. 4D or 5D inputs).",
                      stacklevel=2)
    return _unbatched_feature_dropout(input, p, training, inplace, ndim == 5)
