"""Complex gradients, empty inputs, eig, householder_product, tensorinv/tensorsolve and the legacy
``triangular_solve`` against PyTorch."""
import math

import numpy as np
import pytest
import torch
from helpers import check_error, check_op, gradcheck_op, normal_array

import jitorch

pytestmark = pytest.mark.filterwarnings("ignore:.*deprecated:UserWarning")


def run(fn, *inputs, **kw):
    kw.setdefault("atol", 1e-8)
    kw.setdefault("rtol", 1e-6)
    return check_op(lambda *a: fn(jitorch, *a), lambda *a: fn(torch, *a), inputs, **kw)


def error(fn, *inputs, match=()):
    return check_error(lambda *a: fn(jitorch, *a), lambda *a: fn(torch, *a), inputs, match=match)


arr = normal_array


# -- complex inputs -------------------------------------------------------------------------------------------------
def test_complex_det_slogdet_logdet_and_trace():
    a = arr(2, 3, 3, seed=1, dtype=np.complex128)
    run(lambda lib, x: lib.linalg.slogdet(x), a)  # the sign's gradient is nonzero for complex input
    run(lambda lib, x: lib.logdet(x), a)  # complex log(det), not the real log|det|
    run(lambda lib, x: lib.linalg.det(x[0]), a)  # a 0-d complex output
    run(lambda lib, x: lib.trace(x[0]), a)
    gradcheck_op(lambda x: jitorch.linalg.slogdet(x), [a])


@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 4), (2, 3, 3)], ids=str)
def test_complex_qr_gradient(shape):
    a = arr(*shape, seed=2, dtype=np.complex128)
    run(lambda lib, x: lib.linalg.qr(x), a)
    gradcheck_op(lambda x: jitorch.linalg.qr(x), [a])


# -- empty inputs -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (0, 0), (2, 0, 3)], ids=str)
@pytest.mark.parametrize("ord", ["fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf])
def test_matrix_norm_of_empty_matrices(shape, ord):
    run(lambda lib, x: lib.linalg.matrix_norm(x, ord), np.zeros(shape))  # 0, or PyTorch's error for the minima
    run(lambda lib, x: lib.linalg.matrix_norm(x, ord, keepdim=True), np.zeros(shape))


@pytest.mark.parametrize("ord", [-1, -2, -0.5, 0, 1, math.inf])
def test_vector_norm_of_empty_input(ord):
    run(lambda lib, x: lib.linalg.vector_norm(x, ord), np.zeros((0, 3)))
    run(lambda lib, x: lib.linalg.vector_norm(x, ord, dim=-1), np.zeros((3, 0)))
    error(lambda lib, x: lib.linalg.vector_norm(x, "fro"), np.ones(3))


@pytest.mark.parametrize("p", [None, 2, -2, 1, -1, math.inf, -math.inf, "fro", "nuc"])
def test_cond_of_empty_and_singular_matrices(p):
    for shape in [(0, 0), (2, 0, 0), (0, 3, 3)]:
        run(lambda lib, x: lib.linalg.cond(x, p), np.zeros(shape))
    if p != "nuc":  # PyTorch's nuc norm of its inf-filled inverse is whatever the SVD makes of inf
        # A singular matrix's condition number is inf or 1 / (rounding noise): LAPACK builds differ in the noise
        singular = np.array([[1.0, 2.0], [2.0, 4.0]])
        got, want = (float(lib.linalg.cond(lib.tensor(singular), p)) for lib in (jitorch, torch))
        if p == -2:  # sigma_min / sigma_max
            assert abs(got) < 1e-15 and abs(want) < 1e-15, (got, want)
        else:
            assert got > 1e15 and want > 1e15, (got, want)
    run(lambda lib, x: lib.linalg.cond(x, p), arr(2, 3, 3, seed=3), grad=p in (None, 2, -2), atol=1e-6)
    error(lambda lib, x: lib.linalg.cond(x, 3), np.eye(3))
    if p not in (None, 2, -2):
        error(lambda lib, x: lib.linalg.cond(x, p), np.ones((2, 3)), match="square")


# -- eig -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (0, 2, 2), (0, 0)], ids=str)
def test_eig(shape, dtype):
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == np.float32 else {}
    a = arr(*shape, seed=4, dtype=dtype)
    run(lambda lib, x: lib.linalg.eigvals(x), a, **tol)
    # |V| is invariant under the phase of each eigenvector.
    run(lambda lib, x: (lambda w, v: (w, v.abs()))(*lib.linalg.eig(x)), a, **tol)
    if dtype != np.float32 and 0 not in shape:
        gradcheck_op(jitorch.linalg.eigvals, [a])
        gradcheck_op(lambda x: (lambda w, v: (w, v.abs()))(*jitorch.linalg.eig(x)), [a])
    error(lambda lib, x: lib.linalg.eig(x), np.ones((2, 3)))


# -- composites ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,k", [((4, 3), 3), ((4, 3), 2), ((2, 3, 3), 3), ((0, 0), 0), ((3, 2), 0)], ids=str)
def test_householder_product(shape, k, dtype):
    a, tau = arr(*shape, seed=5, dtype=dtype), arr(*shape[:-2], k, seed=6, dtype=dtype)
    run(lambda lib, x, t: lib.linalg.householder_product(x, t), a, tau)
    if 0 not in shape and k:
        gradcheck_op(jitorch.linalg.householder_product, [a, tau])
    error(lambda lib, x, t: lib.linalg.householder_product(x, t), arr(2, 3), arr(2))
    error(lambda lib, x, t: lib.linalg.householder_product(x, t), arr(3, 2), arr(3))


def test_tensorinv_and_tensorsolve():
    run(lambda lib, x: lib.linalg.tensorinv(x, ind=2), arr(4, 6, 8, 3))
    run(lambda lib, x: lib.linalg.tensorinv(x, ind=1), arr(6, 2, 3))
    run(lambda lib, x, b: lib.linalg.tensorsolve(x, b), arr(2, 3, 6), arr(2, 3, seed=1))
    run(lambda lib, x, b: lib.linalg.tensorsolve(x, b, dims=(0,)), arr(6, 2, 3), arr(2, 3, seed=1))
    error(lambda lib, x: lib.linalg.tensorinv(x, ind=1), np.ones((2, 3)))
    error(lambda lib, x: lib.linalg.tensorinv(x, ind=0), np.ones((2, 2)))


@pytest.mark.parametrize("upper,transpose,unitriangular", [(True, False, False), (False, True, True),
                                                             (False, False, False), (True, True, False)])
def test_legacy_triangular_solve(upper, transpose, unitriangular):
    a, b = arr(2, 3, 3, seed=7) + 4 * np.eye(3), arr(2, 3, 2, seed=8)
    run(lambda lib, x, y: lib.triangular_solve(y, x, upper, transpose, unitriangular), a, b)
    run(lambda lib, x, y: y.triangular_solve(x, upper=upper), a[0], b[0])


def test_argument_checks():
    error(lambda lib, x, y: lib.linalg.solve_triangular(x, y, upper=True), np.eye(3), np.ones(3))
    error(lambda lib, x, y: lib.cholesky_solve(y, x), np.eye(3), np.ones(3))
    error(lambda lib, x: lib.linalg.svd(x, driver="gesvd"), np.eye(3), match="driver")
    error(lambda lib, x: lib.linalg.svdvals(x, driver="gesvd"), np.eye(3), match="driver")
