"""Regression cases kept from a probe of dtype semantics against PyTorch 2.13 (eager, CPU): result dtypes and values
of mixed-dtype arithmetic, ``out=`` and in-place dtype rules, casts, and the dtypes torch refuses (complex inputs to
ordering and real-only ops). Each case runs the same code on both libraries and compares the dtype and values, or
the exception's type.
"""

import numpy as np
import pytest
import torch

import jitorch
from helpers import outcome

_RTOL = {"float16": 2e-3, "bfloat16": 1e-2, "float32": 1e-6, "complex64": 1e-6}


def _same(fn, exact_message=False, refusal_first=False):
    """``refusal_first``: where torch reports an out= dtype error (RuntimeError) and jitorch the kernel's dtype
    refusal first (NotImplementedError, a RuntimeError), both errors are accepted."""
    t, j = outcome(lambda: fn(torch)), outcome(lambda: fn(jitorch))
    if refusal_first and (t[0], j[0]) == ("RuntimeError", "NotImplementedError"):
        return
    assert t[0] == j[0], (t, j)
    if isinstance(t[1], str):
        assert not exact_message or t[1] == j[1].replace("jitorch.", "torch."), (t, j)
        return
    a, b = (x.to(torch.float64 if not x.is_complex() else x.dtype) if x.dtype in (torch.float16, torch.bfloat16)
            else x for x in (t[1], j[1]))
    b = b.float() if j[0] in ("float16", "bfloat16") else b
    np.testing.assert_allclose(np.asarray(b.numpy(), dtype=a.numpy().dtype), a.numpy(), rtol=_RTOL.get(t[0], 1e-12),
                               atol=0, equal_nan=True)


def _t(L, values, dtype):
    return L.tensor(values).to(getattr(L, dtype))


# -- add/sub with alpha: alpha * other in the result dtype --------------------------------------------------------
_INTS = {"uint8": [1, 200, 255], "int8": [-128, 127, 100], "int16": [300, -32768, 7], "int64": [2**40, -7, 3]}


@pytest.mark.parametrize("op", ["add", "sub", "add_", "sub_"])
@pytest.mark.parametrize("pair", [("uint8", "int8"), ("int8", "uint8"), ("int16", "int8"), ("int64", "uint8"),
                                  ("int16", "uint8"), ("bool", "bool"), ("float32", "bfloat16")])
def test_alpha_scales_in_the_result_dtype(op, pair):
    def run(L):
        a = _t(L, _INTS.get(pair[0], [1, 0, 1] if pair[0] == "bool" else [1.5, -2.0, 3e38]), pair[0])
        b = _t(L, _INTS.get(pair[1], [1, 1, 0] if pair[1] == "bool" else [1.5, 0.1, 3.0]), pair[1])
        return getattr(a if op.endswith("_") else L, op.rstrip("_") + ("_" if op.endswith("_") else ""))(
            *(() if op.endswith("_") else (a,)), b, alpha=2)
    _same(run)


@pytest.mark.parametrize("op", ["add", "sub"])
@pytest.mark.parametrize("scalar", [True, 3, 2.5])
def test_alpha_with_a_python_scalar_keeps_the_bool_or_int_dtype(op, scalar):
    _same(lambda L: getattr(L, op)(L.tensor([True, False]), scalar, alpha=2))
    _same(lambda L: getattr(L, op)(L.tensor([1, 2], dtype=L.int8), scalar, alpha=3))


# -- lerp: a 0-d weight joins the promotion; dtype checks before the kernel's ------------------------------------------
@pytest.mark.parametrize("case", [("bool", "bool", "float32", True), ("float16", "float16", "float32", True),
                                  ("float16", "float16", "float64", False), ("int64", "int64", "float32", True),
                                  ("float32", "float32", "complex64", False), ("bool", "uint8", None, False),
                                  ("int32", "int64", None, False), ("float32", "float64", None, False)])
def test_lerp_weight_promotion_and_errors(case):
    a, b, w, zero_d = case

    def run(L):
        x, y = _t(L, [1, 0] if not zero_d else 1, a), _t(L, [1, 1] if not zero_d else 0, b)
        return L.lerp(x, y, 0.25 if w is None else L.tensor(0.25).to(getattr(L, w)))
    _same(run)


# -- Python complex scalars: ordering ops refuse them as complex tensors -------------------------------------------
@pytest.mark.parametrize("fn", [lambda L, x: x < 1j, lambda L, x: 2j >= x, lambda L, x: L.gt(x, 1 + 1j),
                                lambda L, x: L.clamp(x, 1j), lambda L, x: L.clamp(x, max=1j)])
@pytest.mark.parametrize("dtype", ["bool", "int32", "float64"])
def test_python_complex_scalar_refused_by_ordering_ops(fn, dtype):
    _same(lambda L: fn(L, _t(L, [1, 0, 1], dtype)), exact_message=dtype != "float64")


# -- real-only ops refuse complex operands with torch's errors --------------------------------------------------------
_REAL_ONLY_BINARY = [lambda L, a, b: L.copysign(a, b), lambda L, a, b: L.hypot(a, b),
                     lambda L, a, b: L.nextafter(a, b), lambda L, a, b: L.fmax(a, b), lambda L, a, b: L.fmin(a, b)]


@pytest.mark.parametrize("fn", _REAL_ONLY_BINARY)
@pytest.mark.parametrize("dtypes", [("float32", "complex64"), ("complex64", "float64"), ("int32", "complex64")])
def test_real_only_binary_ops_refuse_complex(fn, dtypes):
    _same(lambda L: fn(L, _t(L, [1.0, -2.0], dtypes[0]), _t(L, [1 + 1j, -2j], dtypes[1])), exact_message=True)


_REAL_ONLY_UNARY = ["sign", "round", "relu", "digamma", "erf", "erfinv", "i0", "lgamma", "frac", "floor", "signbit",
                    "deg2rad", "rad2deg", "logit", "median", "nanmedian"]


@pytest.mark.parametrize("name", _REAL_ONLY_UNARY)
def test_real_only_unary_ops_refuse_complex(name):
    _same(lambda L: getattr(L, name)(L.tensor([1 + 2j, -0.5j])), exact_message=True)


@pytest.mark.parametrize("fn", [lambda L, x: L.mode(x), lambda L, x: L.cummax(x, 0), lambda L, x: L.cummin(x, 0),
                                lambda L, x: L.kthvalue(x, 1), lambda L, x: L.median(x, 0),
                                lambda L, x: L.heaviside(x, x)])
@pytest.mark.parametrize("values", [[1 + 2j, -0.5j], 1 + 2j, [True, False], True])
def test_selection_ops_on_complex_and_bool(fn, values):
    # torch refuses complex (and bool) tensors with NotImplementedError, but answers for a 0-d one
    _same(lambda L: fn(L, L.tensor(values)).values if not isinstance(fn(L, L.tensor(values)), L.Tensor)
          else fn(L, L.tensor(values)))


# -- ldexp: exact scaling by integer exponents ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("exp_dtype", ["uint8", "int16", "int64", "bool"])
def test_ldexp_integer_exponents(dtype, exp_dtype):
    exps = {"uint8": [250, 7, 0, 255], "int16": [-32768, 20, -20, 300], "int64": [2**62, -7, 3, -1074],
            "bool": [True, False, True, True]}[exp_dtype]
    _same(lambda L: L.ldexp(_t(L, [1.5, -0.0, 3.0, 1e-3], dtype), _t(L, exps, exp_dtype)))


# -- in-place and out= dtype rules ------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["floor", "trunc"])
@pytest.mark.parametrize("pair", [("bool", "uint8"), ("int32", "float16"), ("int64", "float32"), ("float16", "float64"),
                                  ("int32", "int64")])
def test_rounding_div_inplace_refuses_a_narrowing_result(mode, pair):
    _same(lambda L: _t(L, [5, 7, 9], pair[0]).div_(_t(L, [2, 3, 4], pair[1]), rounding_mode=mode))


@pytest.mark.parametrize("name", ["sum", "prod"])
@pytest.mark.parametrize("out_dtype", ["int64", "float16", "float64", "bool", "complex64"])
def test_sum_and_prod_reduce_in_the_dtype_of_out(name, out_dtype):
    def run(L):
        out = L.empty(2, dtype=getattr(L, out_dtype))
        result = getattr(L, name)(L.tensor([[1.7, -2.5], [3.2, 4.9]]), 0, out=out)
        assert result is out
        return out
    _same(run)


_SAME_DTYPE_OUT = [lambda L, x, o: L.abs(x, out=o), lambda L, x, o: L.neg(x, out=o),
                   lambda L, x, o: L.sign(x, out=o), lambda L, x, o: L.floor(x, out=o),
                   lambda L, x, o: L.round(x, decimals=1, out=o), lambda L, x, o: L.clamp(x, 0, out=o),
                   lambda L, x, o: L.where(x > 0, x, x, out=o), lambda L, x, o: L.nan_to_num(x, out=o),
                   lambda L, x, o: L.signbit(x, out=o), lambda L, x, o: L.sgn(x, out=o),
                   lambda L, x, o: L.conj_physical(x, out=o)]
_WIDENING_OUT = [lambda L, x, o: L.clamp(x, L.tensor(0.0), out=o), lambda L, x, o: L.sinc(x, out=o),
                 lambda L, x, o: L.copysign(x, -1.0, out=o), lambda L, x, o: L.fmax(x, x, out=o),
                 lambda L, x, o: L.hypot(x, x, out=o), lambda L, x, o: L.logit(x, out=o),
                 lambda L, x, o: L.deg2rad(x, out=o), lambda L, x, o: L.float_power(x, 2, out=o)]


@pytest.mark.parametrize("fn", _SAME_DTYPE_OUT + _WIDENING_OUT)
@pytest.mark.parametrize("dtypes", [("float32", "float64"), ("float32", "float32"), ("int32", "int64"),
                                    ("float32", "float16"), ("complex64", "float64"), ("int32", "float32")])
def test_out_dtype_rules(fn, dtypes):
    def run(L):
        out = L.empty(3, dtype=getattr(L, dtypes[1]))
        result = fn(L, _t(L, [0.25, -2.0, 3.0] if dtypes[0] != "complex64" else [3 + 4j, -1j, 2], dtypes[0]), out)
        assert result is out
        return out
    _same(run, refusal_first=True)


# -- casts and half-precision composites -------------------------------------------------------------------------------
@pytest.mark.parametrize("cast", [lambda L, z: z.bool(), lambda L, z: z.to(L.bool),
                                  lambda L, z: L.zeros(4, dtype=L.bool).copy_(z)])
def test_complex_to_bool_is_nonzero(cast):
    _same(lambda L: cast(L, L.tensor([2j, 0j, 1 + 0j, complex(0, float("nan"))])))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sinc_of_half_types_rounds_once(dtype):
    _same(lambda L: L.sinc(_t(L, [3.0, 1.5, -2.25, 0.0, 7.0], dtype)))


# -- dtype checks of reductions and products -------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [lambda L: L.dot(L.tensor([True, False]), L.tensor([True, True])),
                                lambda L: L.quantile(L.tensor([1.0, 2.0], dtype=L.float16), 0.5),
                                lambda L: L.quantile(L.tensor([1.0, 2.0], dtype=L.bfloat16), 0.5),
                                lambda L: L.positive(L.tensor([True])),
                                lambda L: L.linalg.vector_norm(L.tensor([3j, 4.0]), dtype=L.float64),
                                lambda L: L.linalg.vector_norm(L.tensor([3.0, 4.0]), dtype=L.complex64),
                                lambda L: L.linalg.vector_norm(L.tensor([3.0, 4.0]), dtype=L.float16),
                                lambda L: L.linalg.vector_norm(L.tensor([3.0, 4.0]), dtype=L.int64),
                                lambda L: L.linalg.vector_norm(L.tensor([3j, 4.0]), dtype=L.complex128),
                                lambda L: L.linalg.vector_norm(L.tensor([3.0, 4.0]), dtype=L.float64)])
def test_reduction_dtype_checks(fn):
    _same(fn, exact_message=True)


# -- composites computed in the common dtype; in-place forms of real-only ops ------------------------------------------
@pytest.mark.parametrize("dtypes", [("float64", "float32", "float32"), ("float32", "float64", "float32"),
                                    ("float64", "complex64", "complex64"), ("float32", "int32", "float64")])
def test_addcdiv_divides_in_the_common_dtype(dtypes):
    def run(L):
        a, b, c = (_t(L, v, d) for v, d in zip(([0.1, -2.0, 7.0], [1.0, 3.0, -5.0], [3.0, 7.0, 9.0]), dtypes))
        return L.addcdiv(a, b, c, value=0.3)
    _same(run)


@pytest.mark.parametrize("fn", [lambda L, x: x.sgn_(), lambda L, x: x.abs_(), lambda L, x: x.absolute_(),
                                lambda L, x: x.sign_()])
@pytest.mark.parametrize("values", [[3 + 4j, 0j, -1j], [-2.0, 0.0, 3.0]])
def test_inplace_sign_and_abs_of_complex(fn, values):
    _same(lambda L: fn(L, L.tensor(values)), exact_message=True)
