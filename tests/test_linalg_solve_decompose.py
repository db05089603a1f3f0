"""Solvers, inverses and determinants, decompositions (Cholesky, QR, eigh, SVD, pinv, lstsq), products of many
matrices and second derivatives, checked against PyTorch 2.13.
"""
import numpy as np
import pytest
import torch
from helpers import gradcheck_op, gradgradcheck_op

import jitorch

from linalg_helpers import arr, error, run


# torch's own deprecation notices for the legacy spellings (torch.qr, torch.cholesky, ...) under test.
pytestmark = pytest.mark.filterwarnings("ignore:.*deprecated:UserWarning")


def spd(n, batch=(), seed=0, dtype=np.float64):
    """Symmetric positive-definite matrices with distinct eigenvalues."""
    a = arr(*batch, n, n, seed=seed, dtype=dtype)
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n, dtype=dtype)


# -- solvers, inverses, determinants -----------------------------------------------------------------------------
def test_solve():
    a, b = spd(3, (2,), dtype=np.float32), arr(2, 3, 4, seed=1)
    run(lambda lib, x, y: lib.linalg.solve(x, y), a, b)
    run(lambda lib, x, y: lib.linalg.solve(x, y), a, arr(3, seed=1))  # vector right-hand side
    run(lambda lib, x, y: lib.linalg.solve(x, y), a, arr(2, 3, seed=1))  # batch of vectors
    run(lambda lib, x, y: lib.linalg.solve(x, y), a[0], arr(5, 3, 2, seed=1), layout=("transposed", "contiguous"))
    run(lambda lib, x, y: lib.linalg.solve(x, y, left=False), a, arr(2, 4, 3, seed=1))
    gradcheck_op(lambda x, y: jitorch.linalg.solve(x, y), [spd(3, (2,)), arr(3, 2, seed=1, dtype=np.float64)])
    gradgradcheck_op(lambda x, y: jitorch.linalg.solve(x, y), [spd(2), arr(2, seed=1, dtype=np.float64)])
    error(lambda lib, x, y: lib.linalg.solve(x, y), a, arr(2, 4, 1))


def test_solve_triangular():
    a = spd(3, dtype=np.float32)
    for upper in (False, True):
        run(lambda lib, x, y: lib.linalg.solve_triangular(x, y, upper=upper), a, arr(3, 2, seed=1))
        run(lambda lib, x, y: lib.linalg.solve_triangular(x, y, upper=upper, left=False, unitriangular=True), a,
            arr(2, 3, seed=1))


def test_inv_det_slogdet():
    a = arr(2, 3, 3, seed=4)
    run(lambda lib, x: lib.linalg.inv(x), a, atol=1e-4)
    run(lambda lib, x: lib.inverse(x), a, layout="transposed", atol=1e-4)
    run(lambda lib, x: lib.linalg.det(x), a)
    run(lambda lib, x: x.det(), a, layout="sliced")
    run(lambda lib, x: lib.linalg.slogdet(x), a)
    run(lambda lib, x: lib.slogdet(x), a)
    run(lambda lib, x: lib.logdet(x), np.stack([spd(3, dtype=np.float32), -spd(3, dtype=np.float32)]))
    for fn in (jitorch.linalg.inv, jitorch.linalg.det, lambda x: jitorch.linalg.slogdet(x).logabsdet):
        gradcheck_op(fn, [a.astype(np.float64)])
    gradgradcheck_op(jitorch.linalg.det, [arr(3, 3, dtype=np.float64)])
    gradgradcheck_op(jitorch.linalg.inv, [spd(2)])


def test_det_of_singular_matrix_has_the_cofactor_gradient():
    singular = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.5, 1.0, 2.0]], np.float64)
    # PyTorch returns the cofactor matrix (through an SVD) only with create_graph=True: compare with that path.
    t = torch.tensor(singular, requires_grad=True)
    (expected,) = torch.autograd.grad(torch.linalg.det(t), t, create_graph=True)
    j = jitorch.tensor(singular, requires_grad=True)
    jitorch.linalg.det(j).backward()
    np.testing.assert_allclose(j.grad.numpy(), expected.detach().numpy(), atol=1e-10)
    gradcheck_op(jitorch.linalg.det, [singular])


def test_linalg_errors():
    for fn in (lambda lib: lib.linalg.inv(lib.zeros(2, 2)), lambda lib: lib.linalg.cholesky(-lib.eye(2))):
        with pytest.raises(torch.linalg.LinAlgError):
            fn(torch)
        with pytest.raises(jitorch.linalg.LinAlgError, match="linalg"):
            fn(jitorch)
    error(lambda lib, x: lib.linalg.inv(x), arr(2, 3), match="square")
    error(lambda lib, x: lib.linalg.inv(x), np.ones((2, 2), np.int64), match="Long")
    error(lambda lib, x: lib.linalg.det(x), arr(3))
    error(lambda lib, x: lib.linalg.qr(x, mode="full"), arr(3, 3))
    assert issubclass(jitorch.linalg.LinAlgError, RuntimeError)
    with pytest.raises(jitorch.linalg.LinAlgError):
        jitorch.linalg.inv(jitorch.zeros(3, 3))


# -- decompositions ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(upper):
    a = spd(3, (2,), dtype=np.float32)
    run(lambda lib, x: lib.linalg.cholesky(x, upper=upper), a, atol=1e-4)
    run(lambda lib, x: lib.cholesky(x, upper), a, atol=1e-4)
    # Through a symmetric parametrization, as PyTorch's own gradcheck of cholesky does.
    gradcheck_op(lambda x: jitorch.linalg.cholesky(x @ x.mT + 3 * jitorch.eye(3, dtype=x.dtype), upper=upper),
                 [arr(2, 3, 3, dtype=np.float64)])
    run(lambda lib, x, b: lib.cholesky_solve(b, lib.linalg.cholesky(x)), spd(3), arr(3, 2, dtype=np.float64))
    run(lambda lib, x: lib.cholesky_inverse(lib.linalg.cholesky(x)), spd(3))


@pytest.mark.parametrize("shape", [(4, 3), (3, 3), (3, 5), (2, 4, 2)], ids=str)
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr(shape, mode):
    a = arr(*shape, seed=5, dtype=np.float64)
    differentiable = mode == "reduced" or (mode == "complete" and shape[-2] <= shape[-1])
    run(lambda lib, x: lib.linalg.qr(x, mode=mode), a, atol=1e-8, grad=differentiable)
    if differentiable:
        gradcheck_op(lambda x: jitorch.linalg.qr(x, mode=mode), [a])
    run(lambda lib, x: lib.qr(x, some=mode == "reduced").R, a, atol=1e-8, grad=differentiable)


def test_qr_backward_errors():
    error(lambda lib, x: lib.linalg.qr(x.requires_grad_(), mode="r").R.sum().backward(), arr(3, 3))
    error(lambda lib, x: lib.linalg.qr(x.requires_grad_(), mode="complete").Q.sum().backward(), arr(4, 2))


def _eigh_invariants(lib, x):
    values, vectors = lib.linalg.eigh(x)
    return values, vectors * vectors  # squaring removes the sign freedom of each eigenvector


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(uplo):
    a = spd(4, (2,), seed=6)
    run(lambda lib, x: lib.linalg.eigh(x, UPLO=uplo)[0], a, atol=1e-8)
    run(lambda lib, x: _eigh_invariants(lib, x), a, atol=1e-8)
    run(lambda lib, x: lib.linalg.eigvalsh(x, uplo), a, atol=1e-8)
    gradcheck_op(lambda x: _eigh_invariants(jitorch, x + x.mT), [a])
    gradcheck_op(lambda x: jitorch.linalg.eigvalsh(x + x.mT), [a])
    gradgradcheck_op(lambda x: jitorch.linalg.eigvalsh(x + x.mT), [spd(2)])
    # Repeated eigenvalues: an eigenvalue-only loss keeps a finite gradient.
    run(lambda lib, x: lib.linalg.eigh(x).eigenvalues, np.eye(3))


def _svd_invariants(lib, x, full_matrices=False):
    u, s, vh = lib.linalg.svd(x, full_matrices=full_matrices)
    k = s.shape[-1]  # with full_matrices, vectors past k are arbitrary: keep the determined ones
    u, vh = u.narrow(-1, 0, k), vh.narrow(-2, 0, k)
    return u * u, s, vh * vh  # squaring removes the sign freedom of each singular pair


@pytest.mark.parametrize("shape", [(4, 3), (3, 3), (2, 5), (2, 3, 4)], ids=str)
def test_svd(shape):
    a = arr(*shape, seed=7, dtype=np.float64)
    run(lambda lib, x: _svd_invariants(lib, x), a, atol=1e-8)
    run(lambda lib, x: lib.linalg.svd(x).S, a, atol=1e-8)
    run(lambda lib, x: lib.linalg.svdvals(x), a, atol=1e-8)
    run(lambda lib, x: lib.svd(x).S, a, atol=1e-8)
    run(lambda lib, x: [t * t for t in lib.svd(x, some=False)], a, atol=1e-8, grad=False)
    gradcheck_op(lambda x: _svd_invariants(jitorch, x), [a])
    gradcheck_op(jitorch.linalg.svdvals, [a])
    u, s, v = jitorch.svd(jitorch.tensor(a), compute_uv=False)
    assert not bool(u.any()) and not bool(v.any()) and u.shape[-1] == shape[-2]


def test_svd_full_matrices_gradient_ignores_extra_vectors():
    run(lambda lib, x: _svd_invariants(lib, x, True), arr(4, 2, dtype=np.float64), atol=1e-8)
    run(lambda lib, x: _svd_invariants(lib, x, True), arr(2, 5, dtype=np.float64), atol=1e-8)


@pytest.mark.parametrize("shape", [(4, 3), (3, 3), (2, 5), (2, 3, 4)], ids=str)
def test_pinv(shape):
    a = arr(*shape, seed=8, dtype=np.float64)
    run(lambda lib, x: lib.linalg.pinv(x), a, atol=1e-8)
    run(lambda lib, x: lib.pinverse(x), a, atol=1e-8)
    gradcheck_op(jitorch.linalg.pinv, [a])


def test_pinv_rank_deficient_and_tolerances():
    low_rank = arr(4, 1, dtype=np.float64) @ arr(1, 3, seed=1, dtype=np.float64)
    run(lambda lib, x: lib.linalg.pinv(x), low_rank, atol=1e-8)
    run(lambda lib, x: lib.linalg.pinv(x, atol=0.5), arr(3, 3, dtype=np.float64), atol=1e-8)
    run(lambda lib, x: lib.linalg.matrix_rank(x), np.stack([low_rank, arr(4, 3, dtype=np.float64)]))
    run(lambda lib, x: lib.linalg.matrix_rank(x, rtol=0.5), arr(4, 3, dtype=np.float64))


@pytest.mark.parametrize("driver", [None, "gelsd"])
def test_lstsq(driver):
    a, b = arr(5, 3, dtype=np.float64), arr(5, 2, seed=1, dtype=np.float64)
    run(lambda lib, x, y: lib.linalg.lstsq(x, y, driver=driver), a, b, atol=1e-8, grad=driver is None)
    run(lambda lib, x, y: lib.linalg.lstsq(x, y, driver=driver).residuals, a, b, atol=1e-8)
    run(lambda lib, x, y: lib.linalg.lstsq(x, y, driver=driver).solution, arr(2, 5, 3, dtype=np.float64), b,
        atol=1e-8)
    run(lambda lib, x, y: lib.linalg.lstsq(x, y).solution, arr(2, 4, dtype=np.float64), arr(2, 3, dtype=np.float64),
        atol=1e-8)


# -- products of many matrices -----------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 2, 5, -1, -3])
def test_matrix_power(n):
    a = spd(3, (2,), dtype=np.float64) / 4
    run(lambda lib, x: lib.linalg.matrix_power(x, n), a, atol=1e-8)
    run(lambda lib, x: x.matrix_power(n), a[0], atol=1e-8)
    if n:
        gradcheck_op(lambda x: jitorch.linalg.matrix_power(x, n), [a])


def test_multi_dot_and_chain_matmul():
    mats = [arr(3), arr(3, 5, seed=1), arr(5, 2, seed=2), arr(2, seed=3)]
    run(lambda lib, *ts: lib.linalg.multi_dot(ts), *mats)
    run(lambda lib, *ts: lib.linalg.multi_dot(ts), arr(4, 3), *mats[1:3])
    run(lambda lib, *ts: lib.chain_matmul(*ts), arr(4, 3), *mats[1:3])
    error(lambda lib, x: lib.linalg.multi_dot([x]), arr(3, 3))
    error(lambda lib, x, y: lib.linalg.multi_dot([x, y]), arr(3, 3), arr(4, 3))


def test_small_helpers():
    run(lambda lib, x: lib.linalg.diagonal(x, offset=1), arr(2, 3, 4))
    run(lambda lib, x, y: lib.linalg.vecdot(x, y), arr(2, 3), arr(3, seed=1))
    run(lambda lib, x, y: lib.linalg.matmul(x, y), arr(2, 3), arr(3, seed=1))
    run(lambda lib, x: lib.linalg.inv_ex(x).inverse, spd(3), atol=1e-8)
    run(lambda lib, x: lib.linalg.cholesky_ex(x).L, spd(3), atol=1e-8)
    run(lambda lib, x: lib.linalg.det(x), np.zeros((0, 0), np.float32))
    assert jitorch.linalg.solve_ex(jitorch.eye(2), jitorch.ones(2)).info.item() == 0


SECOND_ORDER = {
    "cholesky": (lambda x: jitorch.linalg.cholesky(x @ x.mT + 2 * jitorch.eye(2, dtype=x.dtype)), (2, 2)),
    "qr_tall": (lambda x: jitorch.linalg.qr(x), (3, 2)),
    "qr_wide": (lambda x: jitorch.linalg.qr(x), (2, 3)),
    "eigh": (lambda x: tuple(t * t for t in jitorch.linalg.eigh(x + x.mT)), (3, 3)),
    "svd": (lambda x: tuple(t * t for t in jitorch.linalg.svd(x, full_matrices=False)), (3, 2)),
    "svdvals": (jitorch.linalg.svdvals, (2, 3)),
    "pinv": (jitorch.linalg.pinv, (3, 2)),
    "slogdet": (lambda x: jitorch.linalg.slogdet(x).logabsdet, (3, 3)),
    "vector_norm": (lambda x: jitorch.linalg.vector_norm(x, 3, -1), (2, 3)),
}


@pytest.mark.parametrize("name", SECOND_ORDER)
def test_second_derivatives(name):
    fn, shape = SECOND_ORDER[name]
    gradgradcheck_op(fn, [arr(*shape, seed=9, dtype=np.float64)])
