"""Linear layers: ``Identity``, ``Linear``, ``Bilinear`` and ``LazyLinear``, with PyTorch's initializations.

``Linear`` draws its weight with ``kaiming_uniform_(a=sqrt(5))`` and its bias from ``U(-1/sqrt(in), 1/sqrt(in))``;
``Bilinear`` draws both from ``U(-1/sqrt(in1), 1/sqrt(in1))``.

>>> import jitorch
>>> from jitorch.nn.modules.linear import Linear
>>> layer = Linear(3, 2)
>>> layer
Linear(in_features=3, out_features=2, bias=True)
>>> layer(jitorch.ones(4, 3)).shape
jitorch.Size([4, 2])
"""
from __future__ import annotations

import math

from ... import _creation
from ...autograd.grad_mode import no_grad
from .. import functional as F, init
from ..parameter import Parameter
from ._lazy_base import LazyModuleMixin
from .module import Module

__all__ = ["Identity", "Linear", "NonDynamicallyQuantizableLinear", "Bilinear", "LazyLinear"]



def reset_weight_and_bias(weight, bias):
    """PyTorch's default init of Linear and Conv: Kaiming-uniform weight (``a=sqrt(5)``), bias uniform in
    ``+-1/sqrt(fan_in)``."""
    init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = init._calculate_fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        init.uniform_(bias, -bound, bound)

class Identity(Module):
    """Returns its input unchanged; accepts (and ignores) any constructor arguments."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """``y = x @ weight.T + bias`` with ``weight`` of shape ``(out_features, in_features)``."""

    __constants__ = ["in_features", "out_features"]

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(_creation.empty((out_features, in_features), device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(_creation.empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        reset_weight_and_bias(self.weight, self.bias)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class NonDynamicallyQuantizableLinear(Linear):
    """``Linear`` under the name ``MultiheadAttention`` uses for its output projection (as PyTorch)."""


class Bilinear(Module):
    """``y = x1^T A x2 + b`` with ``weight`` of shape ``(out_features, in1_features, in2_features)``."""

    __constants__ = ["in1_features", "in2_features", "out_features"]

    def __init__(self, in1_features, in2_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        self.weight = Parameter(_creation.empty((out_features, in1_features, in2_features), device=device,
                                                dtype=dtype))
        if bias:
            self.bias = Parameter(_creation.empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.in1_features <= 0:
            raise ValueError(f"in1_features must be > 0, but got (in1_features={self.in1_features})")
        bound = 1 / math.sqrt(self.weight.size(1))
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self):
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class LazyLinear(LazyModuleMixin, Linear):
    """A ``Linear`` whose ``in_features`` is inferred from the first input; it then becomes a ``Linear``.

    Until that first call the parameters are empty placeholders. They are filled in place (the same ``Parameter``
    objects), so an optimizer built before the first call still updates them.
    """

    cls_to_become = Linear

    def __init__(self, out_features, bias=True, device=None, dtype=None):
        Module.__init__(self)
        self.in_features = 0
        self.out_features = out_features
        self.weight = Parameter(_creation.empty(0, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(_creation.empty(0, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self._register_lazy_hook()

    def reset_parameters(self):
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input):
        """Give the parameters their shapes from ``input``'s last dim and initialize them as ``Linear``'s."""
        if self.has_uninitialized_params():
            with no_grad():
                self.in_features = input.shape[-1]
                self.weight.data = _creation.empty((self.out_features, self.in_features), dtype=self.weight.dtype,
                                                   device=self.weight.device)
                if self.bias is not None:
                    self.bias.data = _creation.empty(self.out_features, dtype=self.bias.dtype,
                                                     device=self.bias.device)
                self._lazy_pending.clear()
                self.reset_parameters()
        if self.in_features == 0:  # shaped by load_state_dict: the input must fit the loaded weight
            if input.shape[-1] != self.weight.shape[-1]:
                raise AssertionError(f"The in_features inferred from input: {input.shape[-1]} is not equal to "
                                     f"in_features from self.weight: {self.weight.shape[-1]}")
            self.in_features = input.shape[-1]
