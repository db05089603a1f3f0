"""Activation functions of ``nn.functional`` (``relu``, ``gelu``, ``silu``, ``elu``, ``prelu``, ``glu``, ...).

Each is a composite of jitorch ops. Piecewise functions are written with ``where`` so that the gradient at the kinks
is PyTorch's (e.g. ``hardtanh``'s is 0 at its bounds), and branches that are not taken get safe inputs (``expm1`` of
``min(x, 0)``), so a discarded branch never turns a gradient into NaN. ``inplace=True`` writes the result into
``input`` as PyTorch does.

>>> import jitorch
>>> import jitorch.nn.functional as F
>>> F.leaky_relu(jitorch.tensor([-2.0, 3.0]), 0.5)
tensor([-1.,  3.])
>>> F.hardtanh(jitorch.tensor([-2.0, 0.5, 3.0]))
tensor([-1.0000,  0.5000,  1.0000])
"""
from __future__ import annotations


from .. import _dtype
from .. import _pointwise as pw
from .._pointwise import where
from ..amp._cast_mode import autocast_lower
from ..autograd.function import Function
from ..ops import activation_elu, activation_ops, activation_piecewise, softplus_ops
from ._functional_core import run_inplace, type_name

__all__ = [
    "relu", "relu_", "relu6", "leaky_relu", "leaky_relu_", "elu", "elu_", "selu", "selu_", "celu", "celu_", "gelu",
    "silu", "mish", "softplus", "softsign", "sigmoid", "tanh", "hardtanh", "hardtanh_", "hardswish", "hardsigmoid",
    "logsigmoid", "prelu", "rrelu", "rrelu_", "glu", "threshold", "threshold_", "tanhshrink", "softshrink",
    "hardshrink",
]

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _floating_kernel(kernel, x):
    """PyTorch's refusal of an activation whose kernel ``kernel`` (``hardswish_cpu``...) exists for floating types
    only: integer, bool and complex inputs are not promoted."""
    if not x.is_floating_point():
        name = kernel if kernel.endswith("_check") else f"{kernel}_{'cuda' if x.is_cuda else 'cpu'}"
        raise NotImplementedError(f"\"{name}\" not implemented for '{type_name(x.dtype)}'")


def _maybe_inplace(fn, input, inplace, *args):
    return run_inplace(input, fn, *args) if inplace else fn(input, *args)


def relu(input, inplace=False):
    """``max(x, 0)``."""
    return input.relu_() if inplace else pw.relu(input)


def relu_(input):
    return input.relu_()


def _hardtanh(x, min_val, max_val):
    # Gradient 0 at and beyond the bounds, as PyTorch's hardtanh_backward; NaN propagates.
    if x.is_floating_point():  # the row: its gradient stays connected to x under create_graph (activation_piecewise)
        return activation_piecewise.hardtanh(x, min_val, max_val)
    if x.dtype is _dtype.bool:
        raise RuntimeError("Bool inputs not supported for hardtanh")
    # ATen's legacy rule: integer inputs keep their dtype, the bounds truncated to integers (no promotion).
    lo, hi = int(min_val), int(max_val)
    if x.dtype is _dtype.uint8 and (lo < 0 or hi < 0):
        raise RuntimeError("cannot do hardtanh on an unsigned type with negative limits")
    return x.clamp(lo, hi)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """``clamp(x, min_val, max_val)`` whose gradient is 0 at the bounds."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _maybe_inplace(_hardtanh, input, inplace, min_val, max_val)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    return hardtanh(input, min_val, max_val, inplace=True)


def relu6(input, inplace=False):
    """``min(max(x, 0), 6)``."""
    return hardtanh(input, 0.0, 6.0, inplace)


def _leaky_relu(x, negative_slope):
    _floating_kernel("leaky_relu", x)
    return activation_piecewise.leaky_relu(x, negative_slope)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    """``x`` for ``x > 0``, else ``negative_slope * x``."""
    return _maybe_inplace(_leaky_relu, input, inplace, negative_slope)


def leaky_relu_(input, negative_slope=0.01):
    return leaky_relu(input, negative_slope, inplace=True)


def _elu(x, alpha, scale=1.0, input_scale=1.0):
    _floating_kernel("elu", x)
    return activation_elu.elu(x, alpha, scale, input_scale)  # a row, its gradient ATen's elu_backward


def elu(input, alpha=1.0, inplace=False):
    """``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``."""
    return _maybe_inplace(_elu, input, inplace, alpha)


def elu_(input, alpha=1.0):
    return elu(input, alpha, inplace=True)


def selu(input, inplace=False):
    """``scale * elu(x, alpha)`` with the self-normalizing constants."""
    return _maybe_inplace(_elu, input, inplace, _SELU_ALPHA, _SELU_SCALE)


def selu_(input):
    return selu(input, inplace=True)


def celu(input, alpha=1.0, inplace=False):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return _maybe_inplace(_elu, input, inplace, alpha, 1.0, 1.0 / alpha)


def celu_(input, alpha=1.0):
    return celu(input, alpha, inplace=True)




def gelu(input, approximate="none"):
    """``x * Phi(x)`` (``approximate='none'``) or its tanh approximation (``approximate='tanh'``)."""
    if approximate == "none":
        return activation_ops.gelu(input)
    if approximate == "tanh":
        return activation_ops.gelu_tanh(input)
    raise RuntimeError("approximate argument must be either none or tanh.")


def silu(input, inplace=False):
    """``x * sigmoid(x)`` (swish)."""
    return _maybe_inplace(activation_ops.silu, input, inplace)


def _in_float(fn, x, *args):
    """``fn`` of a half-precision ``x`` computed in float32 and rounded once, as ATen's kernels compute them (the
    composite's own half-precision steps are an ulp off for about a fifth of bfloat16 inputs); ``None`` otherwise."""
    if x.dtype is _dtype.bfloat16 or x.dtype is _dtype.float16:
        return fn(x.float(), *args).to(x.dtype)
    return None


def _mish_float16(x):
    """Mish of a float16 ``x`` as ops in float32 (the softplus row's, then tanh and the product), rounded once. The
    mish row's float16 gradient is an ulp off ATen's on a few inputs the half-precision sweep checks bit for bit;
    this one matches there (over 100k normal inputs both are off on about 0.04%, this one slightly fewer)."""
    wide = x.float()
    return (wide * pw.tanh(softplus_ops.softplus(wide, 1.0, 20.0))).to(x.dtype)


def _mish(x):
    _floating_kernel("mish", x)
    return _mish_float16(x) if x.dtype is _dtype.float16 else softplus_ops.mish(x)


def mish(input, inplace=False):
    """``x * tanh(softplus(x))``."""
    return _maybe_inplace(_mish, input, inplace)


def softplus(input, beta=1.0, threshold=20.0):
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold``."""
    _floating_kernel("softplus", input)
    return softplus_ops.softplus(input, beta, threshold)


def softsign(input):
    """``x / (1 + |x|)``."""
    return input / (input.abs() + 1)


def sigmoid(input):
    """``1 / (1 + exp(-x))``."""
    return pw.sigmoid(input)


def tanh(input):
    """Hyperbolic tangent."""
    return pw.tanh(input)


def _hardswish(x):
    _floating_kernel("hardswish", x)
    return activation_piecewise.hardswish(x)  # a row: one native pass on float32, its gradient a row too


def hardswish(input, inplace=False):
    """``x * relu6(x + 3) / 6``."""
    return _maybe_inplace(_hardswish, input, inplace)


def _hardsigmoid(x):
    _floating_kernel("hardsigmoid", x)
    return activation_piecewise.hardsigmoid(x)  # a row: one native pass on float32, NaN stays NaN (zero gradient)


def hardsigmoid(input, inplace=False):
    """``relu6(x + 3) / 6``."""
    return _maybe_inplace(_hardsigmoid, input, inplace)


def logsigmoid(input):
    """``log(sigmoid(x))`` as ``min(x, 0) - log1p(exp(-|x|))``: no overflow for any ``x``."""
    return log_sigmoid_like(input).contiguous()  # row-major, as ATen's result


def log_sigmoid_like(input):
    """`logsigmoid` in ``input``'s layout (for composites whose ATen formula keeps their operands' layout)."""
    _floating_kernel("log_sigmoid", input)
    widened = _in_float(log_sigmoid_like, input)  # half types: -0.0 for large x (the tiny float32 term rounds away)
    if widened is not None:
        return widened
    # minimum splits a tie's gradient, which gives PyTorch's 0.5 at x == 0.
    return pw.minimum(input, 0.0) - pw.log1p(pw.exp(-input.abs()))


@autocast_lower
def prelu(input, weight):
    """``x`` for ``x > 0``, else ``weight * x``; ``weight`` has one element or one per channel (dim 1)."""
    if weight.dim() > 1:
        raise RuntimeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: ndim = {weight.dim()}")
    n = weight.numel()
    if n != 1:
        channels = input.shape[1] if input.dim() >= 2 else 1
        if n != channels:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = {n} "
                               f"and channel size = {channels}.")
        weight = weight.reshape((1, n) + (1,) * (input.dim() - 2))
    elif input.dim() == 0:
        weight = weight.reshape(())
    return where(input > 0, input, weight * input)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Randomized leaky ReLU: negative slopes drawn from ``U(lower, upper)`` in training, their mean otherwise."""
    if lower > upper:
        raise RuntimeError(f"rrelu: Lower bound should be less than or equal to the upper bound (got lower={lower}, "
                           f"upper={upper})")
    if not training:
        out = leaky_relu(input, (lower + upper) / 2, inplace)
        return out if inplace else out.contiguous()  # ATen's rrelu writes a new row-major tensor

    def sample(x):
        # ATen's loop: one float64 uniform on [lower, upper) (the bounds in the op's math type) per non-positive
        # element, in row-major order; others keep slope 1, NaN included. The product with the slopes is
        # torch's output and its gradient (``noise``), 0 included.
        math_dtype = _dtype.float64 if x.dtype == _dtype.float64 else _dtype.float32
        bounds = [float(x.detach().new_tensor(b, dtype=math_dtype)) for b in (lower, upper)]
        # The draws as many as the selected elements, without reading their count into Python: under
        # ``jitorch.compile`` a count read is a value branched on, a new branch (a recompile) nearly every step.
        drawn = x.detach() <= 0
        slopes = x.detach().new_ones(x.shape, dtype=math_dtype)
        draws = x.detach()[drawn].to(_dtype.float64).uniform_(*bounds)
        slopes[drawn] = draws.to(math_dtype)
        return _NoiseProduct.apply(x, slopes)
    return _maybe_inplace(sample, input, inplace)


class _NoiseProduct(Function):
    """rrelu's training output ``x * noise`` in the op's math type, with ATen's gradient ``grad * noise``, the
    noise rounded to the input's dtype (what ATen stores for half types)."""

    @staticmethod
    def forward(ctx, x, slopes):
        ctx.save_for_backward(slopes.to(x.dtype))
        return (x.to(slopes.dtype) * slopes).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        (noise,) = ctx.saved_tensors
        return grad * noise, None


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    return rrelu(input, lower, upper, training, inplace=True)


def glu(input, dim=-1):
    """Gated linear unit: ``a * sigmoid(b)`` with ``a, b`` the two halves of ``input`` along ``dim``."""
    if input.dim() == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    d = dim + input.dim() if dim < 0 else dim
    if input.shape[d] % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {input.shape[d]}")
    _floating_kernel("glu", input)
    a, b = input.chunk(2, d)
    return a * pw.sigmoid(b)


def _threshold(x, threshold, value):
    if x.is_floating_point():  # the row: its gradient stays connected to x under create_graph (activation_piecewise)
        return activation_piecewise.threshold(x, threshold, value)
    return where(x <= threshold, value, x)


def threshold(input, threshold, value, inplace=False):
    """``value`` where ``x <= threshold``, else ``x``."""
    return _maybe_inplace(_threshold, input, inplace, threshold, value)


def threshold_(input, threshold, value):
    return run_inplace(input, _threshold, threshold, value)


def tanhshrink(input):
    """``x - tanh(x)``."""
    return input - pw.tanh(input)


def softshrink(input, lambd=0.5):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, 0 between."""
    if lambd < 0:
        raise RuntimeError(f"softshrink: lambda must be in range [0, inf) for input dtype "
                           f"{type_name(input.dtype)}, but found {lambd}")
    _floating_kernel("softshrink_check", input)
    return activation_piecewise.softshrink(input, lambd)


def hardshrink(input, lambd=0.5):
    """``x`` where ``|x| > lambd``, else 0."""
    _floating_kernel("hardshrink", input)
    return activation_piecewise.hardshrink(input, lambd)
