"""``torch.nn.grad``: a convolution's input and weight gradients as functions (``conv2d_input``,
``conv2d_weight``...), through the convolution rows' own backward kernels.

>>> import jitorch
>>> x, w = jitorch.ones(1, 1, 4, 4), jitorch.ones(1, 1, 3, 3)
>>> g = jitorch.ones(1, 1, 2, 2)
>>> conv2d_weight(x, w.shape, g).shape, conv2d_input(x.shape, w, g).sum().item()
(jitorch.Size([1, 1, 3, 3]), 36.0)
"""
from __future__ import annotations

from .._dispatch import apply
from ..ops.conv_ops import CONVOLUTION_TRANSPOSE, CONVOLUTION_WEIGHT
from .modules.pooling import _ntuple as _tuple

__all__ = ["conv1d_input", "conv1d_weight", "conv2d_input", "conv2d_weight", "conv3d_input", "conv3d_weight"]


def _input_grad(nd, input_size, weight, grad_output, stride, padding, dilation, groups):
    spatial = tuple(input_size)[-nd:]
    return apply(CONVOLUTION_TRANSPOSE, grad_output, weight, spatial=spatial, stride=_tuple(stride, nd),
                 padding=_tuple(padding, nd), dilation=_tuple(dilation, nd), groups=groups)


def _weight_grad(nd, input, weight_size, grad_output, stride, padding, dilation, groups):
    return apply(CONVOLUTION_WEIGHT, input, grad_output, kernel=tuple(weight_size)[-nd:], stride=_tuple(stride, nd),
                 padding=_tuple(padding, nd), dilation=_tuple(dilation, nd), groups=groups)


def conv1d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """The gradient of ``conv1d`` with respect to its input (of size ``input_size``)."""
    return _input_grad(1, input_size, weight, grad_output, stride, padding, dilation, groups)


def conv1d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """The gradient of ``conv1d`` with respect to its weight (of size ``weight_size``)."""
    return _weight_grad(1, input, weight_size, grad_output, stride, padding, dilation, groups)


def conv2d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    return _input_grad(2, input_size, weight, grad_output, stride, padding, dilation, groups)


def conv2d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    return _weight_grad(2, input, weight_size, grad_output, stride, padding, dilation, groups)


def conv3d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    return _input_grad(3, input_size, weight, grad_output, stride, padding, dilation, groups)


def conv3d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    return _weight_grad(3, input, weight_size, grad_output, stride, padding, dilation, groups)
