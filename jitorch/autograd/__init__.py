"""Reverse-mode automatic differentiation: ``backward``, ``grad``, ``Function``, grad modes and ``gradcheck``.

>>> import jitorch
>>> x = jitorch.tensor(3.0, requires_grad=True)
>>> (g,) = jitorch.autograd.grad(x ** 3, x, create_graph=True)
>>> g, jitorch.autograd.grad(g, x)[0]
(tensor(27., grad_fn=<MulBackward0>), tensor(18.))
"""
from __future__ import annotations

from .. import _creation
from .._tensor import Tensor
from . import functional, graph
from .anomaly_mode import detect_anomaly, set_detect_anomaly
from .engine import run_backward
from .function import Function, FunctionCtx, once_differentiable
from .grad_mode import (enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled, no_grad,
                        set_grad_enabled)
from .gradcheck import gradcheck, gradgradcheck

__all__ = ["backward", "grad", "Function", "FunctionCtx", "once_differentiable", "no_grad", "enable_grad",
           "set_grad_enabled", "inference_mode", "is_grad_enabled", "is_inference_mode_enabled", "gradcheck",
           "gradgradcheck", "graph", "Variable", "functional", "detect_anomaly", "set_detect_anomaly"]


def _as_list(x):
    if x is None:
        return None
    return [x] if isinstance(x, Tensor) else list(x)


def _root_grads(outputs, grad_outputs, op):
    grads = _as_list(grad_outputs) or [None] * len(outputs)
    if len(grads) != len(outputs):
        raise RuntimeError(f"{op}: got {len(grads)} gradients for {len(outputs)} outputs")
    result = []
    for out, g in zip(outputs, grads):
        if g is None:
            if out._data.size != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            if not out.is_floating_point() and not out.is_complex():
                raise RuntimeError(f"grad can be implicitly created only for real scalar outputs but got {out.dtype}")
            g = _creation.ones_like(out)
        else:
            if not hasattr(g, "_data"):
                g = _creation.tensor(g, dtype=out.dtype, device=out.device)
            if g._data.shape != out._data.shape:
                raise RuntimeError(f"Mismatch in shape: grad_output[0] has a shape of {list(g.shape)} and output[0] "
                                   f"has a shape of {list(out.shape)}.")
        result.append(g)
    return result


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, grad_variables=None, inputs=None):
    """Accumulate gradients of ``tensors`` into the ``.grad`` of the leaves (or of ``inputs`` only)."""
    tensors = _as_list(tensors)
    grads = _root_grads(tensors, grad_tensors if grad_tensors is not None else grad_variables, "backward")
    if retain_graph is None:
        retain_graph = create_graph
    inputs = _as_list(inputs)
    if inputs is not None and not inputs:
        raise RuntimeError("backward: 'inputs' argument to backward() cannot be empty.")
    run_backward(tensors, grads, retain_graph, create_graph, inputs=inputs, accumulate_into_grad=True)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """Gradients of ``outputs`` with respect to ``inputs``, returned rather than accumulated into ``.grad``."""
    outputs = _as_list(outputs)
    inputs = _as_list(inputs)
    grads = _root_grads(outputs, grad_outputs, "grad")
    if retain_graph is None:
        retain_graph = create_graph
    if allow_unused is None:
        allow_unused = materialize_grads
    result = run_backward(outputs, grads, retain_graph, create_graph, inputs=inputs, accumulate_into_grad=False,
                          allow_unused=allow_unused)
    if materialize_grads:
        from .. import _creation

        result = [g if g is not None else _creation.zeros_like(t) for g, t in zip(result, inputs)]
    return tuple(result)


def Variable(data, requires_grad=False):  # noqa: N802 - the legacy constructor name
    """Legacy ``torch.autograd.Variable``: returns the tensor (optionally requiring grad)."""
    return data.requires_grad_(requires_grad) if requires_grad else data
