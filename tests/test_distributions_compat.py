"""jitorch.distributions against torch.distributions where user code leans on a detail of the tensors underneath: a
value of another dtype than the parameters, a Parameter given as a parameter."""
from __future__ import annotations

import numpy as np
import torch

import jitorch

RNG = np.random.default_rng(0)
LOC = RNG.standard_normal((2, 3))
X = RNG.standard_normal((4, 2, 3))


def test_mvn_log_prob_of_a_float64_value_under_float32_parameters():
    # An action replayed from a numpy buffer is float64: torch's triangular solve copies it into the factor's dtype.
    out = []
    for lib in (jitorch, torch):
        d = lib.distributions.MultivariateNormal(lib.tensor(LOC, dtype=lib.float32), scale_tril=2 * lib.eye(3))
        out.append(d.log_prob(lib.tensor(X)))
    assert str(out[0].dtype) == "jitorch.float32" and out[1].dtype == torch.float32
    np.testing.assert_allclose(out[0].numpy(), out[1].numpy(), rtol=1e-5)


def test_solve_triangular_takes_the_dtype_of_the_matrix():
    a = np.array([[2.0, 0.0], [1.0, 3.0]])
    b = np.array([[1.0], [2.0]])
    for a_dt, b_dt in (("float32", "float64"), ("float64", "float32")):
        res = []
        for lib in (jitorch, torch):
            A = lib.tensor(a, dtype=getattr(lib, a_dt), requires_grad=True)
            B = lib.tensor(b, dtype=getattr(lib, b_dt), requires_grad=True)
            x = lib.linalg.solve_triangular(A, B, upper=False)
            x.sum().backward()
            res.append((x, A.grad, B.grad))
        for j, t in zip(*res):
            assert str(j.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
            np.testing.assert_allclose(j.detach().numpy(), t.detach().numpy(), rtol=1e-6)


def test_a_parameter_stays_the_distribution_parameter():
    # torch.broadcast_tensors hands back a tensor already of the broadcast shape as itself: ``loc`` is the leaf.
    for lib in (jitorch, torch):
        mu = lib.nn.Parameter(lib.zeros(3))
        d = lib.distributions.Normal(mu, 1.0)
        assert d.loc is mu and type(d.loc).__name__ == "Parameter"
        d.log_prob(lib.ones(3)).sum().backward()
        np.testing.assert_allclose(d.loc.grad.numpy(), np.ones(3))
        x, y = lib.zeros(2, 3), lib.zeros(3)
        bx, by = lib.broadcast_tensors(x, y)
        assert bx is x and by is not y and tuple(by.shape) == (2, 3)


def test_repr_of_a_distribution_on_a_0d_parameter():
    reprs = []
    for lib in (jitorch, torch):
        d = lib.distributions.Normal(lib.nn.Parameter(lib.tensor(0.0)), 1.0)
        reprs.append(repr(d).replace("jitorch", "torch"))
        assert f"{lib.tensor(0.5):.2f}" == "0.50"
    assert reprs[0] == reprs[1]
    assert reprs[0].startswith("Normal(loc: Parameter containing:\ntensor(0., requires_grad=True)")


def test_student_t_variance_dtype_and_gradient_at_df_2():
    # df = 2 sits on the finite formula's pole: torch writes inf there (zero gradient), and a float32 df gives a
    # float32 variance whatever the default dtype.
    res = []
    for lib in (jitorch, torch):
        lib.set_default_dtype(lib.float64)
        try:
            df = lib.tensor([2.0, 1.0, 3.0, 0.5], dtype=lib.float32, requires_grad=True)
            scale = lib.tensor([1.0, 1.0, 2.0, 1.0], dtype=lib.float32, requires_grad=True)
            v = lib.distributions.StudentT(df, 0.0, scale).variance
            v.nan_to_num(0.0, 0.0, 0.0).sum().backward()
        finally:
            lib.set_default_dtype(lib.float32)
        assert str(v.dtype).endswith("float32")
        res.append((v, df.grad, scale.grad))
    for j, t in zip(*res):
        np.testing.assert_allclose(j.detach().numpy(), t.detach().numpy(), rtol=1e-6)


def test_gamma_sampling_of_a_negative_concentration_ends():
    # validate_args=False lets a negative concentration through: the rejection sampler never accepts one, and jitorch
    # looped forever; torch returns the smallest normal number.
    alpha = np.array([-1.0, -5.0, -np.inf, 0.5])
    for dt in ("float32", "float64"):
        out = []
        for lib in (jitorch, torch):
            lib.manual_seed(0)
            a = lib.tensor(alpha, dtype=getattr(lib, dt))
            out.append(lib.distributions.Gamma(a, 1.0, validate_args=False).sample().numpy())
            d = lib.distributions.Dirichlet(lib.tensor([[-1.0, 1.0]], dtype=getattr(lib, dt)), validate_args=False)
            assert np.isfinite(d.sample().numpy()).all()
        np.testing.assert_array_equal(out[0][:3], out[1][:3])
        assert out[0][3] > 0
