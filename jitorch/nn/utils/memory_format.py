"""Converting convolution weights to a memory format, and constructing a module without initializing it.

>>> import jitorch
>>> from jitorch import nn
>>> m = convert_conv2d_weight_memory_format(nn.Sequential(nn.Conv2d(3, 4, 3)), jitorch.channels_last)
>>> m[0].weight.is_contiguous(memory_format=jitorch.channels_last)
True
"""
from __future__ import annotations

import inspect

from ..modules.module import Module

__all__ = ["convert_conv2d_weight_memory_format", "convert_conv3d_weight_memory_format", "skip_init"]


def _convert(module, memory_format, classes):
    if isinstance(module, classes):
        module.weight.data = module.weight.detach().clone(memory_format=memory_format)
    for child in module.children():
        _convert(child, memory_format, classes)
    return module


def convert_conv2d_weight_memory_format(module, memory_format):
    """Put every Conv2d/ConvTranspose2d weight of ``module`` in ``memory_format`` (in place; returns ``module``)."""
    from ..modules.conv import Conv2d, ConvTranspose2d

    return _convert(module, memory_format, (Conv2d, ConvTranspose2d))


def convert_conv3d_weight_memory_format(module, memory_format):
    """Put every Conv3d/ConvTranspose3d weight of ``module`` in ``memory_format`` (in place; returns ``module``)."""
    from ..modules.conv import Conv3d, ConvTranspose3d

    return _convert(module, memory_format, (Conv3d, ConvTranspose3d))


def skip_init(module_cls, *args, **kwargs):
    """``module_cls(*args, **kwargs)`` with its parameters and buffers left uninitialized (for loading a state dict
    right after): built on the meta device, so no initializer runs, then given empty storage on ``device``.

    >>> from jitorch import nn
    >>> skip_init(nn.Linear, 2, 3).weight.shape
    jitorch.Size([3, 2])
    """
    if not issubclass(module_cls, Module):
        raise RuntimeError(f"Expected a Module; got {module_cls}")
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    final_device = kwargs.pop("device", "cpu")
    kwargs["device"] = "meta"
    return module_cls(*args, **kwargs).to_empty(device=final_device)
