"""Spatial functional ops of ``jitorch.nn.functional``: convolution, pooling, padding, resampling, unfold/fold.

The implementations live in ``_spatial_conv``, ``_spatial_pool``, ``_spatial_fractional``, ``_spatial_pad``,
``_spatial_resample`` and ``_spatial_sample``; this module gathers their public names for
``nn.functional``'s star import.

>>> import jitorch
>>> from jitorch.nn import _functional_spatial as F
>>> x = jitorch.randn(2, 3, 8, 8)
>>> F.max_pool2d(F.conv2d(x, jitorch.randn(4, 3, 3, 3), padding=1), 2).shape
jitorch.Size([2, 4, 4, 4])
"""
from __future__ import annotations

from . import _spatial_conv, _spatial_fractional, _spatial_pad, _spatial_pool, _spatial_resample, _spatial_sample
from ._spatial_conv import *  # noqa: F401,F403
from ._spatial_fractional import *  # noqa: F401,F403
from ._spatial_pad import *  # noqa: F401,F403
from ._spatial_pool import *  # noqa: F401,F403
from ._spatial_resample import *  # noqa: F401,F403
from ._spatial_sample import *  # noqa: F401,F403

__all__ = (list(_spatial_conv.__all__) + list(_spatial_fractional.__all__) + list(_spatial_pad.__all__)
           + list(_spatial_pool.__all__) + list(_spatial_resample.__all__) + list(_spatial_sample.__all__))
