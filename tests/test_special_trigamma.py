"""Trigamma (``polygamma(1, x)``, digamma's gradient) against torch's values: ATen's formula, its edge values (finite
at negative integers, inf at 0, nan at -inf), through the generated kernel and through the array-module steps."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.ops.special_trigamma import trigamma

from helpers import check_op, gradcheck_op, gradgradcheck_op, np_dtype


def _wide_inputs(dtype):
    rng = np.random.default_rng(7)
    finfo = np.finfo(np.float32 if dtype in ("float16", "bfloat16") else dtype)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, float(finfo.tiny), -float(finfo.tiny), float(finfo.max),
               float(finfo.min), 0.5, 0.49999997, 2.0 ** 24, -2.0 ** 24 - 2.0, 1e-30, -1e-30]
    values = np.concatenate([rng.uniform(-30, 30, 3000), rng.uniform(-1, 1, 1000), 10 ** rng.uniform(-38, 38, 500),
                             -10 ** rng.uniform(-38, 38, 500), np.arange(-40.0, 40.0), np.arange(-40.0, 40.0) + 0.5,
                             special])
    with np.errstate(over="ignore"):
        return values.astype(np_dtype(dtype))


def _ulp_error(got, want, dtype):
    """Max error in units of the last place of torch's value, over the entries torch gives finite; the non-finite
    entries must be the same values (nan where torch's is nan, infinities of its sign)."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite])
    spacing = np.spacing(np.abs(want[finite]).astype(np.float32 if dtype in ("float16", "bfloat16") else dtype))
    return float((np.abs(got[finite] - want[finite]) / spacing.astype(np.float64)).max())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("native", [True, False])
def test_trigamma_matches_torch_to_a_few_ulp(dtype, native):
    x = _wide_inputs(dtype)
    want = torch.polygamma(1, torch.from_numpy(x)).numpy()
    got = trigamma(np, x, native=native)
    assert got.dtype == x.dtype
    positive = x >= 0.5
    # Above 1/2 no step cancels: the same rounding gives torch's value or its neighbour (a fused multiply-add).
    assert _ulp_error(got[positive], want[positive], dtype) <= 1
    # Below, pi^2 / sin^2(pi x) cancels against the recurrence: one ulp of sin becomes a few of the result.
    assert _ulp_error(got[~positive], want[~positive], dtype) <= 8


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_polygamma_1_edges_through_the_op(dtype):
    values = [0.0, -0.0, -1.0, -2.0, -7.0, -1e30, np.inf, -np.inf, np.nan, 1e-30, 0.25, 3.0, -0.5, 1e30]
    with np.errstate(over="ignore"):
        x = np.array(values, dtype=np_dtype(dtype))
    got = jitorch.polygamma(1, jitorch.tensor(x))
    want = torch.polygamma(1, torch.tensor(np.asarray(values), dtype=getattr(torch, dtype)))
    assert str(got.dtype) == str(want.dtype).replace("torch.", "jitorch.")
    tol = {"float32": 1e-5, "float64": 1e-13}.get(dtype, 1e-2)
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=tol, equal_nan=True)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_digamma_and_trigamma_gradients(dtype, layout):
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(0.05, 12, (6, 20)), rng.uniform(-4.9, -0.1, (2, 20))]).astype(dtype)
    tol = {"float32": 3e-5, "float64": 1e-12}[dtype]
    check_op(jitorch.digamma, torch.digamma, [x], atol=tol, rtol=tol, layout=layout)
    check_op(lambda t: jitorch.polygamma(1, t), lambda t: torch.polygamma(1, t), [x], atol=tol, rtol=tol,
             layout=layout, grad_rtol=1e-4 if dtype == "float32" else 1e-8, grad_atol=1e-4)


def test_trigamma_gradcheck():
    x = np.array([0.3, 1.7, 6.5, -0.4, -2.6])
    gradcheck_op(jitorch.digamma, [x])
    gradcheck_op(lambda t: jitorch.polygamma(1, t), [x])
    gradgradcheck_op(jitorch.digamma, [x])


@pytest.mark.parametrize("shape", [(), (0,), (1,), (3, 0, 2)])
def test_trigamma_shapes(shape):
    x = np.full(shape, 0.75)
    check_op(lambda t: jitorch.polygamma(1, t), lambda t: torch.polygamma(1, t), [x], atol=1e-12, rtol=1e-12)
