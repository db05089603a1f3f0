"""``Unfold`` (im2col: sliding blocks to columns) and ``Fold`` (col2im: columns summed back into an image).

>>> import jitorch
>>> from jitorch.nn.modules.fold import Fold, Unfold
>>> cols = Unfold(kernel_size=2)(jitorch.ones(1, 3, 4, 4))
>>> cols.shape
jitorch.Size([1, 12, 9])
>>> Fold(output_size=(4, 4), kernel_size=2)(cols)[0, 0]
tensor([[1., 2., 2., 1.],
        [2., 4., 4., 2.],
        [2., 4., 4., 2.],
        [1., 2., 2., 1.]])
"""
from __future__ import annotations

from .. import functional as F  # the public functions: a traced Proxy records them
from .module import Module

__all__ = ["Fold", "Unfold"]


class Fold(Module):
    """Sum ``(N, C * prod(kernel_size), L)`` blocks into ``(N, C, *output_size)`` (overlaps add up)."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size = output_size
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.padding = padding
        self.stride = stride

    def forward(self, input):
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return ("output_size={output_size}, kernel_size={kernel_size}, dilation={dilation}, padding={padding}, "
                "stride={stride}".format(**self.__dict__))


class Unfold(Module):
    """Extract sliding blocks: ``(N, C, H, W) -> (N, C * prod(kernel_size), L)``."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.padding = padding
        self.stride = stride

    def forward(self, input):
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return ("kernel_size={kernel_size}, dilation={dilation}, padding={padding}, "
                "stride={stride}".format(**self.__dict__))
