"""Transforms, ``biject_to``/``transform_to`` and ``TransformedDistribution`` against torch.distributions: forward,
inverse and log|det J| values and gradients, shapes, domains, signs, caching, and the distributions built on them."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from dist_helpers import compare

import jitorch
import jitorch.distributions as JD
import torch.distributions as TD

RNG = np.random.default_rng(3)
X = RNG.standard_normal((2, 3, 4))
POS = np.abs(X) + 0.1
VEC3 = RNG.standard_normal((2, 3))
MAT = RNG.standard_normal((2, 3, 3))
SCALE = RNG.uniform(0.5, 2.0, 4) * np.sign(RNG.standard_normal(4))

# name: (make(D, T, *params), params, input)
TRANSFORMS = {
    "Exp": (lambda D, T: D.ExpTransform(), (), X),
    "Sigmoid": (lambda D, T: D.SigmoidTransform(), (), X),
    "Tanh": (lambda D, T: D.TanhTransform(), (), X),
    "Softplus": (lambda D, T: D.SoftplusTransform(), (), X),
    "Abs": (lambda D, T: D.AbsTransform(), (), X),
    "Power": (lambda D, T, e: D.PowerTransform(e), (np.array([0.5, 2.0, -1.5, 3.0]),), POS),
    "Affine": (lambda D, T, loc, s: D.AffineTransform(loc, s), (VEC3[0, :1].copy(), SCALE), X),
    "Affine_event": (lambda D, T, loc, s: D.AffineTransform(loc, s, event_dim=1), (X[0, 0].copy(), SCALE), X),
    "Affine_number": (lambda D, T: D.AffineTransform(1.5, -2.0), (), X),
    "Softmax": (lambda D, T: D.SoftmaxTransform(), (), X),
    "StickBreaking": (lambda D, T: D.StickBreakingTransform(), (), X),
    "LowerCholesky": (lambda D, T: D.LowerCholeskyTransform(), (), MAT),
    "PositiveDefinite": (lambda D, T: D.PositiveDefiniteTransform(), (), MAT),
    "CorrCholesky": (lambda D, T: D.CorrCholeskyTransform(), (), VEC3),
    "Compose": (lambda D, T, s: D.ComposeTransform([D.TanhTransform(), D.AffineTransform(0.5, s),
                                                    D.ExpTransform()]), (SCALE,), X),
    "Independent": (lambda D, T: D.IndependentTransform(D.SigmoidTransform(), 2), (), X),
    "Reshape": (lambda D, T: D.ReshapeTransform((3, 4), (2, 6)), (), X),
    "Cat": (lambda D, T: D.CatTransform([D.ExpTransform(), D.TanhTransform()], dim=-1, lengths=[1, 3]), (), X),
    "Stack": (lambda D, T: D.StackTransform([D.ExpTransform(), D.SigmoidTransform(), D.TanhTransform()], dim=1),
              (), X),
    "Inverse": (lambda D, T: D.SigmoidTransform().inv, (), RNG.uniform(0.1, 0.9, (2, 3, 4))),
    "CDF": (lambda D, T, m, s: D.CumulativeDistributionTransform(D.Normal(m, s)), (X[0, 0].copy(), POS[0, 0].copy()),
            X),
}
NO_LOG_DET = {"Softmax", "LowerCholesky", "PositiveDefinite", "Abs"}
NOT_INVERTIBLE = {"Abs", "Softmax"}  # inverse is a right inverse only


def _apply(make, what):
    def fn(D, T, *args):
        t = make(D, T, *args[:-1])
        x = args[-1]
        y = t(x)
        if what == "forward":
            return y
        if what == "inverse":
            return t.inv(y.detach())
        return t.log_abs_det_jacobian(x, y)

    return fn


CASES = [(name, what) for name in TRANSFORMS for what in ("forward", "inverse", "log_det")
         if not (what == "log_det" and name in NO_LOG_DET) and not (what == "inverse" and name in NOT_INVERTIBLE)]


@pytest.mark.parametrize("name,what", CASES)
def test_transform_matches_torch(name, what):
    make, params, x = TRANSFORMS[name]
    compare(_apply(make, what), *params, x, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_transform_attributes_match_torch(name):
    make, params, x = TRANSFORMS[name]
    j = make(JD, jitorch, *(jitorch.tensor(p) for p in params))
    t = make(TD, torch, *(torch.tensor(p) for p in params))
    assert j.bijective == t.bijective
    assert j.domain.event_dim == t.domain.event_dim and j.codomain.event_dim == t.codomain.event_dim
    assert type(j.domain).__name__ == type(t.domain).__name__
    assert type(j.codomain).__name__ == type(t.codomain).__name__
    shape = tuple(x.shape)
    assert tuple(j.forward_shape(shape)) == tuple(t.forward_shape(shape))
    y_shape = tuple(t(torch.tensor(x)).shape)
    assert tuple(j.inverse_shape(y_shape)) == tuple(t.inverse_shape(y_shape))
    try:
        t_sign = t.sign
    except NotImplementedError:
        with pytest.raises(NotImplementedError):
            j.sign
    else:
        j_sign = j.sign
        np.testing.assert_array_equal(np.asarray(getattr(j_sign, "numpy", lambda: j_sign)()),
                                      np.asarray(getattr(t_sign, "numpy", lambda: t_sign)()))
    assert (j == make(JD, jitorch, *(jitorch.tensor(p) for p in params))) == (
        t == make(TD, torch, *(torch.tensor(p) for p in params)))


def test_cache_returns_the_forward_input():
    x = jitorch.tensor([0.5, 30.0], dtype=jitorch.float64)  # tanh(30) rounds to 1: atanh of it would be inf
    t = JD.TanhTransform(cache_size=1)
    assert t.inv(t(x)) is x
    assert bool(jitorch.isinf(JD.TanhTransform().inv(JD.TanhTransform()(x))).any())
    c = JD.ComposeTransform([JD.ExpTransform(), JD.AffineTransform(1.0, 2.0)], cache_size=1)
    assert c.inv(c(x)) is not None and all(p._cache_size == 1 for p in c.parts)
    with pytest.raises(ValueError, match="cache_size must be 0 or 1"):
        JD.ExpTransform(cache_size=2)
    assert JD.ExpTransform().with_cache(1)._cache_size == 1


@pytest.mark.parametrize("registry", ["biject_to", "transform_to"])
@pytest.mark.parametrize("make", [
    lambda C, T: C.real, lambda C, T: C.positive, lambda C, T: C.nonnegative, lambda C, T: C.greater_than(1.5),
    lambda C, T: C.greater_than_eq(-1.0), lambda C, T: C.less_than(2.0), lambda C, T: C.unit_interval,
    lambda C, T: C.interval(-2.0, 3.0), lambda C, T: C.half_open_interval(0.0, 4.0), lambda C, T: C.simplex,
    lambda C, T: C.real_vector, lambda C, T: C.independent(C.positive, 1), lambda C, T: C.corr_cholesky,
    lambda C, T: C.cat([C.positive, C.real, C.unit_interval], dim=-1, lengths=[1, 2, 1]),
    lambda C, T: C.stack([C.positive, C.real, C.unit_interval], dim=-2),
    lambda C, T: C.lower_cholesky, lambda C, T: C.positive_definite,
])
def test_constraint_registry_matches_torch(registry, make):
    import torch.distributions.constraints as TC

    import jitorch.distributions.constraints as JC

    c_t = make(TC, torch)
    try:
        t = getattr(TD, registry)(c_t)
    except NotImplementedError:
        with pytest.raises(NotImplementedError, match="Cannot transform"):
            getattr(JD, registry)(make(JC, jitorch))
        return
    j = getattr(JD, registry)(make(JC, jitorch))
    assert type(j).__name__ == type(t).__name__
    x = MAT if c_t.event_dim == 2 else (VEC3 if type(t).__name__ == "CorrCholeskyTransform" else X)
    y_t = t(torch.tensor(x))
    y_j = j(jitorch.tensor(x))
    np.testing.assert_allclose(y_j.numpy(), y_t.numpy(), rtol=1e-10, atol=1e-12)
    assert bool(make(JC, jitorch).check(y_j).all())


def test_transformed_distributions_match_torch():
    def make(D, T, loc, scale, x):
        base = D.Normal(loc, scale)
        d = D.TransformedDistribution(base, [D.AffineTransform(1.0, -2.0), D.ExpTransform().inv.inv])
        return d.log_prob(x.abs() + 0.1) + d.cdf(x.abs() + 0.1) + d.icdf(T.sigmoid(x))

    compare(make, X[0, 0].copy(), POS[0, 0].copy(), X, rtol=1e-9)

    def stick(D, T, c, x):  # a Dirichlet pushed to R^(K-1) and back: log_prob through StickBreaking's log-det
        d = D.TransformedDistribution(D.Dirichlet(c), D.StickBreakingTransform().inv)
        return d.log_prob(x[..., :2]) + d.base_dist.log_prob(D.StickBreakingTransform()(x[..., :2]))

    compare(stick, POS[0, 0, :3].copy(), X, rtol=1e-9)

    def event(D, T, loc, s, x):  # an event-dim affine turns a batch of Normals into one event
        d = D.TransformedDistribution(D.Normal(loc, 1.0), D.AffineTransform(0.0, s, event_dim=1))
        assert tuple(d.event_shape) == (4,)
        return d.log_prob(x)

    compare(event, X[0, 0].copy(), SCALE, X, rtol=1e-9)


def test_transformed_distribution_shapes_and_expand():
    for D, T in ((JD, jitorch), (TD, torch)):
        d = D.TransformedDistribution(D.Normal(T.zeros(3), 1.0), D.AffineTransform(T.zeros(2, 3), 1.0))
        e = d.expand((5, 2, 3))
        s = D.TransformedDistribution(D.Normal(T.zeros(2, 3), 1.0), D.StickBreakingTransform())
        shapes = (tuple(d.batch_shape), tuple(e.batch_shape), tuple(e.sample((4,)).shape), tuple(s.event_shape),
                  tuple(s.batch_shape), type(s.support).__name__, s.support.event_dim)
        if D is JD:
            ours = shapes
    assert ours == shapes
