"""LU factorizations, the ``*_ex`` spellings' ``info`` and PyTorch's singular-input errors, against PyTorch."""
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


arr = normal_array


SHAPES = [(3, 3), (2, 4, 4), (4, 2), (2, 5), (0, 3, 3), (0, 0)]


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_lu_factor_lu_and_unpack(shape, dtype):
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == np.float32 else {}
    a = arr(*shape, seed=3, dtype=dtype)
    run(lambda lib, x: lib.linalg.lu_factor_ex(x), a, **tol)
    run(lambda lib, x: lib.linalg.lu(x), a, layout="transposed", **tol)
    run(lambda lib, x: lib.lu_unpack(*lib.linalg.lu_factor_ex(x)[:2]), a, **tol)
    run(lambda lib, x: lib.lu(x, get_infos=True), a, **tol)
    if dtype != np.float32 and 0 not in shape:
        gradcheck_op(lambda x: jitorch.linalg.lu_factor_ex(x).LU, [a])
        gradcheck_op(lambda x: jitorch.linalg.lu(x)[1:], [a])


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve(dtype, left, adjoint):
    a, b = arr(2, 4, 4, seed=3, dtype=dtype), arr(2, 4, 2, seed=4, dtype=dtype)
    b = b if left else np.swapaxes(b, -1, -2).copy()
    run(lambda lib, x, y: lib.linalg.lu_solve(*lib.linalg.lu_factor(x), y, left=left, adjoint=adjoint), a, b)
    run(lambda lib, x, y: lib.lu_solve(y, *lib.linalg.lu_factor(x)), a[0], arr(4, 3, dtype=dtype))
    gradcheck_op(lambda x, y: jitorch.linalg.lu_solve(*jitorch.linalg.lu_factor(x), y, left=left, adjoint=adjoint),
                 [a, b])


def _singular_batch():
    z = np.zeros((2, 3, 3))
    z[0] = np.eye(3) * 2
    return z


def test_ex_variants_report_info():
    z = _singular_batch()
    # The singular matrix's inverse is undefined (PyTorch's holds LAPACK's partial NaN/inf): compare the rest.
    run(lambda lib, x: (lib.linalg.inv_ex(x).info, lib.linalg.inv_ex(x).inverse[0]), z, grad=False)
    run(lambda lib, x: lib.linalg.solve_ex(x, lib.ones(2, 3, dtype=x.dtype)).info, z, grad=False)
    run(lambda lib, x: lib.linalg.solve_ex(x, lib.ones(2, 3, dtype=x.dtype)).result[0], z, grad=False)
    run(lambda lib, x: lib.linalg.cholesky_ex(x), z, grad=False)
    run(lambda lib, x: lib.linalg.lu_factor_ex(x), z, grad=False)
    run(lambda lib, x: lib.linalg.inv_ex(x), arr(2, 3, 3), atol=1e-8)
    run(lambda lib, x: lib.linalg.inv_ex(x), np.zeros((0, 0)))
    # Not positive-definite at the second leading minor.
    run(lambda lib, x: lib.linalg.cholesky_ex(x).info, np.array([[1.0, 2.0], [2.0, 1.0]]), grad=False)


@pytest.mark.parametrize("call,message", [
    (lambda lib, x: lib.linalg.inv(x), "linalg.inv: (Batch element 1): The diagonal element 1 is zero"),
    (lambda lib, x: lib.inverse(x), "(Batch element 1)"),
    (lambda lib, x: lib.linalg.inv_ex(x, check_errors=True), "linalg.inv_ex: (Batch element 1)"),
    (lambda lib, x: lib.linalg.solve(x, lib.ones(2, 3, dtype=x.dtype)),
     "torch.linalg.solve: (Batch element 1): The solver failed because the input matrix is singular."),
    (lambda lib, x: lib.linalg.solve_ex(x, lib.ones(2, 3, dtype=x.dtype), check_errors=True), "(Batch element 1)"),
    (lambda lib, x: lib.linalg.cholesky(x), "(Batch element 1): The factorization could not be completed because "
     "the input is not positive-definite (the leading minor of order 1 is not positive-definite)."),
    (lambda lib, x: lib.linalg.cholesky_ex(x, check_errors=True), "linalg.cholesky_ex: (Batch element 1)"),
])
def test_singular_errors_name_the_batch_element(call, message):
    with pytest.raises(torch.linalg.LinAlgError):
        call(torch, torch.tensor(_singular_batch()))
    with pytest.raises(jitorch.linalg.LinAlgError) as info:
        call(jitorch, jitorch.tensor(_singular_batch()))
    assert message in str(info.value)
    assert isinstance(info.value, RuntimeError)


def test_unbatched_singular_message_has_no_batch_prefix():
    with pytest.raises(jitorch.linalg.LinAlgError, match=r"^linalg.inv: The diagonal element 2 is zero"):
        jitorch.linalg.inv(jitorch.tensor([[1.0, 1.0], [1.0, 1.0]]))


def test_lu_errors():
    error = check_error(lambda x: jitorch.linalg.lu_factor(x), lambda x: torch.linalg.lu_factor(x),
                        [_singular_batch()], match="(Batch element 1): U[1,1] is zero")
    assert not isinstance(error, jitorch.linalg.LinAlgError)  # a plain RuntimeError, as PyTorch's
    check_error(lambda x: jitorch.linalg.lu_factor(x), lambda x: torch.linalg.lu_factor(x), [np.ones(3)])
    check_error(lambda x: jitorch.linalg.lu_solve(*jitorch.linalg.lu_factor(x), jitorch.ones(4, 1)),
                lambda x: torch.linalg.lu_solve(*torch.linalg.lu_factor(x), torch.ones(4, 1)), [arr(3, 3)])
