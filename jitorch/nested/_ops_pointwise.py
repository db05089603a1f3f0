"""Elementwise ops on nested tensors: the dense op on the values (jagged) or on each component (strided).

Operands line up as torch's rules allow: two nested tensors of one structure (the jagged layout: the same offsets,
so the same ``j`` symbol), a number or 0-d tensor, or, for the jagged layout, a dense tensor broadcasting over the
dims after the batch dim (size 1 at the ragged dim), or one with a leading batch dim (``(B, 1, E)``: a row per
sequence, spread over the sequence's rows).

>>> import jitorch, jitorch.nested
>>> nt = jitorch.nested.nested_tensor([jitorch.ones(1, 2), jitorch.ones(2, 2)], layout=jitorch.jagged)
>>> (nt * jitorch.tensor([[[1.0, 2.0]], [[3.0, 4.0]]])).values()
tensor([[1., 2.],
        [3., 4.],
        [3., 4.]])
"""
from __future__ import annotations

from .._tensor import Tensor
from ._refusals import nested_refusal
from ._tensor import NestedTensor, jagged_like, make_strided

__all__ = ["elementwise", "inplace", "POINTWISE", "STRIDED_POINTWISE", "INPLACE"]

# Public functions and Tensor methods computed elementwise (extra arguments passed through to the dense op).
POINTWISE = ("abs", "neg", "negative", "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan",
             "asin", "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "relu", "relu6", "gelu", "silu", "mish",
             "elu", "selu", "celu", "leaky_relu", "hardtanh", "hardswish", "hardsigmoid", "softplus", "logsigmoid",
             "sqrt", "rsqrt", "square", "reciprocal", "sign", "sgn", "floor", "ceil", "round", "trunc", "frac",
             "erf", "erfc", "isnan", "isinf", "isfinite", "logical_not", "bitwise_not", "nan_to_num", "clamp",
             "clip", "clamp_min", "clamp_max", "dropout", "alpha_dropout", "threshold",
             "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "floor_divide", "pow",
             "maximum", "minimum", "fmax", "fmin", "remainder", "fmod", "atan2", "eq", "ne", "lt", "le", "gt", "ge",
             "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "where",
             "masked_fill", "lerp", "addcmul", "addcdiv", "hypot", "copysign", "xlogy", "logaddexp", "rsub",
             "float_power", "zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like")
# In-place elementwise methods of the jagged layout (the values written in place).
INPLACE = ("add_", "sub_", "mul_", "div_", "pow_", "neg_", "exp_", "clamp_", "clamp_min_", "clamp_max_", "relu_",
           "sigmoid_", "tanh_", "zero_", "fill_", "copy_")

# Those torch runs on the strided layout too (the others have no NestedTensorCPU kernel there).
STRIDED_POINTWISE = frozenset({"abs", "neg", "negative", "sin", "cos", "tanh", "relu", "gelu", "silu", "sqrt", "sgn",
                               "isnan", "isinf", "logical_not", "add", "sub", "subtract", "mul", "multiply", "div",
                               "divide", "true_divide", "eq", "gt", "ge", "masked_fill", "zeros_like", "ones_like",
                               "empty_like", "randn_like", "dropout"})


def _shape_text(nt):
    return "(" + ", ".join(str(s) for s in nt.shape) + ")"


def _row_sequences(nt):
    """Which sequence each row of the values' ragged dim belongs to (int64, rows in holes: a neighbour's)."""
    import jitorch

    total = nt._nt_values.shape[nt._nt_ragged_idx - 1]
    rows = jitorch.arange(total, device=nt.device)
    ids = jitorch.searchsorted(nt._nt_offsets[1:].contiguous(), rows, right=True)
    return ids.clamp(max=len(nt) - 1)


def _dense_operand(nt, t, name):
    """The dense operand ``t`` laid out against ``nt``'s values, by torch's rule: leading ones dropped, it spans at
    most the dims after the batch and ragged dims' count (``nt.dim() - 2``), or it has every dim, a batch dim of
    ``nt``'s size and size 1 at the ragged dim (one row per sequence)."""
    nd, r = nt.dim(), nt._nt_ragged_idx
    if t.dim() > nd:
        raise NotImplementedError(f"{name}: NYI: broadcasting NT with T with larger dim (shapes {nt.shape!r} and "
                                  f"{t.shape!r})")
    full = t
    while t.dim() and t.shape[0] == 1:
        t = t.squeeze(0)
    refused = RuntimeError(f"cannot call binary pointwise function {name} with inputs of shapes "
                           f"{nt.shape!r} and {full.shape!r} (a dense operand spans at most the last "
                           f"{nd - 2} dims, or has all {nd} with the batch size first and 1 at the ragged dim)")
    if nd >= t.dim() + 2:
        position = (r - 1) - ((nd - 1) - t.dim())  # the ragged dim's position in t, when t reaches it
        if position >= 0 and t.shape[position] != 1:
            raise refused
        return t
    if t.dim() != nd or t.shape[0] != len(nt) or t.shape[r] != 1:
        raise refused
    return t.squeeze(r).index_select(0, _row_sequences(nt)).movedim(0, r - 1)


def elementwise(name, dense_fn, args, kwargs):
    """``dense_fn`` on the values (components) of the nested operands in ``args``/``kwargs``, the result in the
    first nested operand's structure."""
    nested = [a for a in list(args) + list(kwargs.values()) if isinstance(a, NestedTensor)]
    ref = nested[0]
    if any(n.layout != ref.layout for n in nested):
        raise RuntimeError(f"{name}: nested operands of different layouts ({ref.layout} and "
                           f"{next(n.layout for n in nested if n.layout != ref.layout)})")
    if ref._nt_components is not None:
        if name not in STRIDED_POINTWISE:
            raise nested_refusal(name, "strided")
        return _per_component(name, dense_fn, ref, args, kwargs)

    def lay(a):
        return _laid(ref, a, name)

    out = dense_fn(*[lay(a) for a in args], **{k: lay(v) for k, v in kwargs.items()})
    if isinstance(out, Tensor) and out.dim() == ref._nt_values.dim():
        return jagged_like(ref, out)
    return out


def _laid(ref, a, name):
    """Operand ``a`` of an elementwise op on the jagged ``ref`` as an operand of the op on ``ref``'s values."""
    if isinstance(a, NestedTensor):
        if a._nt_ragged is not ref._nt_ragged:
            raise RuntimeError(f"cannot call binary pointwise function {name} with inputs of shapes "
                               f"{_shape_text(ref)} and {_shape_text(a)}: nested tensors of different offsets")
        return a._nt_values
    if isinstance(a, Tensor):
        return _dense_operand(ref, a, name)
    return a


def inplace(name, nt, args, kwargs):
    """The in-place elementwise method ``name`` (``mul_``, ``clamp_``...) on a jagged tensor's values: ``nt``."""
    if nt._nt_components is not None:
        raise nested_refusal(name, "strided")
    getattr(nt._nt_values, name)(*[_laid(nt, a, name) for a in args],
                                 **{k: _laid(nt, v, name) for k, v in kwargs.items()})
    return nt


def _per_component(name, dense_fn, ref, args, kwargs):
    count = len(ref._nt_components)
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, NestedTensor) and len(a._nt_components) != count:
            raise RuntimeError(f"{name}: nested tensors of {count} and {len(a._nt_components)} components")
        if isinstance(a, Tensor) and not isinstance(a, NestedTensor) and a.dim() > 0:
            raise RuntimeError(f"{name}: Expected both self and other to be nested, but got a nested and a "
                               f"non-nested operand of shape {list(a.shape)} (strided-layout nested tensor)")

    def pick(a, i):
        return a._nt_components[i] if isinstance(a, NestedTensor) else a

    return make_strided([dense_fn(*[pick(a, i) for a in args], **{k: pick(v, i) for k, v in kwargs.items()})
                         for i in range(count)])
