"""Upsampling layers: ``Upsample`` (any ``F.interpolate`` mode) and the legacy ``UpsamplingNearest2d`` /
``UpsamplingBilinear2d``.

>>> import jitorch
>>> from jitorch.nn.modules.upsampling import Upsample
>>> up = Upsample(scale_factor=2, mode="bilinear")
>>> up
Upsample(scale_factor=2.0, mode='bilinear')
>>> up(jitorch.randn(1, 3, 4, 4)).shape
jitorch.Size([1, 3, 8, 8])
"""
from __future__ import annotations

from .. import functional as F  # the public functions: a traced Proxy records them
from .module import Module

__all__ = ["Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d"]


class Upsample(Module):
    """Resize ``(N, C, *spatial)`` inputs to ``size`` or by ``scale_factor`` with ``F.interpolate``'s ``mode``."""

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None):
        super().__init__()
        self.name = type(self).__name__
        self.size = size
        if isinstance(scale_factor, tuple):
            self.scale_factor = tuple(float(factor) for factor in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input):
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self):
        info = "scale_factor=" + repr(self.scale_factor) if self.scale_factor is not None else "size=" + repr(self.size)
        return info + ", mode=" + repr(self.mode)


class UpsamplingNearest2d(Upsample):
    """Nearest-neighbour 2-D upsampling (deprecated in PyTorch in favour of ``interpolate``)."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Bilinear 2-D upsampling with ``align_corners=True`` (deprecated in PyTorch in favour of ``interpolate``)."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
