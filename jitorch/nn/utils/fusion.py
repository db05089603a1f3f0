"""Folding an evaluation-mode BatchNorm into the convolution or linear layer before it (``torch.nn.utils.fusion``).

BatchNorm in eval mode is ``y = (x - mean) * w / sqrt(var + eps) + b``: a per-channel scale and shift, which the
preceding layer's weight and bias can absorb, so inference runs one layer instead of two.

>>> import jitorch
>>> from jitorch import nn
>>> conv, bn = nn.Conv2d(2, 3, 3).eval(), nn.BatchNorm2d(3).eval()
>>> x = jitorch.randn(1, 2, 5, 5)
>>> bool(jitorch.allclose(fuse_conv_bn_eval(conv, bn)(x), bn(conv(x)), atol=1e-6))
True
"""
from __future__ import annotations

import copy

from ... import _creation
from ..parameter import Parameter

__all__ = ["fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval", "fuse_linear_bn_weights"]


def _scale_shift(bias, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    """The eval BatchNorm's per-channel scale, and the layer's bias after it: ``(b - mean) * scale + b_bn``."""
    scale = (bn_rv + bn_eps).rsqrt()
    if bn_w is not None:
        scale = scale * bn_w
    bias = _creation.zeros_like(bn_rm) if bias is None else bias
    shift = (bias - bn_rm) * scale
    return scale, shift if bn_b is None else shift + bn_b


def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b, transpose=False):
    """``(weight, bias)`` Parameters of the convolution that computes ``bn(conv(x))``; ``transpose``: a transposed
    convolution's weight (output channels on dim 1)."""
    scale, bias = _scale_shift(conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b)
    view = [1, -1] if transpose else [-1, 1]
    weight = conv_w * scale.reshape(view + [1] * (conv_w.dim() - 2))
    bias_dtype = conv_b.dtype if conv_b is not None else conv_w.dtype
    bias_grad = conv_b.requires_grad if conv_b is not None else bn_rm.requires_grad
    return (Parameter(weight.to(conv_w.dtype).detach(), conv_w.requires_grad),
            Parameter(bias.to(bias_dtype).detach(), bias_grad))


def fuse_conv_bn_eval(conv, bn, transpose=False):
    """A copy of eval-mode ``conv`` whose output is ``bn(conv(x))`` (both modules must be in eval mode)."""
    if conv.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused = copy.deepcopy(conv)
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    fused.weight, fused.bias = fuse_conv_bn_weights(fused.weight, fused.bias, bn.running_mean, bn.running_var,
                                                    bn.eps, bn.weight, bn.bias, transpose)
    return fused


def fuse_linear_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    """``(weight, bias)`` Parameters of the linear layer that computes ``bn(linear(x))``."""
    scale, bias = _scale_shift(linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b)
    weight = linear_w * scale.unsqueeze(-1).to(linear_w.dtype)
    bias_dtype = linear_b.dtype if linear_b is not None else linear_w.dtype
    return (Parameter(weight.detach(), linear_w.requires_grad),
            Parameter(bias.to(bias_dtype).detach(),
                      linear_b.requires_grad if linear_b is not None else bn_rm.requires_grad))


def fuse_linear_bn_eval(linear, bn):
    """A copy of eval-mode ``linear`` whose output is ``bn(linear(x))``."""
    if linear.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    if linear.out_features != bn.num_features and bn.num_features != 1:
        raise AssertionError("To fuse, linear.out_features == bn.num_features or bn.num_features == 1, "
                             f"got linear.out_features={linear.out_features} and bn.num_features={bn.num_features}")
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    fused = copy.deepcopy(linear)
    fused.weight, fused.bias = fuse_linear_bn_weights(fused.weight, fused.bias, bn.running_mean, bn.running_var,
                                                      bn.eps, bn.weight, bn.bias)
    return fused
