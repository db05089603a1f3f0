"""Core of ``nn.functional``: ``linear``, ``bilinear``, the softmax family and helpers shared by the other parts.

Everything is a composite of jitorch ops, so autograd (double backward included) comes for free.

>>> import jitorch
>>> import jitorch.nn.functional as F
>>> x = jitorch.ones(2, 3)
>>> F.linear(x, jitorch.ones(4, 3), jitorch.zeros(4)).shape
jitorch.Size([2, 4])
>>> F.softmax(jitorch.tensor([[0.0, 0.0]]), dim=-1)
tensor([[0.5000, 0.5000]])
"""
from __future__ import annotations

import warnings

import numpy as np

from .._stat_checks import warn_at_caller
from .. import _dispatch, _reduction
from ..amp._cast_mode import autocast_lower
from .._dispatch import _NO_ATTRS, MODES, TENSOR_TYPES, TORCH_TYPE_NAMES, apply, sync_view
from .._dispatch_fast import keep_result
from .._grad_state import GradState
from .._linalg import add_product
from .._tensor import Tensor
from ..autograd.grad_mode import is_grad_enabled
from ..autograd.graph import named
from ..ops.nn_fused import FUSED_DTYPES
from ..ops.nn_linear import LINEAR

__all__ = ["linear", "bilinear", "softmax", "log_softmax", "softmin", "gumbel_softmax"]

_ndarray = np.ndarray


# -- helpers shared by the functional files -------------------------------------------------------------------------
def type_name(dtype):
    """PyTorch's short name of a dtype in error messages (``Float``, ``Long``, ...)."""
    return TORCH_TYPE_NAMES[dtype.name]


def run_inplace(input, fn, *args, **kwargs):
    """``input.copy_(fn(input, ...))``: PyTorch's ``inplace=True`` form of a composite.

    When gradients flow, the composite reads a clone: it may save its input for backward, and the copy into ``input``
    would otherwise invalidate that saved tensor.
    """
    source = input.clone() if input.requires_grad and is_grad_enabled() else input
    return input.copy_(fn(source, *args, **kwargs))


def check_tensor(value, op, name="input"):
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(value).__name__}")


# -- linear maps ----------------------------------------------------------------------------------------------------
def _linear_grad_name(input, bias):
    """The grad_fn at::linear's decomposition leaves for this input: addmm or mm for matrices, a view of addmm for
    a vector or a contiguous batch with a bias (a plain add after matmul otherwise), matmul's views without one."""
    nd = input._data.ndim
    if bias is None:
        return {1: "SqueezeBackward4", 2: "MmBackward0"}.get(nd, "UnsafeViewBackward0")
    if nd == 2:
        return "AddmmBackward0"
    return "ViewBackward0" if nd == 1 or input.is_contiguous() else "AddBackward0"


def linear(input, weight, bias=None):
    """``input @ weight.T + bias`` over the last dim of ``input`` (``weight``: ``[out, in]`` or ``[in]``)."""
    # Every layer's call: with no mode (autocast, a tracer, a compiler, the profiler) and CPU float tensors of one
    # dtype and matching shapes, the row's kernel straight away. Each check, frame and wrapper of the general path
    # below is a fraction of a microsecond, on a kernel of a few for a small layer.
    if not MODES and type(input) in TENSOR_TYPES and type(weight) in TENSOR_TYPES:
        x, w = input._data, weight._data
        if type(x) is _ndarray and type(w) is _ndarray and w.ndim == 2 and x.ndim and x.shape[-1] == w.shape[1] \
                and x.dtype in FUSED_DTYPES and w.dtype == x.dtype:
            if bias is None:
                return _linear_row(input, weight, None, x, w, None)
            if type(bias) in TENSOR_TYPES:
                b = bias._data
                if type(b) is _ndarray and b.dtype == x.dtype and b.shape == (w.shape[0],):
                    return _linear_row(input, weight, bias, x, w, b)
    return _linear(input, weight, bias)


def _linear_row(input, weight, bias, x, w, b):
    """`eager`'s ``fast_keep`` for the linear row on arrays `linear` has checked, and the grad_fn's torch name."""
    if input._base is not None or weight._base is not None or bias is not None and bias._base is not None:
        for t in (input, weight, bias):
            if t is not None and t._base is not None and t._view_ver != t._ver_owner._ver:
                sync_view(t)  # (the history only: the arrays stay)
    grad = input._requires_grad or weight._requires_grad or bias is not None and bias._requires_grad
    out = keep_result(LINEAR, (input, weight, bias), _NO_ATTRS, LINEAR.kernel(_dispatch.CPU_XP, x, w, b), grad)
    if grad and GradState.enabled:
        named(out, _linear_grad_name(input, bias))
    return out


@autocast_lower
def _linear(input, weight, bias=None):
    check_tensor(input, "linear")
    check_tensor(weight, "linear", "weight")
    _check_same_dtype("linear", input, weight, bias)
    # The arrays' shapes, not ``.shape``/``.dim()``: each of those builds a Size or calls a method, on every layer call.
    x_shape, w_shape = input._data.shape, weight._data.shape
    if not x_shape or not w_shape:
        raise RuntimeError(f"both arguments to linear need to be at least 1D, but they are {len(x_shape)}D and "
                           f"{len(w_shape)}D")
    if len(w_shape) == 1:
        out = input.matmul(weight)
    else:
        if len(w_shape) != 2:
            raise RuntimeError(f"linear: weight must be 1-D or 2-D, but got a {weight.dim()}-D weight of shape "
                               f"{list(weight.shape)}")
        if not x_shape or x_shape[-1] != w_shape[1]:
            rows = 1
            for s in input.shape[:-1]:
                rows *= s
            cols = input.shape[-1] if input.dim() else 1
            raise RuntimeError(f"linear: mat1 and mat2 shapes cannot be multiplied ({rows}x{cols} and "
                               f"{weight.shape[1]}x{weight.shape[0]})")
        if input._data.dtype in FUSED_DTYPES and (bias is None or bias._data.shape == (w_shape[0],)):
            # One row: matmul and in-place bias add forward, one node whose backward sums the bias gradient directly.
            out = apply(LINEAR, input, weight, bias)
            if type(out) is Tensor and out.grad_fn is not None:  # (a compiler's deferred tensor has no history yet)
                named(out, _linear_grad_name(input, bias))
            return out
        if bias is not None and (input.dim() == 2 or input.is_contiguous() and bias.is_contiguous() and (
                bias.dim() == 1 or bias.squeeze().dim() == 1)):
            # at::linear's addmm path (the product and the bias added in float32 for halves, rounded once); other
            # inputs and biases take its matmul-then-add_ path, rounded twice.
            return add_product(bias, lambda x, w: x.matmul(w.t()), (input, weight))
        out = input.matmul(weight.t())
    return out if bias is None else out + bias


def _check_same_dtype(op, input, weight, bias=None):
    # PyTorch does not promote inside its matmul kernels: float64 data into a float32 layer is an error.
    dt = input._data.dtype
    if weight._data.dtype == dt and (bias is None or bias._data.dtype == dt):
        return
    for name, t in (("mat2", weight), ("bias", bias)):
        if t is not None and t.dtype is not input.dtype:
            raise RuntimeError(f"{op}: mat1 and {name} must have the same dtype, but got {type_name(input.dtype)} "
                               f"and {type_name(t.dtype)}")


def bilinear(input1, input2, weight, bias=None):
    """``y[..., o] = sum_ij input1[..., i] * weight[o, i, j] * input2[..., j] + bias[o]``."""
    _check_same_dtype("bilinear", input1, weight, bias)
    _check_same_dtype("bilinear", input1, input2)
    if input1.dim() != input2.dim():
        raise RuntimeError(f"bilinear(): input dimensions do not match: got {input1.dim()} and {input2.dim()}")
    for i in range(input1.dim() - 1):
        if input1.shape[i] != input2.shape[i]:
            raise RuntimeError(f"bilinear(): input batch dimensions do not match at dim {i}: got {input1.shape[i]} "
                               f"and {input2.shape[i]}")
    if weight.dim() != 3:
        raise RuntimeError(f"bilinear(): weight must be 3-D [out, in1, in2], but got shape {list(weight.shape)}")
    out_f, in1, in2 = weight.shape
    if input1.shape[-1] != in1:
        raise RuntimeError(f"bilinear(): input1 size does not match weight size: got {input1.shape[-1]} but "
                           f"expected {in1}")
    if input2.shape[-1] != in2:
        raise RuntimeError(f"bilinear(): input2 size does not match weight size: got {input2.shape[-1]} but "
                           f"expected {in2}")
    if bias is not None and bias.shape[0] != out_f:
        raise RuntimeError(f"bilinear(): bias size does not match weight size: got {bias.shape[0]} but expected "
                           f"{out_f}")
    lead = tuple(input1.shape[:-1])
    x1 = input1.reshape(-1, in1)
    x2 = input2.reshape(-1, in2)
    # One matmul against weight laid out as [in1, out * in2], then a contraction with input2 over in2.
    mixed = x1.matmul(weight.permute(1, 0, 2).reshape(in1, out_f * in2)).reshape(-1, out_f, in2)
    out = (mixed * x2.unsqueeze(1)).sum(-1)
    if bias is not None:
        out = out + bias
    return out.reshape(lead + (out_f,))


# -- the softmax family ---------------------------------------------------------------------------------------------
def _softmax_dim(name, ndim, stacklevel):
    warn_at_caller(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X as "
                   "an argument.")
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """``exp(x) / sum(exp(x))`` along ``dim``, computed stably; ``dtype`` casts the input first."""
    if dim is None:
        dim = _softmax_dim("softmax", input.dim(), _stacklevel)
    return _reduction.softmax(input, dim, dtype=dtype)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """``log(softmax(x))`` computed stably (no ``log`` of a rounded-to-zero probability)."""
    if dim is None:
        dim = _softmax_dim("log_softmax", input.dim(), _stacklevel)
    return _reduction.log_softmax(input, dim, dtype=dtype)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """``softmax(-x)`` along ``dim``."""
    if dim is None:
        dim = _softmax_dim("softmin", input.dim(), _stacklevel)
    return _reduction.softmax(-input, dim, dtype=dtype)


def gumbel_softmax(logits, tau=1, hard=False, eps=1e-10, dim=-1):
    """Samples of the Gumbel-softmax distribution; ``hard=True`` returns one-hot samples with soft gradients."""
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.", stacklevel=2)
    gumbels = -logits.new_empty(logits.shape).exponential_().log()  # ~Gumbel(0, 1)
    y_soft = ((logits + gumbels) / tau).softmax(dim)
    if not hard:
        return y_soft
    index = y_soft.max(dim, keepdim=True)[1]
    y_hard = logits.new_zeros(logits.shape).scatter_(dim, index, 1.0)
    # Straight-through: the value of y_hard, the gradient of y_soft.
    return y_hard - y_soft.detach() + y_soft
