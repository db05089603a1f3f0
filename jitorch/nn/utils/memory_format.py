"""Converting convolution weights to a memory format, and constructing a module without initializing it.

>>> import jitorch
>>> from jitorch import nn
>>> m = convert_conv2d_weight_memory_format(nn.Sequential(nn.Conv2d(3, 4, 3)), jitorch.channels_last)
>>> m[0].weight.is_contiguous(memory_format=jitorch.channels_last)
True
"""
from __future__ import annotations

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
    right after): built on the meta device in PyTorch; here built normally, then emptied, which is equivalent."""
    if "device" not in module_cls.__init__.__code__.co_varnames:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    module = module_cls(*args, **kwargs)
    for p in module.parameters():
        p.data = p.data.new_empty(p.shape)
    return module
