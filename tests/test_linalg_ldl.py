"""torch.linalg.ldl_factor / ldl_factor_ex / ldl_solve against torch: packed factors, pivots, info, solves,
batches, Hermitian and complex inputs, errors."""
import numpy as np
import pytest
import torch

import jitorch


def _symmetric(rng, shape, dtype, hermitian=False):
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    a = a + (np.conj(np.swapaxes(a, -1, -2)) if hermitian else np.swapaxes(a, -1, -2))
    return a.astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("shape", [(4, 4), (3, 5, 5), (2, 1, 3, 3), (0, 3, 3), (2, 0, 0)])
@pytest.mark.parametrize("hermitian", [False, True])
def test_factor_and_solve_match_torch(dtype, shape, hermitian):
    rng = np.random.default_rng(len(shape) * 7 + shape[-1])
    a = _symmetric(rng, shape, dtype, hermitian)
    b = rng.standard_normal(shape[:-1] + (2,)).astype(dtype)
    ours = jitorch.linalg.ldl_factor_ex(jitorch.tensor(a), hermitian=hermitian)
    theirs = torch.linalg.ldl_factor_ex(torch.tensor(a), hermitian=hermitian)
    tol = 1e-4 if dtype in ("float32", "complex64") else 1e-10
    for got, want in zip(ours, theirs):
        assert str(got.dtype).rpartition(".")[2] == str(want.dtype).rpartition(".")[2]
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol, atol=tol)
    x = jitorch.linalg.ldl_solve(ours.LD, ours.pivots, jitorch.tensor(b), hermitian=hermitian)
    want = torch.linalg.ldl_solve(theirs.LD, theirs.pivots, torch.tensor(b), hermitian=hermitian)
    np.testing.assert_allclose(x.numpy(), want.numpy(), rtol=10 * tol, atol=10 * tol)


def test_named_results_and_errors():
    LD, pivots = jitorch.linalg.ldl_factor(jitorch.tensor([[4.0, 1.0], [1.0, 3.0]]))
    assert type(jitorch.linalg.ldl_factor(jitorch.eye(2))).__name__ == "linalg_ldl_factor"
    assert pivots.dtype == jitorch.int32
    with pytest.raises(jitorch.linalg.LinAlgError, match="not invertible"):
        jitorch.linalg.ldl_factor(jitorch.zeros(2, 2))
    assert jitorch.linalg.ldl_factor_ex(jitorch.zeros(2, 2)).info.item() > 0
    with pytest.raises(RuntimeError, match="Expected pivots to be integers"):
        jitorch.linalg.ldl_solve(LD, pivots.long(), jitorch.ones(2, 1))
    with pytest.raises(RuntimeError, match=r"Incompatible shapes of LD and B .* \(\(2, 2\) and \(3, 1\)\)"):
        jitorch.linalg.ldl_solve(LD, pivots, jitorch.ones(3, 1))
    with pytest.raises(RuntimeError, match="A must be batches of square matrices"):
        jitorch.linalg.ldl_factor(jitorch.ones(2, 3))
