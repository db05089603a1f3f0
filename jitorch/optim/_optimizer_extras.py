"""The names of ``torch.optim.optimizer`` that optimizers written outside PyTorch import with ``Optimizer``: the
type aliases (``ParamsT``, ``StateDict`` ...), the shared argument docs, and the helpers of PyTorch's own
optimizers' code (``_default_to_fused_or_foreach``, ``_view_as_real``, ``_disable_dynamo_if_unsupported`` ...).

Re-exported by ``optimizer.py`` under torch's names.

>>> import jitorch
>>> from jitorch.optim.optimizer import _default_to_fused_or_foreach
>>> _default_to_fused_or_foreach([jitorch.ones(2)], differentiable=False, use_fused=True)
(True, False)
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

from .._tensor import Tensor
from ..nn.parameter import Parameter
from ..utils._foreach_utils import _get_foreach_kernels_supported_devices, _get_fused_kernels_supported_devices

Args: TypeAlias = tuple
Kwargs: TypeAlias = dict
StateDict: TypeAlias = dict
DeviceDict: TypeAlias = dict
DeviceDtypeDict: TypeAlias = dict
GlobalOptimizerPreHook: TypeAlias = Callable[..., Any]
GlobalOptimizerPostHook: TypeAlias = Callable[..., None]
ParamsT: TypeAlias = Iterable[Tensor] | Iterable[dict] | Iterable[tuple]

_foreach_supported_types = [Tensor, Parameter]

_params_doc = r"""params (iterable): iterable of parameters or named_parameters to optimize
            or iterable of dicts defining parameter groups. When using named_parameters,
            all parameters in all groups should be named"""
_foreach_doc = r"""foreach (bool, optional): whether foreach implementation of optimizer
            is used (default: None)"""
_fused_doc = r"""fused (bool, optional): whether the fused implementation is used (default: None)"""
_capturable_doc = r"""capturable (bool, optional): whether this instance is safe to
            capture in a graph (default: False)"""
_differentiable_doc = r"""differentiable (bool, optional): whether autograd should
            occur through the optimizer step in training (default: False)"""
_maximize_doc = r"""maximize (bool, optional): maximize the objective with respect to the
            params, instead of minimizing (default: False)"""


def _default_to_fused_or_foreach(params, differentiable, use_fused=False):
    """``(fused, foreach)`` for optimizers left to choose: fused where asked and every parameter allows it, else
    foreach where every parameter lives on a foreach device (not the CPU, as in PyTorch); neither when
    differentiable."""
    if differentiable:
        return False, False
    fused = use_fused and all(p is None or (type(p) in _foreach_supported_types and p.is_floating_point()
                                            and p.device.type in _get_fused_kernels_supported_devices())
                              for p in params)
    foreach = not fused and all(p is None or (type(p) in _foreach_supported_types
                                              and p.device.type in _get_foreach_kernels_supported_devices())
                                for p in params)
    return fused, foreach


def _view_as_real(params, *state_and_grads):
    """Replace, in place in the lists, each complex parameter and its state/grad entries by their real views."""
    for i, p in enumerate(params):
        if p.is_complex():
            params[i] = _real_view(p)
            for s in state_and_grads:
                s[i] = _real_view(s[i])


def _real_view(t):
    from .._movement_extra import view_as_real

    return view_as_real(t)


def _stack_if_compiling(x):
    return x


def _disable_dynamo_if_unsupported(single_tensor_fn=None):
    """A decorator that leaves the function as it is: jitorch has no Dynamo to fall back from."""
    def wrapper(func):
        return func
    return wrapper


def _get_capturable_supported_devices(supports_xla=True):
    """The device types of ``capturable=True`` optimizers: jitorch captures CPU graphs too."""
    return ["cuda", "cpu"]
