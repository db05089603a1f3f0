"""``linalg.lstsq``'s default CPU driver (LAPACK ``gelsy``, as ATen) against torch: solutions, ranks, dtypes and
empty residuals/singular values, with and without autograd (whose gradient is pinv's, as torch's backward)."""
import numpy as np
import pytest
import torch

import jitorch
from helpers import check_error, check_op

SHAPES = [((6, 4), (6, 3)), ((4, 6), (4, 2)), ((5, 5), (5,)), ((3, 7, 4), (3, 7, 2)), ((3, 5, 5), (1, 5, 2)),
          ((2, 1, 4, 3), (1, 5, 4, 2))]


def _pair(a_shape, b_shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    if dtype.startswith("complex"):
        a, b = a + 1j * rng.standard_normal(a_shape), b + 1j * rng.standard_normal(b_shape)
    return a.astype(dtype), b.astype(dtype)


def _tol(dtype):
    return 1e-4 if dtype in ("float32", "complex64") else 1e-10


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("driver", [None, "gelsy"])
def test_lstsq_forward_matches_torch(shapes, dtype, driver):
    a, b = _pair(*shapes, dtype)
    with torch.no_grad(), jitorch.no_grad():
        check_op(lambda x, y: jitorch.linalg.lstsq(x, y, driver=driver),
                 lambda x, y: torch.linalg.lstsq(x, y, driver=driver), [a, b], atol=_tol(dtype), rtol=_tol(dtype),
                 grad=False)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shapes", [((6, 4), (6, 3)), ((4, 6), (4, 2)), ((3, 5, 5), (3, 5, 2))])
def test_lstsq_gradient_matches_torch(shapes, dtype):
    a, b = _pair(*shapes, dtype, seed=1)
    tol = 2e-3 if dtype == "float32" else 1e-8
    check_op(lambda x, y: jitorch.linalg.lstsq(x, y).solution, lambda x, y: torch.linalg.lstsq(x, y).solution,
             [a, b], atol=tol, rtol=tol)


def test_lstsq_rank_deficient_and_rcond():
    # Rank 2 with two independent leading columns: torch's gelsy estimate is stable on it (300 calls agreed).
    a = np.empty((6, 4))
    a[:, 0] = 1
    a[:, 1] = np.arange(6)
    a[:, 2] = a[:, 0] + a[:, 1]
    a[:, 3] = 2 * a[:, 1] - a[:, 0]
    b = np.arange(12.0).reshape(6, 2)
    for rcond in (None, 1e-3, 0.5):
        # Below the matrix's true rank the truncated solution depends on the factorization, and torch's varied
        # between runs of the suite (its solution and residual both): the ranks are compared, and ours must solve
        # the system it kept (a finite solution whose residual is no worse than the zero solution's).
        got = jitorch.linalg.lstsq(jitorch.tensor(a), jitorch.tensor(b), rcond=rcond)
        want = torch.linalg.lstsq(torch.from_numpy(a), torch.from_numpy(b), rcond=rcond)
        assert int(got.rank) == int(want.rank)
        x = got.solution.numpy()
        assert np.isfinite(x).all()
        assert (np.linalg.norm(a @ x - b, axis=0) <= np.linalg.norm(b, axis=0) + 1e-9).all()
    a[:, 1] = 2 * a[:, 0]
    a[:, 2] = np.arange(6)
    got = jitorch.linalg.lstsq(jitorch.tensor(a), jitorch.tensor(b)).rank
    # Rank 2 mathematically, but the second column repeats the first and gelsy keeps the columns in place, so the
    # estimate stops at the first column. torch's says 1 or 2 from call to call on this matrix, so it is no oracle.
    assert got.dtype == jitorch.int64 and int(got) == 1


def test_lstsq_values_same_with_and_without_grad_tracking():
    a, b = _pair((8, 5), (8, 2), "float64", seed=2)
    x = jitorch.tensor(a, requires_grad=True)
    tracked = jitorch.linalg.lstsq(x, jitorch.tensor(b)).solution
    plain = jitorch.linalg.lstsq(x.detach(), jitorch.tensor(b)).solution
    np.testing.assert_allclose(tracked.detach().numpy(), plain.numpy(), atol=1e-10)


def test_lstsq_errors():
    for a, b in (((6, 4), (3, 6, 2)), ((6, 4), (5, 2))):
        check_error(jitorch.linalg.lstsq, torch.linalg.lstsq, [np.ones(a, np.float32), np.ones(b, np.float32)],
                    match=("lstsq",))
