"""``PixelShuffle`` (channels to space, sub-pixel convolution upsampling) and its inverse ``PixelUnshuffle``.

>>> import jitorch
>>> from jitorch.nn.modules.pixelshuffle import PixelShuffle
>>> PixelShuffle(2)(jitorch.randn(1, 8, 3, 3)).shape
jitorch.Size([1, 2, 6, 6])
"""
from __future__ import annotations

from .. import functional as F  # the public functions: a traced Proxy records them
from .module import Module

__all__ = ["PixelShuffle", "PixelUnshuffle", "ChannelShuffle"]


class PixelShuffle(Module):
    """``(*, C * r^2, H, W) -> (*, C, H * r, W * r)`` with ``r = upscale_factor``."""

    def __init__(self, upscale_factor):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self):
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """``(*, C, H * r, W * r) -> (*, C * r^2, H, W)`` with ``r = downscale_factor``."""

    def __init__(self, downscale_factor):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self):
        return f"downscale_factor={self.downscale_factor}"


class ChannelShuffle(Module):
    """Interleave the channels of ``groups`` groups: ``(N, g * k, *) -> (N, k * g, *)``."""

    def __init__(self, groups):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self):
        return f"groups={self.groups}"
