"""The distributions' fast paths against torch: constraint checks on arrays (``_fast_checks``), Categorical.log_prob
without the broadcast when the value has the batch shape, and the gamma-family numerics on NumPy arrays."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
import jitorch.distributions as JD
from jitorch.distributions import constraints as C
from jitorch.distributions._fast_checks import all_satisfied
from jitorch.distributions._gamma_math import _beta_marginal_grad, _dirichlet_grad
from jitorch.distributions._math_backends import _TensorMath

from helpers import assert_same, check_error, check_op

RNG = np.random.default_rng(0)
LOGITS = RNG.standard_normal((4, 3, 5)).astype(np.float32)


@pytest.mark.parametrize("value_shape", [(4, 3), (1, 3), (4, 1), (3,), (), (2, 4, 3), (6, 1, 1)])
@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "float32"])
@pytest.mark.parametrize("param", ["logits", "probs"])
def test_categorical_log_prob_broadcasts_value_against_batch(value_shape, dtype, param):
    value = RNG.integers(0, 5, value_shape).astype(dtype)
    arg = LOGITS if param == "logits" else np.exp(LOGITS)

    def run(D):
        return lambda p, v: D.Categorical(**{param: p}).log_prob(v)
    check_op(run(JD), run(torch.distributions), [arg, value], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("bad", [5.0, -1.0, 1.5, float("nan"), float("inf")])
def test_categorical_log_prob_rejects_values_outside_support(bad):
    value = np.array([[0.0, 1.0, bad]] * 4, dtype=np.float32)

    def run(D):
        return lambda p, v: D.Categorical(logits=p).log_prob(v)
    check_error(run(JD), run(torch.distributions), [LOGITS, value],
                match=("Expected value argument", "to be within the support", "IntegerInterval"))


def test_categorical_log_prob_shape_error_is_torchs():
    def run(D):
        return lambda p, v: D.Categorical(logits=p).log_prob(v)
    check_error(run(JD), run(torch.distributions), [LOGITS, np.zeros((4, 2), dtype=np.int64)],
                match=("Value is not broadcastable with batch_shape+event_shape",))


@pytest.mark.parametrize("family, args", [
    ("Normal", (np.zeros(3, np.float32), np.array([1.0, 0.0, 2.0], np.float32))),
    ("Normal", (np.array([0.0, np.nan], np.float32), np.ones(2, np.float32))),
    ("Categorical", (np.array([[0.5, -0.1, 0.6]], np.float32),)),
    ("Dirichlet", (np.array([[1.0, 0.0, 2.0]], np.float32),)),
    ("Bernoulli", (np.array([0.5, 1.5], np.float32),)),
    ("Gamma", (np.ones(2, np.float32), np.array([1.0, -1.0], np.float32))),
])
def test_invalid_parameters_raise_torchs_error(family, args):
    check_error(lambda *a: getattr(JD, family)(*a), lambda *a: getattr(torch.distributions, family)(*a), list(args),
                match=("Expected parameter", "to satisfy the constraint"))


def test_validate_args_false_skips_the_checks():
    d = JD.Categorical(logits=jitorch.tensor(LOGITS), validate_args=False)
    assert tuple(d.log_prob(jitorch.zeros(4, 3, dtype=jitorch.long)).shape) == (4, 3)
    JD.Normal(jitorch.zeros(2), jitorch.tensor([1.0, -1.0]), validate_args=False)


SPECIAL = np.array([0.0, 1.0, -1.0, 0.5, 2.0, 3.0, np.nan, np.inf, -np.inf, 1e-30, 5.0, 1.0 - 1e-7, -0.0])
# Built by the same calls in jitorch's and torch's constraints modules: each is checked against torch's own check.
CONSTRAINTS = [lambda c: c.real, lambda c: c.boolean, lambda c: c.positive, lambda c: c.nonnegative,
               lambda c: c.unit_interval, lambda c: c.greater_than(-0.5), lambda c: c.greater_than_eq(1),
               lambda c: c.less_than(2.0), lambda c: c.interval(-1.0, 2.0), lambda c: c.half_open_interval(0.0, 1.0),
               lambda c: c.integer_interval(0, 3), lambda c: c.nonnegative_integer, lambda c: c.positive_integer,
               lambda c: c.real_vector, lambda c: c.independent(c.positive, 1), lambda c: c.simplex,
               lambda c: c.one_hot, lambda c: c.lower_cholesky, lambda c: c.lower_triangular]


@pytest.mark.parametrize("make", CONSTRAINTS, ids=lambda make: repr(make(C)))
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "uint8"])
def test_fast_check_agrees_with_torchs_constraint_check(make, dtype):
    constraint, reference = make(C), make(torch.distributions.constraints)
    rng = np.random.default_rng(1)
    answered = 0
    for trial in range(40):
        pool = SPECIAL if dtype.startswith("float") else np.array([0, 1, 2, 3, 4])
        shape = [(3, 3), (2, 3, 3), (4,), (1, 1), (2, 0)][trial % 5]
        values = rng.choice(pool, size=shape)
        if trial % 4 == 0:  # mostly valid values: the checks' True side
            values = np.abs(np.nan_to_num(values, nan=0.5, posinf=1.0, neginf=0.0)).clip(0, 1)
            if constraint is C.simplex and shape[-1]:
                values = rng.dirichlet(np.ones(shape[-1]), shape[:-1]) if len(shape) > 1 else values
        got = all_satisfied(constraint, jitorch.tensor(values.astype(dtype)))
        try:
            expected = bool(reference.check(torch.from_numpy(values.astype(dtype))).all())
        except RuntimeError:  # a matrix constraint of a vector: the fast path leaves torch's error to check()
            assert got is None
            continue
        except IndexError:  # torch's lower_cholesky takes min() over an empty matrix; jitorch's holds vacuously
            assert values.size == 0
            continue
        assert got is None or got == expected, (constraint, values, got, expected)
        answered += got is not None
    if dtype.startswith("float"):  # every float check is the fast path's to answer (where torch's does not raise)
        assert answered > 0


def test_fast_check_declines_what_it_does_not_know():
    assert all_satisfied(C.positive, jitorch.ones(2, dtype=jitorch.float16)) is None
    assert all_satisfied(C.interval(jitorch.zeros(2), 1.0), jitorch.ones(2)) is None
    assert all_satisfied(C.greater_than(0.5), jitorch.ones(2, dtype=jitorch.long)) is None
    assert all_satisfied(C.positive_definite, jitorch.eye(2)) is None


def test_dirichlet_grad_array_path_equals_ops_path():
    rng = np.random.default_rng(2)
    alpha = rng.choice([0.05, 0.5, 2.0, 7.0, 30.0], (200, 4))
    x = rng.dirichlet(np.ones(4), 200).clip(1e-6, 1 - 1e-6)
    total = np.broadcast_to(alpha.sum(-1, keepdims=True), alpha.shape).copy()
    ours = _dirichlet_grad(jitorch.tensor(x), jitorch.tensor(alpha), jitorch.tensor(total))
    ops = _beta_marginal_grad(_TensorMath, *(jitorch.tensor(v) for v in (x, alpha, total)))
    np.testing.assert_allclose(ours.numpy(), ops.numpy(), rtol=1e-12, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dirichlet_rsample_gradient_is_torchs_formula(dtype):
    rng = np.random.default_rng(3)
    conc = jitorch.tensor(rng.uniform(0.3, 9.0, (16, 5)).astype(dtype), requires_grad=True)
    x = JD.Dirichlet(conc).rsample()
    upstream = rng.standard_normal((16, 5)).astype(dtype)
    x.backward(jitorch.tensor(upstream))
    tx, ta, tg = torch.tensor(x.detach().numpy()), torch.tensor(conc.detach().numpy()), torch.tensor(upstream)
    expected = torch._dirichlet_grad(tx, ta, ta.sum(-1, True).expand_as(ta)) * (tg - (tx * tg).sum(-1, True))
    assert_same(conc.grad, expected, atol=1e-5 if dtype == np.float32 else 1e-10, rtol=1e-4, what="dirichlet grad")
    assert x.dtype == conc.dtype and bool(((x > 0) & (x <= 1)).all())
    np.testing.assert_allclose(x.detach().numpy().sum(-1), 1, rtol=1e-5)


def test_gamma_rsample_gradient_is_torchs_formula():
    rng = np.random.default_rng(4)
    conc = jitorch.tensor(rng.uniform(0.2, 12.0, (64,)).astype(np.float32), requires_grad=True)
    x = JD.Gamma(conc, 1.0).rsample()
    upstream = rng.standard_normal(64).astype(np.float32)
    x.backward(jitorch.tensor(upstream))
    tx, ta = torch.tensor(x.detach().numpy()), torch.tensor(conc.detach().numpy())
    assert_same(conc.grad, torch._standard_gamma_grad(ta, tx) * torch.tensor(upstream), atol=1e-5, rtol=1e-4)


def test_gamma_samples_follow_the_seed_and_keep_dtype():
    conc = jitorch.tensor([0.1, 1.0, 4.0, 0.0], dtype=jitorch.float64)
    jitorch.manual_seed(7)
    a = JD.Gamma(conc, 1.0, validate_args=False).sample((3,))
    jitorch.manual_seed(7)
    b = JD.Gamma(conc, 1.0, validate_args=False).sample((3,))
    assert a.dtype == jitorch.float64 and tuple(a.shape) == (3, 4)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    # A zero concentration gives torch's smallest normal number (Gamma.rsample's clamp), as torch's does.
    assert bool((a[:, :3] > 0).all()) and bool((a[:, 3] == jitorch.finfo(jitorch.float64).tiny).all())


@pytest.mark.parametrize("family", ["Gamma", "Dirichlet", "Beta"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_gamma_family_samples_keep_a_half_dtype(family, dtype):
    # torch has no half-precision gamma sampler on the CPU (it raises); jitorch samples and keeps the dtype, as its
    # tensor path always did (NumPy's maximum of a bfloat16 array and a Python float would make float32).
    c = jitorch.tensor([0.5, 2.0, 3.0], dtype=getattr(jitorch, dtype))
    d = {"Gamma": lambda: JD.Gamma(c, 1.0), "Dirichlet": lambda: JD.Dirichlet(c), "Beta": lambda: JD.Beta(c, c)}
    sample = d[family]().sample((4,))
    assert sample.dtype == c.dtype and bool((sample >= 0).all())
