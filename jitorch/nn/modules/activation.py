"""Activation modules (``ReLU``, ``GELU``, ``Softmax``, ``PReLU``, ...), and ``MultiheadAttention`` re-exported from
``attention.py`` under PyTorch's module path.

Each wraps the ``nn.functional`` function of the same name; ``repr`` shows PyTorch's ``extra_repr``.

>>> import jitorch
>>> from jitorch.nn.modules.activation import LeakyReLU, Softmax
>>> LeakyReLU(0.2, inplace=True)
LeakyReLU(negative_slope=0.2, inplace=True)
>>> Softmax(dim=-1)(jitorch.zeros(1, 2))
tensor([[0.5000, 0.5000]])
"""
from __future__ import annotations

import warnings

from ... import _creation
from .. import functional as F, init
from ..parameter import Parameter
from .attention import MultiheadAttention  # noqa: F401 - PyTorch's path is torch.nn.modules.activation
from .module import Module

__all__ = ["Threshold", "ReLU", "RReLU", "Hardtanh", "ReLU6", "Sigmoid", "Hardsigmoid", "Tanh", "SiLU", "Mish",
           "Hardswish", "ELU", "CELU", "SELU", "GLU", "GELU", "Hardshrink", "LeakyReLU", "LogSigmoid", "Softplus",
           "Softshrink", "MultiheadAttention", "PReLU", "Softsign", "Tanhshrink", "Softmin", "Softmax", "Softmax2d",
           "LogSoftmax"]


class _Inplace(Module):
    """An elementwise activation with only an ``inplace`` flag: ``forward`` is ``_fn(input, inplace=...)``."""

    __constants__ = ["inplace"]
    _fn = None

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return type(self)._fn(input, inplace=self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class _Plain(Module):
    """An elementwise activation without options: ``forward`` is ``_fn(input)``."""

    _fn = None

    def forward(self, input):
        return type(self)._fn(input)


def _inplace_suffix(module):
    return ", inplace=True" if module.inplace else ""


class ReLU(_Inplace):
    """``max(x, 0)``."""
    _fn = F.relu


class SELU(_Inplace):
    """``scale * elu(x, alpha)`` with the self-normalizing constants."""
    _fn = F.selu


class SiLU(_Inplace):
    """``x * sigmoid(x)``."""
    _fn = F.silu


class Mish(_Inplace):
    """``x * tanh(softplus(x))``."""
    _fn = F.mish


class Hardswish(_Inplace):
    """``x * relu6(x + 3) / 6``."""
    _fn = F.hardswish

    def extra_repr(self):  # torch's Hardswish has no extra_repr: ``inplace`` never shows
        return ""


class Hardsigmoid(_Inplace):
    """``relu6(x + 3) / 6``."""
    _fn = F.hardsigmoid

    def extra_repr(self):  # torch's Hardsigmoid has no extra_repr: ``inplace`` never shows
        return ""


class Sigmoid(_Plain):
    """``1 / (1 + exp(-x))``."""
    _fn = F.sigmoid


class Tanh(_Plain):
    """Hyperbolic tangent."""
    _fn = F.tanh


class LogSigmoid(_Plain):
    """``log(sigmoid(x))``, computed stably."""
    _fn = F.logsigmoid


class Softsign(_Plain):
    """``x / (1 + |x|)``."""
    _fn = F.softsign


class Tanhshrink(_Plain):
    """``x - tanh(x)``."""
    _fn = F.tanhshrink


class Threshold(Module):
    """``value`` where ``x <= threshold``, else ``x``."""

    __constants__ = ["threshold", "value", "inplace"]

    def __init__(self, threshold, value, inplace=False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self):
        return f"threshold={self.threshold}, value={self.value}{_inplace_suffix(self)}"


class RReLU(Module):
    """Randomized leaky ReLU: slopes drawn from ``U(lower, upper)`` in training, their mean in evaluation."""

    __constants__ = ["lower", "upper", "inplace"]

    def __init__(self, lower=1.0 / 8, upper=1.0 / 3, inplace=False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self):
        return f"lower={self.lower}, upper={self.upper}{_inplace_suffix(self)}"


class Hardtanh(Module):
    """``clamp(x, min_val, max_val)`` (gradient 0 at the bounds)."""

    __constants__ = ["min_val", "max_val", "inplace"]

    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False, min_value=None, max_value=None):
        super().__init__()
        if min_value is not None:
            warnings.warn("keyword argument `min_value` is deprecated and renamed to `min_val`", FutureWarning,
                          stacklevel=2)
            min_val = min_value
        if max_value is not None:
            warnings.warn("keyword argument `max_value` is deprecated and renamed to `max_val`", FutureWarning,
                          stacklevel=2)
            max_val = max_value
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace
        if self.max_val <= self.min_val:
            raise AssertionError(f"max_val ({self.max_val}) must be greater than min_val ({self.min_val})")

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}{_inplace_suffix(self)}"


class ReLU6(Hardtanh):
    """``min(max(x, 0), 6)``."""

    def __init__(self, inplace=False):
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class _Alpha(Module):
    __constants__ = ["alpha", "inplace"]

    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def extra_repr(self):
        return f"alpha={self.alpha}{_inplace_suffix(self)}"


class ELU(_Alpha):
    """``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``."""

    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)


class CELU(_Alpha):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""

    def forward(self, input):
        return F.celu(input, self.alpha, self.inplace)


class LeakyReLU(Module):
    """``x`` for ``x > 0``, else ``negative_slope * x``."""

    __constants__ = ["inplace", "negative_slope"]

    def __init__(self, negative_slope=1e-2, inplace=False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}{_inplace_suffix(self)}"


class GELU(Module):
    """Gaussian error linear unit; ``approximate='tanh'`` uses the tanh approximation."""

    __constants__ = ["approximate"]

    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class Softplus(Module):
    """``log(1 + exp(beta * x)) / beta`` (linear above ``threshold``)."""

    __constants__ = ["beta", "threshold"]

    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class _Lambd(Module):
    __constants__ = ["lambd"]

    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def extra_repr(self):
        return f"{self.lambd}"


class Hardshrink(_Lambd):
    """``x`` where ``|x| > lambd``, else 0."""

    def forward(self, input):
        return F.hardshrink(input, self.lambd)


class Softshrink(_Lambd):
    """``x -+ lambd`` outside ``[-lambd, lambd]``, else 0."""

    def forward(self, input):
        return F.softshrink(input, self.lambd)


class PReLU(Module):
    """Leaky ReLU with a learned negative slope: one (``num_parameters=1``) or one per channel, starting at ``init``."""

    __constants__ = ["num_parameters"]

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        self.num_parameters = num_parameters
        super().__init__()
        self.init = init
        self.weight = Parameter(_creation.empty(num_parameters, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self):
        init.constant_(self.weight, self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


class _Dim(Module):
    __constants__ = ["dim"]

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def __setstate__(self, state):
        super().__setstate__(state)
        if not hasattr(self, "dim"):
            self.dim = None

    def extra_repr(self):
        return f"dim={self.dim}"


class GLU(_Dim):
    """Gated linear unit over ``dim``: ``a * sigmoid(b)`` for the halves ``a, b``."""

    def __init__(self, dim=-1):
        super().__init__(dim)

    def forward(self, input):
        return F.glu(input, self.dim)


class Softmax(_Dim):
    """Softmax along ``dim`` (``None``: PyTorch's deprecated implicit choice, with a warning)."""

    def forward(self, input):
        return F.softmax(input, self.dim, _stacklevel=5)


class Softmin(_Dim):
    """Softmax of ``-x`` along ``dim``."""

    def forward(self, input):
        return F.softmin(input, self.dim, _stacklevel=5)


class LogSoftmax(_Dim):
    """``log(softmax(x))`` along ``dim``, computed stably."""

    def forward(self, input):
        return F.log_softmax(input, self.dim, _stacklevel=5)


class Softmax2d(Module):
    """Softmax over the channels (dim -3) of a ``(N, C, H, W)`` or ``(C, H, W)`` input."""

    def forward(self, input):
        if input.dim() not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.dim()}D instead")
        return F.softmax(input, -3, _stacklevel=5)
