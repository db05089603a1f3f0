"""``LinearCrossEntropyLoss``: a ``Linear`` head and ``cross_entropy`` in one module (PyTorch 2.13's
``torch.nn.modules.loss.LinearCrossEntropyLoss``, re-exported by ``loss.py``).

The head is a plain ``Linear(in_features, C * prod(out_features))`` at ``self.linear``, so parameters, initialization
and state-dict keys (``linear.weight``, ``linear.bias``; ``weight`` is the class-weight buffer) are PyTorch's and
checkpoints load across both libraries. ``forward`` reshapes the flat weight to ``(C, *out_features, F)``.

>>> import jitorch
>>> from jitorch.nn import LinearCrossEntropyLoss
>>> loss_fn = LinearCrossEntropyLoss(4, 10, out_features=(3,), bias=True)
>>> sorted(loss_fn.state_dict())
['linear.bias', 'linear.weight']
>>> loss_fn(jitorch.randn(2, 4), jitorch.randint(0, 10, (2, 3))).shape
jitorch.Size([])
"""
from __future__ import annotations

import math

from .. import functional as F
from .linear import Linear
from .loss import _WeightedLoss

__all__ = ["LinearCrossEntropyLoss"]


class LinearCrossEntropyLoss(_WeightedLoss):
    """Cross entropy of ``self.linear``'s logits, reshaped to ``(N, C, *out_features)``, against ``target``.

    ``in_features``, ``num_classes`` (C) and ``out_features`` (``(d1, ..., dK)`` for a K-dimensional loss) size the
    head; ``bias`` adds its bias (default ``False``). ``weight``, ``reduction``, ``ignore_index`` (``None``: -100 for
    class indices), ``label_smoothing`` and ``options`` (a ``LinearCrossEntropyOptions``: chunked computation) are
    :func:`~jitorch.nn.functional.linear_cross_entropy`'s. Chunked losses' gradients are computed during the forward
    and consumed by one backward unless ``options.allow_retain_graph``.
    """

    __constants__ = ["num_classes", "out_features", "reduction", "ignore_index", "label_smoothing"]

    def __init__(self, in_features, num_classes, *, out_features=(), bias=False, device=None, dtype=None,
                 reduction="mean", weight=None, ignore_index=None, label_smoothing=0.0, options=None):
        if weight is not None and tuple(weight.shape) != (num_classes,):
            raise RuntimeError(f"expected weight shape to be {(num_classes,)}, got {tuple(weight.shape)}")
        if label_smoothing < 0 or label_smoothing > 1.0:
            raise RuntimeError(f"expected label_smoothing to be in range [0, 1], got {label_smoothing}")
        super().__init__(weight=weight, size_average=None, reduce=None, reduction=reduction)
        self.num_classes = num_classes
        self.out_features = out_features
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        # Linear weights are 2-D: the (C, *out_features, F) weight is stored flat and reshaped in forward.
        self.linear = Linear(in_features, math.prod(out_features, start=num_classes), bias=bias, device=device,
                             dtype=dtype)
        self.options = options

    def forward(self, input, target):
        """The loss of ``input`` ``(F,)`` or ``(N, F)`` against ``target``."""
        linear_weight = self.linear.weight.reshape((self.num_classes, *self.out_features, self.linear.in_features))
        linear_bias = None if self.linear.bias is None else \
            self.linear.bias.reshape((self.num_classes, *self.out_features))
        return F.linear_cross_entropy(input, linear_weight, target, linear_bias=linear_bias, weight=self.weight,
                                      reduction=self.reduction, ignore_index=self.ignore_index,
                                      label_smoothing=self.label_smoothing, options=self.options)

    def extra_repr(self):
        return (f"in_features={self.linear.in_features}, num_classes={self.num_classes}, "
                f"out_features={self.out_features}, bias={self.linear.bias is not None}, reduction={self.reduction}, "
                f"ignore_index={self.ignore_index}, label_smoothing={self.label_smoothing}, options={self.options}")
