"""Reverse-mode automatic differentiation: ``backward``, ``grad``, ``Function``, grad modes and ``gradcheck``.

>>> import jitorch
>>> x = jitorch.tensor(3.0, requires_grad=True)
>>> (g,) = jitorch.autograd.grad(x ** 3, x, create_graph=True)
>>> g, jitorch.autograd.grad(g, x)[0]
(tensor(27., grad_fn=<MulBackward0>), tensor(18.))
"""
from __future__ import annotations

import numpy as np

from .. import _creation
from .._tensor import Size, Tensor
from . import forward_ad, functional, graph
from .anomaly_mode import detect_anomaly, set_detect_anomaly
from .engine import run_backward
from .function import Function, FunctionCtx, once_differentiable
from .grad_mode import (enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled,
                        is_multithreading_enabled, no_grad, set_grad_enabled, set_multithreading_enabled)
from .gradcheck import gradcheck, gradgradcheck

__all__ = ["backward", "grad", "Function", "FunctionCtx", "once_differentiable", "no_grad", "enable_grad",
           "set_grad_enabled", "inference_mode", "is_grad_enabled", "is_inference_mode_enabled", "gradcheck",
           "gradgradcheck", "graph", "Variable", "functional", "forward_ad", "detect_anomaly", "set_detect_anomaly",
           "set_multithreading_enabled", "is_multithreading_enabled"]


def _as_list(x):
    if x is None:
        return None
    return [x] if isinstance(x, Tensor) else list(x)


def _root_grads(outputs, grad_outputs, op, batched=False):
    grads = _as_list(grad_outputs) or [None] * len(outputs)
    if len(grads) != len(outputs):
        raise RuntimeError(f"{op}: got {len(grads)} gradients for {len(outputs)} outputs")
    result = []
    for i, (out, g) in enumerate(zip(outputs, grads)):
        if g is None:
            if not out._requires_grad:  # the engine reports it, by its index
                result.append(None)
                continue
            if out._data.size != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            if not out.is_floating_point():  # a complex loss too, as torch: its gradient needs a chosen direction
                raise RuntimeError(f"grad can be implicitly created only for real scalar outputs but got {out.dtype}")
            data = out._data
            # The implicit gradient of every ``loss.backward()``: a NumPy one directly (``ones_like`` resolves
            # devices, dtypes and layouts, none of which a one-element host array has to choose).
            if type(data) is np.ndarray:
                one = np.array(1, data.dtype)  # (np.ones is a Python wrapper: 4x slower for one element)
                g = Tensor._make(one if not data.ndim else one.reshape(data.shape))
            else:
                g = _creation.ones_like(out)
        else:
            if not hasattr(g, "_data"):
                g = _creation.tensor(g, dtype=out.dtype, device=out.device)
            shape = g._data.shape[1:] if batched else g._data.shape
            if shape != out._data.shape:
                if batched:
                    raise RuntimeError(
                        "If `is_grads_batched=True`, we interpret the first dimension of each grad_output as the batch "
                        "dimension. The sizes of the remaining dimensions are expected to match the shape of "
                        f"corresponding output, but a mismatch was detected: grad_output[{i}] has a shape of "
                        f"{Size(shape)} and output[{i}] has a shape of {out.shape}. If you only want some "
                        "tensors in `grad_output` to be considered batched, consider using vmap.")
                raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {g.shape} and output[{i}] "
                                   f"has a shape of {out.shape}.")
            if g.is_complex() != out.is_complex():
                raise RuntimeError("For complex Tensors, both grad_output and output are required to have the same "
                                   f"dtype. Mismatch in dtype: grad_output[{i}] has a dtype of {g.dtype} and "
                                   f"output[{i}] has a dtype of {out.dtype}.")
            if g.dtype is not out.dtype:
                # torch's engine casts every incoming gradient to its tensor's dtype: a float64 (or integer)
                # grad_output must not turn a float32 parameter's .grad into float64.
                g = g.to(out.dtype)
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
    if create_graph:
        import warnings

        warnings.warn(
            "Using backward() with create_graph=True will create a reference cycle between the parameter and its "
            "gradient which can cause a memory leak. We recommend using autograd.grad when creating the graph to "
            "avoid this. If you have to use this function, make sure to reset the .grad fields of your parameters "
            "to None after use to break the cycle and avoid the leak.", UserWarning, stacklevel=3)
    run_backward(tensors, grads, retain_graph, create_graph, inputs=inputs, accumulate_into_grad=True)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """Gradients of ``outputs`` with respect to ``inputs``, returned rather than accumulated into ``.grad``."""
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when materialize_grads=True, but got: "
                         "allow_unused=False.")
    if allow_unused is None:
        allow_unused = materialize_grads
    outputs = _as_list(outputs)
    keys = list(inputs) if type(inputs) is dict else None
    inputs = list(inputs.values()) if keys is not None else _as_list(inputs)
    if not inputs:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    if any(t.is_sparse for t in inputs if isinstance(t, Tensor)):  # differentiated through their values
        from ..sparse._coo_grad import sparse_input_grads

        result = sparse_input_grads(grad, outputs, inputs, grad_outputs=grad_outputs, retain_graph=retain_graph,
                                    create_graph=create_graph, allow_unused=allow_unused,
                                    is_grads_batched=is_grads_batched, materialize_grads=materialize_grads)
        return dict(zip(keys, result)) if keys is not None else result
    if not only_inputs:
        import warnings

        warnings.warn("only_inputs argument is deprecated and is ignored now (defaults to True). To accumulate "
                      "gradient for other parts of the graph, please use torch.autograd.backward.", FutureWarning,
                      stacklevel=2)
    grads = _root_grads(outputs, grad_outputs, "grad", batched=is_grads_batched)
    if retain_graph is None:
        retain_graph = create_graph
    if is_grads_batched:
        result = _batched_grad(outputs, grads, inputs, retain_graph, create_graph, allow_unused)
    else:
        result = run_backward(outputs, grads, retain_graph, create_graph, inputs=inputs, accumulate_into_grad=False,
                              allow_unused=allow_unused)
    if materialize_grads:
        result = [g if g is not None else _creation.zeros_like(t, requires_grad=create_graph)
                  for g, t in zip(result, inputs)]
    if keys is not None:
        return dict(zip(keys, result))
    return tuple(result)


def _batched_grad(outputs, grads, inputs, retain_graph, create_graph, allow_unused):
    """torch vmaps the vector-Jacobian product over the first dimension of the grad_outputs; one backward per row,
    stacked, gives the same values (the graph is kept until the last row)."""
    from .. import _movement

    n = grads[0]._data.shape[0]
    if any(g._data.shape[0] != n for g in grads):
        raise ValueError("vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
                         f"{[g._data.shape[0] for g in grads]} for the mapped dimension")
    rows = [run_backward(outputs, [g[b] for g in grads], retain_graph or b < n - 1, create_graph, inputs=inputs,
                         accumulate_into_grad=False, allow_unused=allow_unused) for b in range(n)]
    result = []
    for i in range(len(inputs)):
        col = [r[i] for r in rows]
        if all(c is None for c in col):
            result.append(None)
        else:
            result.append(_movement.stack([c if c is not None else _creation.zeros_like(inputs[i]) for c in col]))
    return result


class _ExecutionEngine:
    """``Variable._execution_engine``: torch's handle on the backward engine (only ``queue_callback`` is offered)."""

    @staticmethod
    def queue_callback(callback):
        from .graph_task import queue_callback

        queue_callback(callback)


class _VariableMeta(type):
    def __instancecheck__(cls, other):  # as torch: every tensor is a Variable (``isinstance(h, Variable)``)
        return isinstance(other, Tensor)


class Variable(metaclass=_VariableMeta):
    """Legacy ``torch.autograd.Variable(data=None, requires_grad=False, volatile=False)``: as torch, a tensor
    sharing ``data``'s values, detached from its graph (an empty one for no ``data``), requiring grad as asked;
    ``volatile`` only warns. ``Variable._execution_engine.queue_callback(fn)`` runs ``fn`` at the end of the
    running backward."""

    _execution_engine = _ExecutionEngine()

    def __new__(cls, data=None, requires_grad=False, volatile=False, _grad_fn=None, name=None):
        if volatile:
            from .._stat_checks import warn_at_caller

            warn_at_caller("volatile was removed and now has no effect. Use `with torch.no_grad():` instead.")
            if requires_grad:
                raise ValueError("Variable can't be volatile and require_grad at the same time!")
        if _grad_fn is not None:
            raise TypeError("jitorch's Variable does not take _grad_fn: build the tensor with an op or a Function")
        if data is None:
            var = _creation.empty(0)
        elif isinstance(data, Tensor):
            var = data.detach()
        else:
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        return var.requires_grad_(bool(requires_grad))
