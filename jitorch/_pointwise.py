"""Public elementwise functions, their Tensor methods, operators and in-place forms.

Primitives come from ``ops/pointwise.py``; everything else here is a composite of them. Split for size, and
re-exported here: ``_pointwise_arithmetic.py`` (``add``/``sub`` with ``alpha``, ``div``'s rounding modes, powers),
``_pointwise_stable.py`` (extreme-value composites), ``_pointwise_composite.py`` (value tests and formulas);
``_pointwise_methods.py`` binds the Tensor methods and operators.

>>> import jitorch
>>> a = jitorch.tensor([1, 2, 3])
>>> (1 - a, a / 2, a // 2, a ** 2)
(tensor([ 0, -1, -2]), tensor([0.5000, 1.0000, 1.5000]), tensor([0, 1, 1]), tensor([1, 4, 9]))
"""
from __future__ import annotations

from . import _dtype
from ._dispatch import MODES, TENSOR_TYPES, TORCH_TYPE_NAMES, apply, fast_binary, fast_unary
from ._dispatch_inplace import refuse_operand_overlap
from ._grad_state import GradState
from .autograd.grad_mode import no_grad
from .autograd.graph import named
from ._pointwise_checks import check_bounds, check_float32_numbers
from ._tensor import Tensor
from ._pointwise_select import clamp_float32, where_float32
from .ops import pointwise as P

__all__ = [
    "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "floor_divide", "remainder", "fmod",
    "pow", "float_power", "maximum", "minimum", "fmax", "fmin", "atan2", "arctan2", "hypot", "lerp", "eq", "ne", "lt",
    "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal", "not_equal", "equal", "isclose", "allclose",
    "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_not", "bitwise_left_shift", "bitwise_right_shift", "isnan", "isinf", "isfinite", "isposinf", "isneginf",
    "isreal", "signbit", "neg", "negative", "abs", "absolute", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p",
    "sqrt", "rsqrt", "square", "sin", "cos", "tan", "asin", "acos", "atan", "arcsin", "arccos", "arctan", "sinh",
    "cosh", "tanh", "asinh", "acosh", "atanh", "arcsinh", "arccosh", "arctanh", "sigmoid", "erf", "erfc", "erfinv",
    "reciprocal", "relu", "floor", "ceil", "trunc", "fix", "round", "sign", "sgn", "frac", "nan_to_num", "where",
    "clamp", "clip", "clamp_min", "clamp_max", "addcmul", "addcdiv", "xlogy", "logaddexp", "copysign", "deg2rad",
    "rad2deg", "logit", "sinc",
]


# torch's error for ops whose out must have the result's dtype (unary_op's, clamp with Scalar bounds), not wider
SAME_DTYPE = "Found dtype {out} but expected {result}"


def _write_out(result, out, op=None, same_dtype=None, inputs=()):
    """Write into ``out`` (resized when its shape differs) and return it; ``same_dtype``: the message (a template
    over the torch names of ``out`` and ``result``) refusing an out of another dtype; ``inputs``: the operands an
    elementwise kernel reads, which may not overlap ``out`` partially."""
    if out is None:
        return result
    check_out_tensor(out, op)
    # Writing into out under no_grad would silently cut the graph (no gradient reaches the inputs): torch refuses.
    if GradState.enabled and (result.requires_grad or out.requires_grad):
        raise RuntimeError(f"{op + '(): ' if op else ''}functions with out=... arguments don't support automatic "
                           "differentiation, but one of the arguments requires grad.")
    if inputs:  # (torch's TensorIterator checks before it resizes out or checks its dtype)
        refuse_operand_overlap(out, inputs)
    check_out_dtype(result, out, op)
    if same_dtype is not None and out.dtype is not result.dtype:
        raise RuntimeError(same_dtype.format(out=TORCH_TYPE_NAMES[out.dtype.name],
                                             result=TORCH_TYPE_NAMES[result.dtype.name]))
    with no_grad():
        if out.shape == result.shape:
            out.copy_(result)
        else:
            out._data = result._data.astype(out._data.dtype)
            out._bump_version()
    return out


def check_out_tensor(out, op):
    """torch's refusal of an ``out`` that is not a tensor (`_out_variants.check_out_tensor`)."""
    from ._out_variants import check_out_tensor as check

    check(out, op or "function")


def check_out_dtype(result, out, op=None):
    """torch's ``out=`` rule: the result may widen into ``out`` but not drop a category (float -> int, int -> bool)."""
    check_out_tensor(out, op)
    if result.dtype.category > out.dtype.category:
        from ._dispatch import TORCH_TYPE_NAMES

        raise RuntimeError(f"{op + ': ' if op else ''}result type {TORCH_TYPE_NAMES[result.dtype.name]} can't be cast "
                           f"to the desired output type {TORCH_TYPE_NAMES[out.dtype.name]} (the dtype of out=); pass "
                           f"an out tensor of dtype {result.dtype} or wider")


_NUMBERS = (bool, int, float, complex)


def _numbers_as_tensor(input, other):
    """``input`` as a 0-d tensor when both operands are Python numbers: torch's argument parser lets add, sub, mul,
    div and floor_divide (only those) take two numbers (``torch.add(3, 1)`` is ``tensor(4)``)."""
    if isinstance(input, _NUMBERS) and isinstance(other, _NUMBERS):
        from ._creation import tensor

        return tensor(input)
    return input


def _binary(op, numbers_as_tensors=False):
    fast = fast_binary(op)

    def fn(input, other, *, out=None):
        if numbers_as_tensors and input.__class__ is not Tensor:
            input = _numbers_as_tensor(input, other)
        if out is None:
            return fast(input, other)
        return _write_out(fast(input, other), out, op.name, inputs=(input, other))
    fn.__name__ = op.name
    fn.__doc__ = f"Elementwise ``{op.name}`` with broadcasting and PyTorch's type promotion."
    return fn


def _unary(op, same_dtype=None, complex_to_real=False):  # complex_to_real: abs of complex may widen into out
    fast = fast_unary(op)

    def fn(input, *, out=None):
        if out is None:
            return fast(input)
        exact = None if complex_to_real and input.is_complex() else same_dtype
        return _write_out(fast(input), out, op.name, exact, (input,))
    fn.__name__ = op.name
    fn.__doc__ = f"Elementwise ``{op.name}``."
    return fn


mul = multiply = _binary(P.MUL, numbers_as_tensors=True)
true_divide = _binary(P.DIV, numbers_as_tensors=True)
floor_divide = _binary(P.FLOOR_DIVIDE, numbers_as_tensors=True)
remainder = _binary(P.REMAINDER)
fmod = _binary(P.FMOD)
maximum = _binary(P.MAXIMUM)
minimum = _binary(P.MINIMUM)
atan2 = arctan2 = _binary(P.ATAN2)


def fmax(input, other):
    """The larger, ignoring a NaN: one select, so at a tie the whole gradient goes to ``input``, as torch's."""
    _refuse_complex("fmax", input, other)
    return where((input >= other) | other.isnan(), input, other)


def fmin(input, other):
    """The smaller, ignoring a NaN (the gradient at a tie goes to ``input``)."""
    _refuse_complex("fmin", input, other)
    return where((input <= other) | other.isnan(), input, other)


def _require_float(kernel_name, *operands, real=False):
    """PyTorch's NotImplementedError for float-only kernels whose promoted dtype is integral or bool (``real``: or
    complex)."""
    dt = _dtype.result_type(*operands)
    if dt.category < _dtype.FLOAT or (real and dt.category == _dtype.COMPLEX):
        raise NotImplementedError(f'"{kernel_name}" not implemented for \'{TORCH_TYPE_NAMES[dt.name]}\'')


def _refuse_complex(name, *operands):
    """torch's RuntimeError for the composites it has no complex kernel for (fmax, fmin)."""
    if _dtype.result_type(*operands).category == _dtype.COMPLEX:
        raise RuntimeError(f"{name} not implemented for complex tensors.")


eq, ne, lt, le, gt, ge = (_binary(op) for op in (P.EQ, P.NE, P.LT, P.LE, P.GT, P.GE))
greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne
logical_and, logical_or, logical_xor = _binary(P.LOGICAL_AND), _binary(P.LOGICAL_OR), _binary(P.LOGICAL_XOR)
logical_not = _unary(P.LOGICAL_NOT)
bitwise_and, bitwise_or, bitwise_xor = _binary(P.BITWISE_AND), _binary(P.BITWISE_OR), _binary(P.BITWISE_XOR)
bitwise_left_shift, bitwise_right_shift = _binary(P.BITWISE_LEFT_SHIFT), _binary(P.BITWISE_RIGHT_SHIFT)
bitwise_not = _unary(P.BITWISE_NOT, SAME_DTYPE)
isnan, isinf, isfinite = _unary(P.ISNAN), _unary(P.ISINF), _unary(P.ISFINITE)
signbit = _unary(P.SIGNBIT, "signbit does not support non-boolean outputs.")


neg = negative = _unary(P.NEG, SAME_DTYPE)
abs = absolute = _unary(P.ABS, SAME_DTYPE, complex_to_real=True)
exp, exp2, expm1 = _unary(P.EXP), _unary(P.EXP2), _unary(P.EXPM1)
log, log2, log10, log1p = _unary(P.LOG), _unary(P.LOG2), _unary(P.LOG10), _unary(P.LOG1P)
sqrt, rsqrt = _unary(P.SQRT), _unary(P.RSQRT)
sin, cos, tan = _unary(P.SIN), _unary(P.COS), _unary(P.TAN)
asin = arcsin = _unary(P.ASIN)
acos = arccos = _unary(P.ACOS)
atan = arctan = _unary(P.ATAN)
sinh, cosh, tanh = _unary(P.SINH), _unary(P.COSH), _unary(P.TANH)
asinh = arcsinh = _unary(P.ASINH)
acosh = arccosh = _unary(P.ACOSH)
atanh = arctanh = _unary(P.ATANH)
sigmoid, relu = _unary(P.SIGMOID), _unary(P.RELU)
erf, erfc, erfinv = _unary(P.ERF), _unary(P.ERFC), _unary(P.ERFINV)
reciprocal = _unary(P.RECIPROCAL)
floor, ceil, sign, frac = (_unary(op, SAME_DTYPE) for op in (P.FLOOR, P.CEIL, P.SIGN, P.FRAC))
trunc = fix = _unary(P.TRUNC, SAME_DTYPE)


def sgn(input, *, out=None):
    """``sign`` of a real tensor; ``z / |z|`` (0 at 0) of a complex one, as torch (its gradient follows)."""
    if not input.is_complex():
        return sign(input, out=out)
    size = input.abs()
    nonzero = size != 0
    # At 0 the value and (as torch) the gradient are 0: the division sees 1 there, and ``where`` drops its gradient.
    return _write_out((input / size.where(nonzero, 1.0)).where(nonzero, 0.0), out, "sgn", SAME_DTYPE,
                      (input,))


def round(input, *, decimals=0, out=None):
    return _write_out(apply(P.ROUND, input, decimals=decimals), out, "round", SAME_DTYPE, (input,))


def nan_to_num(input, nan=0.0, posinf=None, neginf=None, *, out=None):
    return _write_out(apply(P.NAN_TO_NUM, input, nan=nan, posinf=posinf, neginf=neginf), out, "nan_to_num",
                      "nan_to_num: dtype of out: {out} should be same as input: {result}", (input,))


def where(condition, input=None, other=None, *, out=None):
    """``where(cond, a, b)`` picks elementwise; ``where(cond)`` is ``nonzero(cond, as_tuple=True)``."""
    if out is None and not MODES and type(condition) in TENSOR_TYPES:
        result = where_float32(condition, input, other)
        if result is not None:
            return result
    if input is None and other is None:
        return condition.nonzero(as_tuple=True)
    if isinstance(condition, Tensor) and condition.dtype.name != "bool":
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor with dtype "
                           f"{TORCH_TYPE_NAMES[condition.dtype.name]}")
    for t, value in ((input, other), (other, input)):  # a Python value for an integer tensor's dtype: range-checked
        if isinstance(t, Tensor) and t.dtype.category == _dtype.INT and isinstance(value, (int, float)):
            check_bounds(t, value)
        check_float32_numbers(t, value)
        _dtype.check_parsed_int(value)
    return _write_out(apply(P.WHERE, condition, input, other), out, "where",
                      "Expected out type to be {result} but got {out}", (condition, input, other))


def clamp(input, min=None, max=None, *, out=None):
    """Clamp into ``[min, max]``; bounds may be scalars or tensors."""
    if out is None and not MODES and type(input) in TENSOR_TYPES:
        result = clamp_float32(input, min, max)
        if result is not None:
            return result
    check_bounds(input, min, max)
    check_float32_numbers(input, min, max)
    result = apply(P.CLAMP, input, min, max)
    if not (isinstance(min, Tensor) or isinstance(max, Tensor)):
        named(result, "ClampBackward1")  # ATen's Scalar overload (tensor bounds: ClampBackward0)
        return _write_out(result, out, "clamp", SAME_DTYPE, (input,))  # its out takes no other dtype
    return _write_out(result, out, "clamp", inputs=(input, min, max))


clip = clamp


def clamp_min(input, min):
    # (named leaves a result without history, or a compiler's deferred one, as it is)
    check_bounds(input, min)
    check_float32_numbers(input, min)
    return named(apply(P.CLAMP, input, min, None), "ClampMinBackward1" if isinstance(min, Tensor) else
                 "ClampMinBackward0")


def clamp_max(input, max):
    check_bounds(input, max)
    check_float32_numbers(input, max)
    return named(apply(P.CLAMP, input, None, max), "ClampMaxBackward1" if isinstance(max, Tensor) else
                 "ClampMaxBackward0")


from ._pointwise_arithmetic import (  # noqa: E402,F401 - split for size; re-exported
    _reject_bool_sub, _rsub_operator, _scaled_by_alpha, _sub_operator, add, div, divide, float_power, pow, square, sub,
    subtract,
)
from ._pointwise_stable import hypot, lerp, log_add_exp, logaddexp  # noqa: E402,F401 - split for size; re-exported
from ._pointwise_composite import (addcdiv, addcmul, allclose, copysign, deg2rad, equal,  # noqa: E402,F401
                                  isclose, isneginf, isposinf, isreal, logit, rad2deg, sinc,
                                  xlogy)  # split for size; re-exported
from ._pointwise_methods import _composite_inplace  # noqa: E402,F401 - binds the Tensor methods and operators
