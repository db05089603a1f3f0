"""Elementwise composites whose naive formula fails at extreme values: ``hypot`` (squares that overflow),
``lerp`` (torch's two branches, exact at both ends), ``logaddexp``/``logaddexp2`` (infinities, tiny tails).

Split from ``_pointwise.py``, which re-exports them and attaches the Tensor methods.

>>> import jitorch
>>> jitorch.hypot(jitorch.tensor([3e30]), jitorch.tensor([4e30]))
tensor([5.0000e+30])
>>> jitorch.lerp(jitorch.tensor([1e8]), jitorch.tensor([1.0]), 1.0)
tensor([1.])
"""
from __future__ import annotations

import math
from builtins import abs as _abs

from . import _dtype
from ._pointwise import (_require_float, _write_out, abs, isfinite, isinf, maximum, sqrt,
                         where)
from ._out_variants import check_out_tensor
from ._tensor import Tensor
from .ops import logaddexp_ops, muladd_ops


def hypot(input, other):
    """``sqrt(input**2 + other**2)`` without overflow or underflow of the squares."""
    if isinstance(other, Tensor) and other.dtype is input.dtype and input.dtype.category == _dtype.FLOAT:
        return muladd_ops.hypot(input, other)  # (the common case, without the checks' microseconds)
    _require_float("hypot_cpu", input, other, real=True)
    dt = _dtype.result_type(input, other)
    input = input.to(dt)
    if isinstance(other, Tensor):
        return muladd_ops.hypot(input, other.to(dt))
    # (a Python number: the composite, its squares divided by the larger magnitude first)
    m = maximum(abs(input), abs(other)).detach()
    scale = where((m > 0) & isfinite(m), m, 1.0)
    x, y = input / scale, other / scale
    result = scale * sqrt(x * x + y * y)
    return where(isinf(input) | isinf(other), math.inf, result)  # as std::hypot, an infinity beats a nan


def lerp(input, end, weight, *, out=None):
    """``input + weight * (end - input)``, from the nearer end as torch computes it: exact at ``weight`` 0 and 1."""
    operands = (input, end, weight)  # (an out overlapping one partially is refused, as by torch's TensorIterator)
    if out is not None:
        check_out_tensor(out, "lerp")
    dt = input.dtype
    if isinstance(end, Tensor) and end.dtype is dt and dt.category == _dtype.FLOAT:  # the rows, checks skipped
        if isinstance(weight, Tensor) and weight.dtype is dt:
            return _write_out(muladd_ops.lerp(input, end, weight), out, "lerp", inputs=operands)
        if type(weight) in (int, float):
            return _write_out(muladd_ops.lerp_scalar(input, end, weight), out, "lerp", inputs=operands)
    tensor_weight = isinstance(weight, Tensor)
    # torch checks the dtypes first (a 0-d weight may differ), then the kernel's dtype: the promoted one.
    for name, t in (("end", end), ("weight", weight)):
        if isinstance(t, Tensor) and t.dtype is not input.dtype and (name == "end" or t.dim()):
            raise RuntimeError(f"lerp: expected dtype {input.dtype} for `{name}` (the dtype of input) but got dtype "
                               f"{t.dtype}; convert it with .to(input.dtype)")
    _require_float("lerp_kernel_tensor" if tensor_weight else "lerp_kernel_scalar", input, end,
                   *([weight] if tensor_weight else []))
    dt = input.dtype
    if tensor_weight and weight.dtype is not dt:
        # A 0-d weight promotes as result_type does (a 0-d or bool input with a float32 weight: float32, a float32
        # input with a complex one: complex64), the inputs computed in that dtype; a half input with a complex
        # weight would need ComplexHalf, which lerp's kernel does not have.
        dt = _dtype.result_type(input, end, weight)
        if input.dtype is _dtype.float16 and dt.is_complex:
            raise NotImplementedError('"lerp_kernel_tensor" not implemented for \'ComplexHalf\'')
        input, end = input.to(dt), end.to(dt)
    elif isinstance(weight, complex):
        if not input.is_complex():
            if weight.imag != 0:  # torch converts the Scalar to the input's real dtype first
                raise RuntimeError("value cannot be converted to type float without overflow")
            weight = weight.real
    if not dt.is_complex and not isinstance(weight, complex):  # ATen's real kernels: the rows
        if tensor_weight:
            return _write_out(muladd_ops.lerp(input, end, weight.to(dt)), out, "lerp", inputs=operands)
        return _write_out(muladd_ops.lerp_scalar(input, end, weight), out, "lerp", inputs=operands)
    if dt in (_dtype.float16, _dtype.bfloat16):  # torch computes halves in float32 and rounds once
        input, end = input.float(), end.float() if isinstance(end, Tensor) else end
        weight = weight.float() if tensor_weight else weight
    # input + w * diff where |w| < 0.5, else end - (1 - w) * diff, written as one product so that d/dw = diff
    # reaches the weight unmasked (0 * inf would be nan) and 1 - w rounds in the compute dtype, as torch's.
    if tensor_weight:
        small = abs(weight) < 0.5
        base, coef = where(small, input, end), where(small, weight, weight - 1)
    else:
        small = -0.5 < weight < 0.5 if not isinstance(weight, complex) else _abs(weight) < 0.5
        base, coef = (input, weight) if small else (end, input.new_full((), weight) - 1)
    return _write_out((base + coef * (end - input)).to(dt), out, "lerp", inputs=operands)


def logaddexp(input, other):
    """``log(exp(input) + exp(other))`` without overflow."""
    return log_add_exp(input, other, base2=False)


def log_add_exp(input, other, *, base2):
    """logaddexp (``base2``: logaddexp2) as torch computes it: ``max + log1p(exp(-|input - other|))``, its gradient
    torch's formula (`jitorch.ops.logaddexp_ops`)."""
    _require_float("logaddexp2_cpu" if base2 else "logaddexp_cpu", input, other)
    dt = _dtype.result_type(input, other)
    input, other = input.to(dt), other.to(dt) if isinstance(other, Tensor) else other  # no bool arithmetic below
    return logaddexp_ops.logaddexp(input, other, base2)