"""Quantization-aware training's fake quantization: ``fake_quantize_per_tensor_affine`` and
``fake_quantize_per_channel_affine`` round onto an integer grid and back in floating point, as torch's kernels do
(``x * (1 / scale)`` rounded half to even in the input's precision, plus the zero point, clamped, minus the zero
point, times the scale). The gradient is torch's straight-through rule: the upstream gradient where the unclamped
integer lies in ``[quant_min, quant_max]``, zero elsewhere; the scale and zero point get none.

>>> import jitorch
>>> x = jitorch.tensor([-1.0, 0.14, 0.25, 2.0], requires_grad=True)
>>> y = jitorch.fake_quantize_per_tensor_affine(x, 0.1, 3, 0, 15)
>>> y
tensor([-0.3000,  0.1000,  0.2000,  1.2000], grad_fn=<FakeQuantizeBackward>)
>>> y.sum().backward()
>>> x.grad
tensor([0., 1., 1., 0.])
"""
from __future__ import annotations

from . import _dtype
from ._dispatch import TORCH_TYPE_NAMES
from ._tensor import Tensor
from .autograd.function import Function

__all__ = ["fake_quantize_per_tensor_affine", "fake_quantize_per_channel_affine"]


def _check_float_input(op, x):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}(): argument 'input' must be Tensor, not {type(x).__name__}")
    if not x.is_floating_point():
        raise NotImplementedError(f"\"{op}\" not implemented for '{TORCH_TYPE_NAMES[x.dtype.name]}': fake "
                                  "quantization takes a floating-point input (convert it with .float())")


def _check_bounds(quant_min, quant_max, zero_point_min, zero_point_max):
    if quant_min > quant_max:
        raise RuntimeError("`quant_min` should be less than or equal to `quant_max`.")
    if zero_point_min < quant_min or zero_point_max > quant_max:
        raise RuntimeError("`zero_point` must be between `quant_min` and `quant_max`.")


class FakeQuantize(Function):
    """``(clamp(q, quant_min, quant_max) - zero_point) * scale`` with ``q`` the grid index of ``x``; the gradient
    passes where ``q`` was not clamped. ``scale`` and ``zero_point`` are tensors broadcastable to ``x``."""

    @staticmethod
    def forward(ctx, x, scale, zero_point, quant_min, quant_max, round_after_shift, in_float32):
        # Half precision computes in float32, as torch's kernels do (and so does float64 per channel with a floating
        # zero point); otherwise the input's precision.
        work = x.float() if in_float32 or x.dtype in (_dtype.float16, _dtype.bfloat16) else x
        scaled = work * (1.0 / scale.float()).to(work.dtype)
        zp = zero_point.to(work.dtype)
        # An integer zero point is added after rounding; a floating one (per channel) before, as in torch.
        q = (scaled + zp).round() if round_after_shift else scaled.round() + zp
        inside = (q >= quant_min) & (q <= quant_max)
        # NaN rounds to no integer: torch's cast gives the most negative one, so it clamps to quant_min.
        q = q.nan_to_num(nan=float(quant_min))
        ctx.save_for_backward(inside)
        out = (q.clamp(quant_min, quant_max) - zp) * scale.to(work.dtype)
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        (inside,) = ctx.saved_tensors
        return grad * inside.to(grad.dtype), None, None, None, None, None, None


def fake_quantize_per_tensor_affine(input, scale, zero_point, quant_min, quant_max):
    """Fake-quantize ``input`` with one ``scale`` (float or 0-d/1-element tensor) and integer ``zero_point``.

    >>> import jitorch
    >>> jitorch.fake_quantize_per_tensor_affine(jitorch.tensor([0.26, -3.0]), 0.5, 0, -4, 3)
    tensor([ 0.5000, -2.0000])
    """
    _check_float_input("fake_quantize_per_tensor_affine", input)
    zp = int(zero_point.reshape(-1)[0]) if isinstance(zero_point, Tensor) else int(zero_point)
    _check_bounds(quant_min, quant_max, zp, zp)
    sc = scale.detach().reshape(()).float() if isinstance(scale, Tensor) else None
    if sc is None:
        sc = input.new_tensor(float(scale), dtype=_dtype.float32)
    return FakeQuantize.apply(input, sc.to(input.device), input.new_tensor(zp, dtype=_dtype.int64), quant_min,
                               quant_max, False, False)


def fake_quantize_per_channel_affine(input, scale, zero_point, axis, quant_min, quant_max):
    """Fake-quantize ``input`` with one ``scale`` and ``zero_point`` per index along ``axis`` (1-D tensors).

    >>> import jitorch
    >>> w = jitorch.tensor([[0.26, -3.0], [0.26, -3.0]])
    >>> jitorch.fake_quantize_per_channel_affine(w, jitorch.tensor([0.5, 1.0]),
    ...                                          jitorch.tensor([0, 1], dtype=jitorch.int32), 0, -4, 3)
    tensor([[ 0.5000, -2.0000],
            [ 0.0000, -3.0000]])
    """
    _check_float_input("fake_quantize_per_channel_affine", input)
    if scale.dtype not in (_dtype.float32, _dtype.bfloat16):
        raise RuntimeError(f"Scale must be Float or BFloat16, found {TORCH_TYPE_NAMES[scale.dtype.name]}")
    if zero_point.dtype not in (_dtype.int32, _dtype.float32, _dtype.float16):
        raise RuntimeError(f"Zero-point must be Int32, Float or Half, found "
                           f"{TORCH_TYPE_NAMES[zero_point.dtype.name]}")
    if scale.dim() != 1 or zero_point.dim() != 1:
        raise RuntimeError("scale and zero-point need to be 1-D tensors")
    if not 0 <= axis < input.dim():
        raise RuntimeError("`axis` must be between 0 and number of dimensions of input")
    if scale.numel() != input.shape[axis] or zero_point.numel() != input.shape[axis]:
        raise RuntimeError("dimensions of scale and zero-point are not consistent with input tensor")
    if zero_point.numel():
        _check_bounds(quant_min, quant_max, float(zero_point.min()), float(zero_point.max()))
    else:
        _check_bounds(quant_min, quant_max, quant_min, quant_max)
    shape = [1] * input.dim()
    shape[axis] = -1
    floating_zp = zero_point.is_floating_point()
    return FakeQuantize.apply(input, scale.detach().reshape(shape), zero_point.detach().reshape(shape), quant_min,
                               quant_max, floating_zp, floating_zp)
