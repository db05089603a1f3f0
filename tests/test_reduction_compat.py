"""Reductions, statistics and small linear algebra against PyTorch at their edges: 0-d inputs reduced over dim 0,
empty inputs, diag_embed's dims, beta=0 products' gradient, cdist's inf-norm ties, cov's weight checks, complex
corrcoef and logsumexp, and var/std's degrees-of-freedom warning."""
import warnings

import numpy as np
import pytest
import torch
from helpers import check_error, check_op

import jitorch

INF = float("inf")


def run(fn, *inputs, **kw):
    return check_op(lambda *a: fn(jitorch, *a), lambda *a: fn(torch, *a), inputs, **kw)


def err(fn, *inputs, **kw):
    return check_error(lambda *a: fn(jitorch, *a), lambda *a: fn(torch, *a), inputs, **kw)


def randn(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


SCALAR = np.array(2.5, np.float32)


# -- 0-d inputs reduced over dim 0 / -1 -----------------------------------------------------------------------------
@pytest.mark.parametrize("fn", ["max", "min"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_by_dim_of_a_scalar_backward(fn, keepdim):
    run(lambda lib, t: getattr(t, fn)(0, keepdim=keepdim), SCALAR)
    run(lambda lib, t: getattr(lib, fn)(t, dim=-1, keepdim=keepdim), SCALAR)


@pytest.mark.parametrize("keepdim", [False, True])
def test_quantile_of_a_scalar_over_dim_0(keepdim):
    run(lambda lib, t: lib.quantile(t, 0.5, dim=0, keepdim=keepdim), SCALAR)
    run(lambda lib, t, q: lib.nanquantile(t, q, dim=-1, keepdim=keepdim), SCALAR, np.array([0.2, 0.9], np.float32))
    err(lambda lib, t: lib.quantile(t, 0.5, dim=1), SCALAR)


@pytest.mark.parametrize("p", [0, 1, 2, 3, INF, -INF])
def test_norm_of_a_scalar_over_dim_0(p):
    run(lambda lib, t: lib.norm(t, p, 0), SCALAR)
    run(lambda lib, t: lib.linalg.vector_norm(t, p, -1, keepdim=True), SCALAR)


# -- quantile's argument errors --------------------------------------------------------------------------------------
def test_quantile_rejects_a_bad_interpolation_and_a_q_of_another_dtype():
    x = randn(5)
    err(lambda lib, t: lib.quantile(t, 0.5, interpolation="foo"), x, match="but got foo")
    err(lambda lib, t: lib.quantile(t, lib.tensor([0.5], dtype=lib.float64)), x, match="same dtype")


# -- empty inputs ----------------------------------------------------------------------------------------------------
def test_histogram_of_no_data_spans_zero_to_one():
    run(lambda lib, t: lib.histogram(t, 3), np.zeros(0, np.float32), grad=False)
    run(lambda lib, t: lib.histogramdd(t, bins=2), np.zeros((0, 2), np.float32), grad=False)


def test_unique_consecutive_of_an_empty_tensor():
    run(lambda lib, t: lib.unique_consecutive(t, return_inverse=True, return_counts=True), np.zeros(0, np.int64))
    run(lambda lib, t: lib.unique_consecutive(t, return_counts=True, dim=0), np.zeros((0, 3), np.int64))


# -- diag_embed with its dims elsewhere than last ----------------------------------------------------------------------
@pytest.mark.parametrize("offset", [-1, 0, 2])
@pytest.mark.parametrize("dims", [(0, 2), (2, 0), (-1, -3), (0, 1), (1, 3)])
def test_diag_embed_places_the_new_dims_at_dim1_and_dim2(offset, dims):
    run(lambda lib, t: lib.diag_embed(t, offset, *dims), randn(2, 3, 4)[..., :3] if dims == (1, 3) else randn(2, 3))


def test_diag_embed_rejects_identical_dims():
    err(lambda lib, t: lib.diag_embed(t, 0, 1, -2), randn(2, 3), match="cannot be identical")


# -- beta=0 products keep the input in the graph -----------------------------------------------------------------------
@pytest.mark.parametrize("fn, shapes", [("addmm", [(3, 4), (3, 5), (5, 4)]), ("addmv", [(3,), (3, 5), (5,)]),
                                        ("addbmm", [(3, 4), (2, 3, 5), (2, 5, 4)]),
                                        ("baddbmm", [(2, 3, 4), (2, 3, 5), (2, 5, 4)]), ("addr", [(3, 4), (3,), (4,)])])
def test_beta_zero_gives_the_input_a_zero_gradient(fn, shapes):
    c, a, b = (randn(*s, seed=i) for i, s in enumerate(shapes))
    c.reshape(-1)[0] = np.nan  # beta=0 ignores the input's NaN
    run(lambda lib, t, m1, m2: getattr(lib, fn)(t, m1, m2, beta=0), c, a, b, atol=1e-5)
    for lib in (torch, jitorch):  # the input alone requiring grad: the result still does, and its grad is zeros
        t = lib.tensor(c, requires_grad=True)
        out = getattr(lib, fn)(t, lib.tensor(a), lib.tensor(b), beta=0)
        assert out.requires_grad
        out.sum().backward()
        assert t.grad is not None and not t.grad.any()


# -- cdist's inf-norm ------------------------------------------------------------------------------------------------
def test_cdist_inf_gives_every_tied_coordinate_the_whole_gradient():
    x1 = np.array([[0.0, 1.0, 1.0], [2.0, -2.0, 0.0]])
    x2 = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, -1.0]])
    run(lambda lib, a, b: lib.cdist(a, b, p=INF), x1, x2)
    run(lambda lib, a, b: lib.cdist(a, b, p=INF), randn(2, 5, 3), randn(1, 4, 3, seed=1))
    run(lambda lib, a, b: lib.cdist(a, b, p=INF), np.zeros((2, 0), np.float32), np.zeros((3, 0), np.float32))


# -- cov / corrcoef --------------------------------------------------------------------------------------------------
X = randn(3, 10)


@pytest.mark.parametrize("kw, match", [
    (dict(fweights=np.ones(10, np.float32)), "integral dtype"),
    (dict(fweights=np.ones(10, bool)), "integral dtype"),
    (dict(fweights=np.ones(9, np.int64)), "9 != 10"),
    (dict(fweights=np.ones((2, 5), np.int64)), "one or fewer dimensions"),
    (dict(fweights=-np.ones(10, np.int64)), "fweights cannot be negative"),
    (dict(aweights=np.ones(10, np.int64)), "floating point dtype"),
    (dict(aweights=-np.ones(10, np.float32)), "aweights cannot be negative"),
    (dict(aweights=np.zeros(10, np.float32)), "weights sum to zero"),
])
def test_cov_checks_its_weights(kw, match):
    (name, w), = kw.items()
    err(lambda lib, t, w: lib.cov(t, **{name: w}), X, w, match=match)


def test_cov_with_valid_integer_weights():
    run(lambda lib, t, f, a: lib.cov(t, fweights=f, aweights=a), X, np.arange(10, dtype=np.int32),
        np.linspace(0.1, 1, 10, dtype=np.float32), atol=1e-5)


def test_complex_corrcoef_and_logsumexp():
    z = (randn(2, 5) + 1j * randn(2, 5, seed=1)).astype(np.complex64)
    run(lambda lib, t: lib.corrcoef(t), z, grad=False, atol=1e-5)
    run(lambda lib, t: lib.logsumexp(t, 1), z, grad=False, atol=1e-5)
    run(lambda lib, t: lib.logsumexp(t, (0, 1), keepdim=True), z.astype(np.complex128), grad=False)


# -- var/std's degrees-of-freedom warning ----------------------------------------------------------------------------
@pytest.mark.parametrize("call, name", [(lambda lib, t: t.var(), "var"), (lambda lib, t: lib.std(t, 0), "std"),
                                        (lambda lib, t: lib.var_mean(t), "var_mean"),
                                        (lambda lib, t: lib.std_mean(t, dim=0), "std_mean")])
def test_var_std_warn_when_the_degrees_of_freedom_are_not_positive(call, name):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call(jitorch, jitorch.ones(1))
    messages = [w for w in caught if "degrees of freedom is <= 0" in str(w.message)]
    assert len(messages) == 1 and str(messages[0].message).startswith(f"{name}():")
    assert messages[0].filename == __file__  # attributed to the caller, as torch's


def test_cov_warns_when_the_degrees_of_freedom_are_not_positive():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jitorch.cov(jitorch.ones(3, 1))
    assert [str(w.message)[:34] for w in caught] == ["cov(): degrees of freedom is <= 0."]
    assert caught[0].filename == __file__


def test_var_with_enough_observations_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jitorch.ones(3).var()
        jitorch.ones(1).var(correction=0)


@pytest.mark.parametrize("x, p, maxnorm, match", [(randn(3), 2, 1.0, "at least 2 dimensions"),
                                                  (randn(3, 3), 0, 1.0, "non-positive-norm"),
                                                  (randn(3, 3), 2, -1.0, "maxnorm to be >= 0")])
def test_renorm_checks_its_arguments(x, p, maxnorm, match):
    err(lambda lib, t: lib.renorm(t, p, 0, maxnorm), x, match=match)


def test_cov_of_more_than_two_dims_is_a_runtime_error():
    err(lambda lib, t: lib.cov(t), randn(2, 3, 4), match="two or fewer dimensions")


def test_logcumsumexp_of_a_long_float32_row_stays_as_accurate_as_torch():
    # torch's CPU scan carries the running value in double; float32 steps drift past 1e-5 within a few thousand
    x = randn(2, 4096) * 5
    run(lambda lib, t: lib.logcumsumexp(t, 1), x, atol=1e-5, rtol=1e-6, grad=False)


def test_torch_norm_takes_out_and_tensor_norm_takes_dtype_fourth():
    x = randn(2, 3, 4)
    run(lambda lib, t: lib.norm(t, 2, 1, False, None, lib.float64), x)  # torch.norm(input, p, dim, keepdim, out, dtype)
    run(lambda lib, t: t.norm(2, 1, False, lib.float64), x)  # Tensor.norm(p, dim, keepdim, dtype)
    run(lambda lib, t: lib.norm(t, "nuc", (0, 1), dtype=lib.float64), x, atol=1e-5)
    for p, dim in ((2, 1), ("nuc", (0, 1))):
        out = jitorch.empty(0)
        res = jitorch.norm(jitorch.tensor(x), p, dim, out=out)
        assert res is out
        np.testing.assert_allclose(out.numpy(), torch.norm(torch.tensor(x), p, dim).numpy(), rtol=1e-5)


def test_weighted_cov_with_too_large_a_correction_is_inf_not_negative():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # both warn about the degrees of freedom
        run(lambda lib, t, w: lib.cov(t, aweights=w, correction=5), randn(2, 4), np.full(4, 0.5, np.float32),
            grad=False)
        run(lambda lib, t, w: lib.cov(t, fweights=w, correction=5), randn(2, 4), np.ones(4, np.int64), grad=False)


def test_cov_and_corrcoef_of_one_variable_are_0d():
    run(lambda lib, t: lib.cov(t), randn(1, 5), atol=1e-6)
    run(lambda lib, t, f: lib.cov(t, fweights=f), randn(1, 5), np.arange(5), atol=1e-6)
    run(lambda lib, t: lib.corrcoef(t), randn(1, 5), grad=False)


def test_quantile_of_an_input_with_no_elements_is_an_error_whatever_the_dim():
    err(lambda lib, t: lib.quantile(t, 0.5, dim=1), np.zeros((0, 3), np.float32), match="non-empty")
    err(lambda lib, t: lib.nanquantile(t, 0.5, dim=0), np.zeros((0, 3), np.float32), match="non-empty")


@pytest.mark.parametrize("fn, x, kw, match", [
    ("histogram", np.array([1.0, INF], np.float32), {}, "dimension 0's range [1, inf] is not finite"),
    ("histogram", np.array([1.0, 2.0], np.float32), dict(range=(2.0, 1.0)), "min should not exceed max"),
    ("histogramdd", np.array([[1.0, INF]], np.float32), {}, "dimension 1's range [inf, inf] is not finite"),
])
def test_histogram_rejects_a_bad_range_as_torch(fn, x, kw, match):
    err(lambda lib, t: getattr(lib, fn)(t, 3, **kw), x, match=match)
