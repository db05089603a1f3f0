"""Flatten parameters into one vector and back: ``parameters_to_vector``, ``vector_to_parameters``.

>>> import jitorch
>>> from jitorch import nn
>>> ps = [nn.Parameter(jitorch.zeros(2, 2)), nn.Parameter(jitorch.zeros(3))]
>>> nn.utils.vector_to_parameters(jitorch.arange(7.0), ps)
>>> ps[1], nn.utils.parameters_to_vector(ps).shape
(Parameter containing:
tensor([4., 5., 6.], requires_grad=True), jitorch.Size([7]))
"""
from __future__ import annotations

from ..._tensor import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def _check_param_device(param, old_param_device):
    device = param.get_device() if param.device.type == "cuda" else -1
    if old_param_device is not None and device != old_param_device:
        raise TypeError("Found two parameters on different devices, this is currently not supported.")
    return device


def parameters_to_vector(parameters):
    """One 1-D tensor holding every parameter's values, flattened, in order (differentiable)."""
    from ..._movement import cat

    param_device = None
    vec = []
    for param in parameters:
        param_device = _check_param_device(param, param_device)
        vec.append(param.view(-1))
    return cat(vec)


def vector_to_parameters(vec, parameters):
    """Make each parameter's ``.data`` the next slice of the 1-D tensor ``vec`` (sharing its memory)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    param_device = None
    pointer = 0
    for param in parameters:
        param_device = _check_param_device(param, param_device)
        num_param = param.numel()
        param.data = vec[pointer:pointer + num_param].view_as(param).data
        pointer += num_param
