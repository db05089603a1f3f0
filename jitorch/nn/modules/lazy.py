"""Lazy layers: ``LazyConv{1,2,3}d``, ``LazyConvTranspose{1,2,3}d``, ``LazyBatchNorm{1,2,3}d`` and
``LazyInstanceNorm{1,2,3}d``, whose input channel count comes from the first input (``LazyLinear`` is in linear.py).

Each is built as its target layer with zero input channels (no initialization runs, as in torch); the first call
gives the parameters and buffers their shapes, initializes them as the target layer does and turns the module into
that layer (``cls_to_become``). The ``Parameter`` objects stay the same, so an optimizer built before or after the
first call updates them.

>>> import jitorch
>>> from jitorch.nn import LazyConv2d
>>> conv = LazyConv2d(4, 3)
>>> conv(jitorch.randn(1, 2, 5, 5)).shape, type(conv).__name__, tuple(conv.weight.shape)
(jitorch.Size([1, 4, 3, 3]), 'Conv2d', (4, 2, 3, 3))
"""
from __future__ import annotations

import warnings

from ... import _creation
from ...autograd.grad_mode import no_grad
from .batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from ._lazy_base import LazyModuleMixin
from .instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d

__all__ = ["LazyModuleMixin", "LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d",
           "LazyConvTranspose3d", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d", "LazyInstanceNorm1d",
           "LazyInstanceNorm2d", "LazyInstanceNorm3d"]


def _materialize(tensor, shape):
    """Give a placeholder parameter or buffer ``shape`` in place (same object; values set by the caller)."""
    tensor.data = _creation.empty(shape, dtype=tensor.dtype, device=tensor.device)


def _quiet(init, *args, **kwargs):
    # zero input channels: the target layer's initializers warn that they have nothing to fill
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Initializing zero-element tensors is a no-op")
        init(*args, **kwargs)


class _LazyConvMixin(LazyModuleMixin):
    def reset_parameters(self):
        """Nothing until the first input gives ``in_channels`` (torch's ``_LazyConvXdMixin``): the placeholder layer
        would otherwise draw its bias from the random stream at construction (a transposed one's fan-in is not
        zero), and seeded weights of the layers built after it would differ from torch's."""
        if self.in_channels != 0 and not self.has_uninitialized_params():
            super().reset_parameters()

    def initialize_parameters(self, input, *args):
        """Take ``in_channels`` from ``input`` (dim 1, or dim 0 unbatched), shape and initialize the parameters."""
        if not self.has_uninitialized_params():
            return  # shaped by load_state_dict: as torch, in_channels keeps its placeholder 0
        nd = len(self.kernel_size)
        if input.dim() not in (nd + 1, nd + 2):
            raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to "
                               f"{type(self).__name__}, but got input of size: {input.shape}")
        self.in_channels = input.shape[1] if input.dim() == nd + 2 else input.shape[0]
        if self.in_channels % self.groups != 0:
            raise ValueError(f"in_channels must be divisible by groups (in_channels={self.in_channels}, "
                             f"groups={self.groups})")
        with no_grad():
            first, second = ((self.in_channels, self.out_channels // self.groups) if self.transposed
                             else (self.out_channels, self.in_channels // self.groups))
            _materialize(self.weight, (first, second) + tuple(self.kernel_size))
            if self.bias is not None:
                _materialize(self.bias, (self.out_channels,))
            self._lazy_pending.clear()  # shaped now, so reset_parameters draws
            self.reset_parameters()


def _lazy_conv(name, target):
    def __init__(self, out_channels, kernel_size, *args, **kwargs):
        _quiet(target.__init__, self, 0, out_channels, kernel_size, *args, **kwargs)
        self._register_lazy_hook()

    __init__.__doc__ = f"``{target.__name__}`` without ``in_channels``: it is the first input's channel count."
    return type(name, (_LazyConvMixin, target), {"__init__": __init__, "cls_to_become": target,
                                                  "__doc__": f"A lazily shaped ``{target.__name__}``."})


LazyConv1d = _lazy_conv("LazyConv1d", Conv1d)
LazyConv2d = _lazy_conv("LazyConv2d", Conv2d)
LazyConv3d = _lazy_conv("LazyConv3d", Conv3d)
LazyConvTranspose1d = _lazy_conv("LazyConvTranspose1d", ConvTranspose1d)
LazyConvTranspose2d = _lazy_conv("LazyConvTranspose2d", ConvTranspose2d)
LazyConvTranspose3d = _lazy_conv("LazyConvTranspose3d", ConvTranspose3d)


class _LazyNormMixin(LazyModuleMixin):
    def initialize_parameters(self, input, *args):
        """Take ``num_features`` from ``input``'s dim 1 (as torch), shape and reset the parameters and statistics."""
        if not self.has_uninitialized_params():
            return  # shaped by load_state_dict: as torch, num_features keeps its placeholder 0
        self.num_features = input.shape[1]
        with no_grad():
            if self.affine:
                _materialize(self.weight, (self.num_features,))
                if self.bias is not None:
                    _materialize(self.bias, (self.num_features,))
            if self.track_running_stats:
                _materialize(self.running_mean, (self.num_features,))
                _materialize(self.running_var, (self.num_features,))
            self.reset_parameters()
        self._lazy_pending.clear()


def _lazy_norm(name, target, affine, track_running_stats):
    def __init__(self, eps=1e-5, momentum=0.1, affine=affine, track_running_stats=track_running_stats, device=None,
                 dtype=None):
        target.__init__(self, 0, eps, momentum, affine, track_running_stats, device, dtype)
        self._register_lazy_hook()

    __init__.__doc__ = f"``{target.__name__}`` without ``num_features``: it is the first input's dim 1."
    return type(name, (_LazyNormMixin, target), {"__init__": __init__, "cls_to_become": target,
                                                  "__doc__": f"A lazily shaped ``{target.__name__}``."})


LazyBatchNorm1d = _lazy_norm("LazyBatchNorm1d", BatchNorm1d, True, True)
LazyBatchNorm2d = _lazy_norm("LazyBatchNorm2d", BatchNorm2d, True, True)
LazyBatchNorm3d = _lazy_norm("LazyBatchNorm3d", BatchNorm3d, True, True)
# torch's lazy instance norms default to affine=True, track_running_stats=True, unlike InstanceNorm*d
LazyInstanceNorm1d = _lazy_norm("LazyInstanceNorm1d", InstanceNorm1d, True, True)
LazyInstanceNorm2d = _lazy_norm("LazyInstanceNorm2d", InstanceNorm2d, True, True)
LazyInstanceNorm3d = _lazy_norm("LazyInstanceNorm3d", InstanceNorm3d, True, True)
for _cls in (LazyConv1d, LazyConv2d, LazyConv3d, LazyConvTranspose1d, LazyConvTranspose2d, LazyConvTranspose3d,
             LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d, LazyInstanceNorm1d, LazyInstanceNorm2d,
             LazyInstanceNorm3d):
    _cls.__module__ = __name__
del _cls
