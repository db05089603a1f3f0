"""Padding layers: constant/zero, reflection, replication and circular padding of the last 1, 2 or 3 dims.

``padding`` is an int (the same on every side) or a tuple ``(left, right[, top, bottom[, front, back]])``.

>>> import jitorch
>>> from jitorch.nn.modules.padding import ZeroPad2d, ReflectionPad1d
>>> ZeroPad2d(1)
ZeroPad2d((1, 1, 1, 1))
>>> ReflectionPad1d((2, 1))(jitorch.arange(4.0).reshape(1, 1, 4))
tensor([[[2., 1., 0., 1., 2., 3., 2.]]])
"""
from __future__ import annotations

from .. import functional as F  # the public functions: a traced Proxy records them
from .module import Module

__all__ = ["ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d",
           "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
           "ReplicationPad3d", "CircularPad1d", "CircularPad2d", "CircularPad3d"]


def _sides(padding, n):
    """An int becomes ``2 * n`` equal amounts; a tuple is kept as given."""
    return tuple(padding) if isinstance(padding, (list, tuple)) else (padding,) * (2 * n)


class _ConstantPadNd(Module):
    _n = 0

    def __init__(self, padding, value):
        super().__init__()
        self.padding = _sides(padding, self._n)
        self.value = value

    def forward(self, input):
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self):
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    """Pads the last dim with a constant ``value``."""

    _n = 1


class ConstantPad2d(_ConstantPadNd):
    """Pads the last two dims with a constant ``value``."""

    _n = 2


class ConstantPad3d(_ConstantPadNd):
    """Pads the last three dims with a constant ``value``."""

    _n = 3


class ZeroPad1d(ConstantPad1d):
    """Pads the last dim with zeros."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class ZeroPad2d(ConstantPad2d):
    """Pads the last two dims with zeros."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class ZeroPad3d(ConstantPad3d):
    """Pads the last three dims with zeros."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class _ModePadNd(Module):
    _n = 0
    _mode = ""

    def __init__(self, padding):
        super().__init__()
        self.padding = _sides(padding, self._n)

    def forward(self, input):
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self):
        return f"{self.padding}"


class ReflectionPad1d(_ModePadNd):
    """Pads the last dim with the reflection of the input (the edge element is not repeated)."""

    _n, _mode = 1, "reflect"


class ReflectionPad2d(_ModePadNd):
    """Pads the last two dims by reflection."""

    _n, _mode = 2, "reflect"


class ReflectionPad3d(_ModePadNd):
    """Pads the last three dims by reflection."""

    _n, _mode = 3, "reflect"


class ReplicationPad1d(_ModePadNd):
    """Pads the last dim by repeating the edge element."""

    _n, _mode = 1, "replicate"


class ReplicationPad2d(_ModePadNd):
    """Pads the last two dims by repeating the edge elements."""

    _n, _mode = 2, "replicate"


class ReplicationPad3d(_ModePadNd):
    """Pads the last three dims by repeating the edge elements."""

    _n, _mode = 3, "replicate"


class _CircularPadNd(_ModePadNd):
    _mode = "circular"

    def forward(self, input):
        if input.dim() not in (self._n + 1, self._n + 2):
            raise ValueError(f"expected {self._n + 1}D or {self._n + 2}D input (got {input.dim()}D input)")
        return F.pad(input, self.padding, "circular")


class CircularPad1d(_CircularPadNd):
    """Pads the last dim by wrapping around (periodic boundary)."""

    _n = 1


class CircularPad2d(_CircularPadNd):
    """Pads the last two dims by wrapping around."""

    _n = 2


class CircularPad3d(_CircularPadNd):
    """Pads the last three dims by wrapping around."""

    _n = 3
