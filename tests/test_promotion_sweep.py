"""Regression cases kept from a randomized sweep of binary ops over dtype pairs (dimensioned tensors, 0-d tensors and
Python scalars on either side) against PyTorch 2.13: result dtype and values, or the exception's type.
"""

import numpy as np
import pytest
import torch

import jitorch
from helpers import outcome


def _same(fn, exact_message=False):
    t, j = outcome(lambda: fn(torch)), outcome(lambda: fn(jitorch))
    assert t[0] == j[0], (t, j)
    if isinstance(t[1], str):
        assert not exact_message or t[1] == j[1], (t, j)
    else:
        a, b = t[1], j[1]
        if t[0] == "bfloat16":  # torch rounds bfloat16 results once from float32 opmath; jitorch may round twice
            a, b = a.float(), b.float()
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-2 if t[0] == "bfloat16" else 1e-3)


def _t(L, values, dtype, zero_dim=False):
    t = L.tensor(values[0] if zero_dim else values).to(getattr(L, dtype))
    return t


# -- integer division by zero raises, also with a Python scalar dividend ---------------------------------------------
@pytest.mark.parametrize("op", [lambda L, a, b: a // b, lambda L, a, b: a % b,
                                lambda L, a, b: L.div(a, b, rounding_mode="floor"),
                                lambda L, a, b: L.div(a, b, rounding_mode="trunc"),
                                lambda L, a, b: L.remainder(a, b)])
@pytest.mark.parametrize("dividend", [True, 3, "tensor"])
@pytest.mark.parametrize("dtype", ["uint8", "int16", "int32", "int64"])
def test_integer_division_by_zero_raises(op, dividend, dtype):
    def run(L):
        b = L.tensor([2, 0, 1]).to(getattr(L, dtype))
        return op(L, L.tensor([5, 6, 7]).to(b.dtype) if dividend == "tensor" else dividend, b)
    _same(run, exact_message=False)


# -- ops with no complex kernel in torch raise NotImplementedError ---------------------------------------------------
@pytest.mark.parametrize("op", [lambda L, a, b: a // b, lambda L, a, b: a % b, lambda L, a, b: L.fmod(a, b),
                                lambda L, a, b: L.div(a, b, rounding_mode="trunc"), lambda L, a, b: L.atan2(a, b)])
@pytest.mark.parametrize("dtypes", [("bool", "complex64"), ("float32", "complex64"), ("float64", "complex128"),
                                    ("int32", "complex128"), ("complex64", "complex64")])
@pytest.mark.parametrize("zero_dim", [False, True])
def test_rounding_division_of_complex_is_not_implemented(op, dtypes, zero_dim):
    def run(L):
        return op(L, _t(L, [1.0, 2.0, 3.0], dtypes[0]), _t(L, [1 + 1j, 2.0, -1j], dtypes[1], zero_dim))
    _same(run, exact_message=True)


def test_float_plus_complex_still_promotes():
    _same(lambda L: _t(L, [1.0, 2.0], "float32") + _t(L, [1j, 2.0], "complex128"))
    _same(lambda L: _t(L, [1.0, 2.0], "float64") * _t(L, [1j, 2.0], "complex64"))


# -- addcmul multiplies in the common dtype of all three tensors -----------------------------------------------------
@pytest.mark.parametrize("dtypes", [("bool", "bool", "uint8"), ("bool", "bool", "int16"), ("int16", "uint8", "uint8"),
                                    ("float16", "uint8", "uint8"), ("bfloat16", "uint8", "uint8"),
                                    ("uint8", "uint8", "int16")])
@pytest.mark.parametrize("value", [1, 2])
def test_addcmul_computes_in_the_common_dtype(dtypes, value):
    vals = ([1, 0, 1], [200, 100, 7], [250, 3, 99])
    _same(lambda L: L.addcmul(*(_t(L, v, d) for v, d in zip(vals, dtypes)), value=value))


# -- an integer tensor to negative integer tensor powers is torch's integer pow, not an error -------------------------
@pytest.mark.parametrize("base", ["int8", "int16", "int64", "uint8", "python"])
@pytest.mark.parametrize("zero_dim", [False, True])
def test_integer_pow_with_negative_tensor_exponents(base, zero_dim):
    def run(L):
        e = _t(L, [-1, -2, -3, 0, 2, 1], "int8", zero_dim)
        return (2 if base == "python" else _t(L, [-2, -1, 0, 1, 2, 3], base)) ** e
    _same(run)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32"])
@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge", "eq", "ne", "add", "mul", "bitwise_and", "maximum_scalar"])
@pytest.mark.parametrize("scalar", [-2, -129, 156, 300, 2 ** 40, -(2 ** 33) + 7])
def test_integer_scalars_wrap_into_the_tensors_dtype_as_torch(dtype, op, scalar):
    # torch casts an out-of-range integer scalar to the integer dtype it computes in (uint8 < -2 is uint8 < 254).
    values = np.array([0, 5, 100, -100, 127, -128], dtype=np.int64)
    outs = []
    for m in (torch, jitorch):
        x = m.tensor(values).to(getattr(m, dtype))
        if op == "maximum_scalar":
            out = m.maximum(x, m.tensor(scalar))
        else:
            out = getattr(m, op)(x, scalar)
        outs.append(out)
    assert outs[1].tolist() == outs[0].tolist()
    assert str(outs[1].dtype).split(".")[-1] == str(outs[0].dtype).split(".")[-1]


@pytest.mark.parametrize("call", [
    lambda m, z: z < 1, lambda m, z: z >= z, lambda m, z: m.maximum(z, z), lambda m, z: m.minimum(z, z),
    lambda m, z: z.clamp(0, 1), lambda m, z: z.clamp_min(0), lambda m, z: z.amax(), lambda m, z: z.amin(0),
    lambda m, z: z.max(), lambda m, z: z.max(0), lambda m, z: z.argmax(), lambda m, z: z.argmin(0),
])
def test_ordering_complex_tensors_is_refused_as_torch(call):
    # NumPy orders complex numbers lexicographically; PyTorch refuses: an answer here would be silently wrong.
    errors = []
    for m in (torch, jitorch):
        with pytest.raises((RuntimeError, NotImplementedError)) as info:
            call(m, m.tensor([[1 + 1j, 2 - 1j]]))
        errors.append(info.value)
    assert type(errors[1]) is type(errors[0])
