"""Normalization layers over features: ``LayerNorm``, ``GroupNorm``, ``RMSNorm``, ``LocalResponseNorm`` and
``CrossMapLRN2d``.
(Batch and instance normalization live in ``batchnorm.py`` and ``instancenorm.py``.)

Affine weights start at 1 and biases at 0, as in PyTorch.

>>> import jitorch
>>> from jitorch.nn.modules.normalization import LayerNorm
>>> norm = LayerNorm(4)
>>> norm
LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=True)
>>> norm(jitorch.arange(8.0).reshape(2, 4)).mean(-1).abs().max() < 1e-6
tensor(True)
"""
from __future__ import annotations

from ... import _creation, _movement
from .. import functional as F, init
from ..parameter import Parameter
from .module import Module

__all__ = ["LocalResponseNorm", "CrossMapLRN2d", "LayerNorm", "GroupNorm", "RMSNorm"]


def _as_shape(normalized_shape):
    if isinstance(normalized_shape, int) or hasattr(normalized_shape, "__index__"):
        return (int(normalized_shape),)
    return tuple(normalized_shape)


class LocalResponseNorm(Module):
    """Normalize each position by the energy of ``size`` neighbouring channels:
    ``x / (k + alpha / size * sum(x ** 2)) ** beta``."""

    __constants__ = ["size", "alpha", "beta", "k"]

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self):
        return "{size}, alpha={alpha}, beta={beta}, k={k}".format(**self.__dict__)


class CrossMapLRN2d(Module):
    """PyTorch's legacy cross-channel LRN over 4-D input: ``x * (k + alpha / size * S) ** -beta`` where ``S`` sums the
    squares of a window of channels exactly as PyTorch's running-sum loop does (its window for channel ``c`` spans
    ``0 .. c + pad - 1`` less ``1 .. c - pad``, with ``pad = (size - 1) // 2 + 1``: channel 0 is never dropped), so the
    values differ from `LocalResponseNorm`'s centered window, as PyTorch's do. The gradient is that forward's own
    (autograd through it); PyTorch's hand-written backward assumes a centered window and fails ``gradcheck``."""

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        if input.dim() != 4:
            raise ValueError(f"CrossMapLRN2d: Expected input to be 4D, got {input.dim()}D instead.")
        channels = input.shape[1]
        pad = int((self.size - 1) / 2 + 1)
        prefix = (input * input).cumsum(1)  # prefix[:, c] = sum of squares of channels 0..c
        upper = [min(c + pad - 1, channels - 1) for c in range(channels)]
        total = prefix[:, upper]
        dropped = [c for c in range(channels) if c - pad >= 1]
        if dropped:
            # channels 1 .. c - pad leave the window: prefix[c - pad] - prefix[0]
            removed = prefix[:, [c - pad for c in dropped]] - prefix[:, :1]
            total = _movement.cat([total[:, :dropped[0]], total[:, dropped[0]:] - removed], 1)
        scale = total * (self.alpha / self.size) + self.k
        return input * scale.pow(-self.beta)

    def extra_repr(self):
        return "{size}, alpha={alpha}, beta={beta}, k={k}".format(**self.__dict__)


def _make_affine(module, enabled, bias, shape, device, dtype):
    """A norm layer's ``weight`` and optional ``bias`` Parameters of ``shape``, or both registered as None."""
    if not enabled:
        module.register_parameter("weight", None)
        module.register_parameter("bias", None)
        return
    module.weight = Parameter(_creation.empty(shape, device=device, dtype=dtype))
    if bias:
        module.bias = Parameter(_creation.empty(shape, device=device, dtype=dtype))
    else:
        module.register_parameter("bias", None)


def _reset_affine(module):
    """PyTorch's initial affine transform of a norm layer: the identity (weight ones, bias zeros)."""
    if module.weight is not None:
        init.ones_(module.weight)
        if module.bias is not None:
            init.zeros_(module.bias)

class LayerNorm(Module):
    """Normalize over the trailing ``normalized_shape`` dims; ``elementwise_affine`` adds a weight (and ``bias``)."""

    __constants__ = ["normalized_shape", "eps", "elementwise_affine"]

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        _make_affine(self, elementwise_affine, bias, self.normalized_shape, device, dtype)
        self.reset_parameters()

    def reset_parameters(self):
        _reset_affine(self)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class GroupNorm(Module):
    """Normalize each group of ``num_channels // num_groups`` channels of each sample; per-channel affine."""

    __constants__ = ["num_groups", "num_channels", "eps", "affine"]

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        if num_channels % num_groups != 0:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        _make_affine(self, affine, bias, num_channels, device, dtype)
        self.reset_parameters()

    def reset_parameters(self):
        _reset_affine(self)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    """``x / sqrt(mean(x ** 2) + eps) * weight`` over the trailing ``normalized_shape`` dims (``eps=None``: the
    input dtype's machine epsilon)."""

    __constants__ = ["normalized_shape", "eps", "elementwise_affine"]

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(_creation.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
