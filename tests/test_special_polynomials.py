"""torch.special's orthogonal polynomials against torch: values on a grid of x (inside and outside the interval, its
ends, 0, large, +-inf) and n (negative, fractional, high enough for the trigonometric forms and the Hermite limits,
nan and +-inf) in float64 and float32; scalar x or n, integer inputs, result dtypes, no gradient and the half error."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

NAMES = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
         "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
         "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
         "legendre_polynomial_p"]
RNG = np.random.default_rng(3)
XS = np.concatenate([[0.0, -0.0, 1.0, -1.0, 0.5, np.inf, -np.inf, 2.0, -2.0, 1e10, -1e10],
                     RNG.uniform(-1, 1, 30), RNG.uniform(-3, 3, 15), RNG.uniform(0, 1, 15)])
NS = np.array([-3.0, -1.0, -0.5, 0.0, 0.7, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 13.0, 20.0, 50.0, 100.0,
               129.0, 200.0, 513.0, np.nan, np.inf, -np.inf])


def _both(name, x, n, dtype):
    a = getattr(jitorch.special, name)(jitorch.tensor(x, dtype=getattr(jitorch, dtype)),
                                       jitorch.tensor(n, dtype=getattr(jitorch, dtype))).numpy()
    b = getattr(torch.special, name)(torch.tensor(x, dtype=getattr(torch, dtype)),
                                     torch.tensor(n, dtype=getattr(torch, dtype))).numpy()
    return a, b


def _check(a, b, rtol, atol):
    # Where a value overflows, the sign of the resulting infinity (or a nan from inf - inf) depends on whether the
    # compiler fused torch's multiply-add: only the overflow itself is compared there.
    finite = np.isfinite(b)
    np.testing.assert_allclose(a[finite], b[finite], rtol=rtol, atol=atol)
    assert not np.isfinite(a[~finite]).any()
    assert np.array_equal(np.isnan(a) & ~np.isnan(b) & np.isfinite(b), np.zeros_like(finite))


@pytest.mark.parametrize("name", NAMES)
def test_float64_values_match_torch(name):
    x, n = np.meshgrid(XS, NS)
    a, b = _both(name, x, n, "float64")
    _check(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_float32_values_match_torch(name):
    # Degrees up to 20: beyond, a one-ulp difference in float32 acos/cos (NumPy's against libm's) grows with n.
    x, n = np.meshgrid(XS, NS[np.isnan(NS) | (np.abs(NS) <= 20)])
    a, b = _both(name, x, n, "float32")
    assert a.dtype == np.float32
    _check(a, b, rtol=1e-3, atol=1e-5)  # cancellation in the float32 recurrences (torch may fuse multiply-adds)


@pytest.mark.parametrize("name", NAMES)
def test_nan_x(name):
    # torch returns an uninitialized accumulator for nan x and n >= 2 (its loop stops before the first step); only
    # n = 0, 1 (and negative n) are defined there, and jitorch gives nan beyond.
    a, b = _both(name, np.full(4, np.nan), np.array([-1.0, 0.0, 1.0, 5.0]), "float64")
    np.testing.assert_array_equal(a[:3], b[:3])
    assert np.isnan(a[3])


@pytest.mark.parametrize("name", NAMES)
def test_scalar_operands_and_dtypes(name):
    fj, ft = getattr(jitorch.special, name), getattr(torch.special, name)
    x = np.array([0.25, -0.5, 1.5])
    cases = [(jitorch.tensor(x), 3, torch.tensor(x), 3),
             (0.3, jitorch.tensor([0, 2, 5, -1]), 0.3, torch.tensor([0, 2, 5, -1])),
             (jitorch.tensor([1, 2, -1]), jitorch.tensor([2, 3, 4]), torch.tensor([1, 2, -1]), torch.tensor([2, 3, 4])),
             (jitorch.tensor(x, dtype=jitorch.float32), jitorch.tensor([2.9, -0.2, 4.0], dtype=jitorch.float64),
              torch.tensor(x, dtype=torch.float32), torch.tensor([2.9, -0.2, 4.0], dtype=torch.float64))]
    for xj, nj, xt, nt in cases:
        a, b = fj(xj, nj), ft(xt, nt)
        assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1]
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    with pytest.raises(TypeError, match=name):
        fj(0.5, 3)


@pytest.mark.parametrize("name", NAMES)
def test_no_gradient_and_half_refused_as_torch(name):
    x = jitorch.tensor([0.5, 2.0], requires_grad=True)
    assert not getattr(jitorch.special, name)(x, 3).requires_grad
    assert not getattr(torch.special, name)(torch.tensor([0.5, 2.0], requires_grad=True), 3).requires_grad
    with pytest.raises(NotImplementedError, match=f'"{name}_cpu" not implemented for \'Half\''):
        getattr(jitorch.special, name)(jitorch.tensor([0.5], dtype=jitorch.float16), 3)


def test_out_argument_and_tensor_degrees_broadcast():
    n = jitorch.arange(6).reshape(6, 1)
    x = jitorch.linspace(-1.5, 1.5, 7, dtype=jitorch.float64)
    out = jitorch.empty(6, 7, dtype=jitorch.float64)
    r = jitorch.special.legendre_polynomial_p(x, n, out=out)
    assert r is out
    ref = torch.special.legendre_polynomial_p(torch.linspace(-1.5, 1.5, 7, dtype=torch.float64),
                                              torch.arange(6).reshape(6, 1))
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-12)
