"""torch.special's Bessel, Airy, scaled-Bessel, log_ndtr and zeta functions against torch: values over wide ranges in
float32 and float64 (0, negatives, large, +-inf, nan), gradients where torch has them (i0e, i1e, log_ndtr, zeta's
second argument), torch's "not implemented" derivative and dtype errors, and results without grad where torch's have
none. torch's own J/Y and Airy kernels are less accurate than Cephes (SciPy) away from 0; those tolerances cover
torch's error, and a few reference values (mpmath, 15 digits) pin jitorch's accuracy."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

RNG = np.random.default_rng(5)
EDGES = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 1e-30, -1e-30, 1e-8, 1e300, -1e300,
                  5e-324])
WIDE = np.concatenate([RNG.standard_normal(200) * 3, RNG.standard_normal(100) * 50, np.linspace(-30, 30, 121),
                       [85.0, -85.0, 700.0, -700.0, 1e5]])
NARROW = np.concatenate([RNG.standard_normal(200) * 3, np.linspace(-30, 30, 121)])

NO_GRAD = ["airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0", "modified_bessel_i1",
           "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
           "spherical_bessel_j0"]
WITH_GRAD = ["i0e", "i1e", "log_ndtr"]
# (rtol, atol) in float64 where torch's approximations are coarser than Cephes'.
LOOSE64 = {"airy_ai": (1e-4, 5e-5), "bessel_j0": (1e-6, 1e-6), "bessel_j1": (1e-6, 1e-6), "bessel_y0": (1e-6, 1e-6),
           "bessel_y1": (1e-6, 1e-6)}


def _both(name, values, dtype):
    a = getattr(jitorch.special, name)(jitorch.tensor(values, dtype=getattr(jitorch, dtype))).numpy()
    b = getattr(torch.special, name)(torch.tensor(values, dtype=getattr(torch, dtype))).numpy()
    return a, b


@pytest.mark.parametrize("name", NO_GRAD + WITH_GRAD)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_edge_values_match_torch(name, dtype):
    a, b = _both(name, EDGES, dtype)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-30, equal_nan=True)
    assert np.array_equal(np.signbit(a[np.isinf(b)]), np.signbit(b[np.isinf(b)]))


@pytest.mark.parametrize("name", NO_GRAD + WITH_GRAD)
def test_float64_values_match_torch_over_a_wide_range(name):
    a, b = _both(name, WIDE, "float64")
    rtol, atol = LOOSE64.get(name, (1e-12, 1e-300))
    if name == "airy_ai":  # torch's Ai loses its phase for x << 0 (where Cephes keeps it): compared nearer 0
        a, b = _both(name, NARROW, "float64")
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("name", NO_GRAD + WITH_GRAD)
def test_float32_values_match_torch(name):
    # Within |x| <= 30: beyond, torch's float32 kernels lose the phase of the oscillating functions and overflow
    # exp(|x|) inside I0/I1 (inf where the value is finite).
    a, b = _both(name, NARROW, "float32")
    assert a.dtype == np.float32
    atol = 5e-5 if name == "airy_ai" else 2e-6
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=atol, equal_nan=True)


def test_more_accurate_than_torch_where_torch_approximates():
    # mpmath values: airyai(-2.111205707420978), besselj(0, 3.9120001353904117), bessely(0, 3.9120001353904117).
    x = jitorch.tensor([-2.111205707420978, 3.9120001353904117], dtype=jitorch.float64)
    np.testing.assert_allclose(jitorch.special.airy_ai(x[:1]).numpy(), [0.15608607220338], rtol=1e-12)
    np.testing.assert_allclose(jitorch.special.bessel_j0(x[1:]).numpy(), [-0.401470690333751], rtol=1e-12)
    np.testing.assert_allclose(jitorch.special.bessel_y0(x[1:]).numpy(), [0.0184879624093992], rtol=1e-12)


@pytest.mark.parametrize("name", NO_GRAD)
def test_results_do_not_require_grad_as_torch(name):
    x = jitorch.tensor([0.5, 2.0], requires_grad=True)
    y = getattr(jitorch.special, name)(x)
    t = getattr(torch.special, name)(torch.tensor([0.5, 2.0], requires_grad=True))
    assert y.requires_grad == t.requires_grad is False


@pytest.mark.parametrize("name", WITH_GRAD)
def test_gradients_match_torch(name):
    values = np.concatenate([[0.0, -0.0, 1e-8, -1e-8, -40.0, 40.0], RNG.standard_normal(50) * 4])
    g = RNG.standard_normal(values.shape)
    xj = jitorch.tensor(values, requires_grad=True)
    xt = torch.tensor(values, requires_grad=True)
    (getattr(jitorch.special, name)(xj) * jitorch.tensor(g)).sum().backward()
    (getattr(torch.special, name)(xt) * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-300)


def test_second_derivatives_of_i0e_and_log_ndtr_match_torch():
    values = RNG.standard_normal(20) * 3
    for name in ("i0e", "i1e", "log_ndtr"):
        xj = jitorch.tensor(values, requires_grad=True)
        xt = torch.tensor(values, requires_grad=True)
        (gj,) = jitorch.autograd.grad(getattr(jitorch.special, name)(xj).sum(), xj, create_graph=True)
        (gt,) = torch.autograd.grad(getattr(torch.special, name)(xt).sum(), xt, create_graph=True)
        gj.sum().backward()
        gt.sum().backward()
        np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)


ZX = np.array([-3.0, -2.5, -1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 10.0, 50.0, np.inf, -np.inf, np.nan, 1.0000001])
ZQ = np.array([-3.0, -2.5, -1.0, -0.5, 0.0, 1e-10, 0.5, 1.0, 2.0, 10.0, 1e5, np.inf, -np.inf, np.nan])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_zeta_matches_torch_on_a_grid(dtype):
    x, q = np.meshgrid(ZX, ZQ)
    a = jitorch.special.zeta(jitorch.tensor(x, dtype=getattr(jitorch, dtype)),
                             jitorch.tensor(q, dtype=getattr(jitorch, dtype))).numpy()
    b = torch.special.zeta(torch.tensor(x, dtype=getattr(torch, dtype)), torch.tensor(q, dtype=getattr(torch, dtype)))
    np.testing.assert_allclose(a, b.numpy(), rtol=1e-6 if dtype == "float32" else 1e-12, equal_nan=True)


def test_zeta_scalars_dtypes_and_gradient():
    q = np.array([0.5, 1.0, 2.5, 7.0])
    for x in (2.0, 3):
        np.testing.assert_allclose(jitorch.special.zeta(x, jitorch.tensor(q)).numpy(),
                                   torch.special.zeta(x, torch.tensor(q)).numpy(), rtol=1e-12)
    assert jitorch.special.zeta(jitorch.tensor([2, 3]), jitorch.tensor([1, 2])).dtype == jitorch.float32
    assert jitorch.special.zeta(jitorch.tensor([2.0]), 1).dtype == jitorch.float32
    g = RNG.standard_normal(4)
    x = np.array([2.0, 3.5, 1.5, 4.0])
    qj = jitorch.tensor(q, requires_grad=True)
    qt = torch.tensor(q, requires_grad=True)
    (jitorch.special.zeta(jitorch.tensor(x), qj) * jitorch.tensor(g)).sum().backward()
    (torch.special.zeta(torch.tensor(x), qt) * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(qj.grad.numpy(), qt.grad.numpy(), rtol=1e-10)
    xj = jitorch.tensor(x, requires_grad=True)
    with pytest.raises(RuntimeError, match="the derivative for 'zeta' is not implemented"):
        jitorch.special.zeta(xj, jitorch.tensor(q)).sum().backward()


@pytest.mark.parametrize("name", NO_GRAD + ["log_ndtr"])
def test_half_precision_is_refused_as_in_torch(name):
    with pytest.raises(NotImplementedError, match=f'"{name}_cpu" not implemented for \'Half\''):
        getattr(jitorch.special, name)(jitorch.tensor([1.0], dtype=jitorch.float16))
    with pytest.raises(NotImplementedError, match=f'"{name}_cpu" not implemented for \'Half\''):
        getattr(torch.special, name)(torch.tensor([1.0], dtype=torch.float16))


def test_i0e_i1e_keep_half_and_integers_become_float():
    for name in ("i0e", "i1e"):
        a = getattr(jitorch.special, name)(jitorch.tensor([0.5, 3.0], dtype=jitorch.float16))
        b = getattr(torch.special, name)(torch.tensor([0.5, 3.0], dtype=torch.float16))
        assert a.dtype == jitorch.float16
        np.testing.assert_allclose(a.float().numpy(), b.float().numpy(), rtol=1e-3)
    for name in NO_GRAD + WITH_GRAD:
        assert getattr(jitorch.special, name)(jitorch.tensor([1, 2])).dtype == jitorch.float32, name


def test_out_argument_and_non_tensor_input():
    out = jitorch.empty(3)
    r = jitorch.special.bessel_j0(jitorch.tensor([0.0, 1.0, 2.0]), out=out)
    assert r is out
    np.testing.assert_allclose(out.numpy(), torch.special.bessel_j0(torch.tensor([0.0, 1.0, 2.0])).numpy(),
                               rtol=1e-6)
    with pytest.raises(TypeError, match="bessel_j0"):
        jitorch.special.bessel_j0(1.0)
