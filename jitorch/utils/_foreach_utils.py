"""``torch.utils._foreach_utils``: which devices take foreach/fused optimizer kernels, and the grouping of tensor
lists by device and dtype that foreach implementations (PyTorch's, and optimizers written after them) start with.

>>> import jitorch
>>> from jitorch.utils._foreach_utils import _group_tensors_by_device_and_dtype
>>> a, b = jitorch.ones(2), jitorch.ones(2, dtype=jitorch.float64)
>>> groups = _group_tensors_by_device_and_dtype([[a, b], [a * 2, None]], with_indices=True)
>>> [(dtype, lists[1], indices) for (device, dtype), (lists, indices) in groups.items()]
[(jitorch.float32, [tensor([2., 2.])], [0]), (jitorch.float64, [None], [1])]
"""
from __future__ import annotations

from typing import TypeAlias

from .._tensor import Tensor
from ..autograd.grad_mode import no_grad

TensorListList: TypeAlias = list
Indices: TypeAlias = list
_foreach_supported_types = [Tensor]


def _get_foreach_kernels_supported_devices():
    """The device types whose optimizers default to ``foreach=True`` (as in PyTorch, not the CPU)."""
    return ["cuda"]


def _get_fused_kernels_supported_devices():
    """The device types ``fused=True`` optimizers accept."""
    return ["cuda", "cpu"]


@no_grad()
def _group_tensors_by_device_and_dtype(tensorlistlist, with_indices=False):
    """``{(device, dtype): ([the lists' tensors of that group], indices)}``, grouped by the first list's tensors.

    The other lists' entries (tensors or None) go with the first list's tensor at the same index; ``indices`` are
    the group's positions in the input when ``with_indices``, else empty.
    """
    groups = {}
    for i, t in enumerate(tensorlistlist[0]):
        lists, indices = groups.setdefault((t.device, t.dtype), ([[] for _ in tensorlistlist], []))
        for out, tensors in zip(lists, tensorlistlist):
            out.append(tensors[i])
        if with_indices:
            indices.append(i)
    return groups


def _device_has_foreach_support(device):
    return device.type in _get_foreach_kernels_supported_devices() + ["cpu"]


def _has_foreach_support(tensors, device):
    return _device_has_foreach_support(device) and all(t is None or type(t) in _foreach_supported_types
                                                       for t in tensors)
