"""Matrix products, einsum, norms and ``jitorch.linalg`` decompositions against PyTorch.

``run(fn, *inputs)`` calls ``fn(lib, *tensors)`` with ``lib`` = jitorch and torch on the same NumPy data and compares
values, dtypes and (random-upstream) gradients through ``helpers.check_op``. Decompositions whose outputs are only
defined up to signs (eigh, svd) are compared through sign-invariant functions of them.
"""
import math

import numpy as np
import pytest
import torch
from helpers import gradcheck_op, gradgradcheck_op

import jitorch

from linalg_helpers import arr, error, run

# torch's own deprecation notices for the legacy spellings (torch.qr, torch.cholesky, ...) under test.
pytestmark = pytest.mark.filterwarnings("ignore:.*deprecated:UserWarning")


def lib_of(t):
    return torch if isinstance(t, torch.Tensor) else jitorch


# -- matmul and friends ------------------------------------------------------------------------------------------
MATMUL_SHAPES = [
    ((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)), ((3,), (5, 3, 4)),
    ((5, 2, 3), (3,)), ((5, 1, 2, 3), (4, 3, 2)), ((2, 3), (6, 3, 4)), ((0, 3), (3, 4)), ((2, 0), (0, 3)),
]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_shapes_and_grads(shapes):
    a, b = arr(*shapes[0]), arr(*shapes[1], seed=1)
    run(lambda lib, x, y: lib.matmul(x, y), a, b)
    run(lambda lib, x, y: x @ y, a, b, layout=("transposed", "sliced"))


def test_matmul_expanded_and_integer():
    run(lambda lib, x, y: x @ y, arr(4, 3), arr(3, 3, seed=2), layout=("expanded", "transposed"))
    run(lambda lib, x, y: x @ y, np.arange(6).reshape(2, 3), np.arange(12).reshape(3, 4))
    run(lambda lib, x, y: x.matmul(y), arr(2, 3, dtype=np.float64), arr(3, dtype=np.float64, seed=1))
    x, y = jitorch.ones(2, 2, dtype=jitorch.float16), jitorch.ones(2, 2, dtype=jitorch.float16)
    assert (x @ y).dtype is jitorch.float16 and (x @ y).sum().item() == 8.0


def test_matmul_errors():
    # torch's wording for two matrices (batch dims folded into mat1's rows), which users search for
    mat = "mat1 and mat2 shapes cannot be multiplied "
    error(lambda lib, x, y: lib.matmul(x, y), arr(3, 4), arr(5, 2), match=mat + "(3x4 and 5x2)")
    error(lambda lib, x, y: x @ y, arr(2, 3, 4), arr(5, 6), match=mat + "(6x4 and 5x6)")
    error(lambda lib, x, y: x.mm(y), arr(3, 4), arr(3, 4), match=mat + "(3x4 and 3x4)")
    error(lambda lib, x, y: lib.matmul(x, y), arr(3, 4), arr(2, 5, 6), match=["(3, 4)", "(2, 5, 6)"])
    error(lambda lib, x, y: lib.matmul(x, y), np.float32(1.0) * np.ones((), np.float32), arr(3))
    error(lambda lib, x, y: lib.matmul(x, y), arr(3, 4), arr(4, dtype=np.float64))
    error(lambda lib, x, y: lib.matmul(x, y), arr(2, 3, 4), arr(3, 4, 2))
    error(lambda lib, x, y: lib.mm(x, y), arr(3, 4), arr(4))
    error(lambda lib, x, y: lib.bmm(x, y), arr(2, 3, 4), arr(3, 4, 2))
    error(lambda lib, x, y: lib.dot(x, y), arr(3), arr(4))
    error(lambda lib, x, y: lib.mv(x, y), arr(3, 4), arr(3))


def test_products():
    run(lambda lib, x, y: lib.mm(x, y), arr(2, 3), arr(3, 4), layout="transposed")
    run(lambda lib, x, y: lib.bmm(x, y), arr(2, 3, 4), arr(2, 4, 5))
    run(lambda lib, x, y: x.mv(y), arr(2, 3), arr(3))
    run(lambda lib, x, y: lib.dot(x, y), arr(4), arr(4, seed=3), layout="sliced")
    run(lambda lib, x, y: lib.vdot(x, y), arr(4), arr(4, seed=3))
    run(lambda lib, x, y: lib.inner(x, y), arr(2, 3), arr(4, 3))
    run(lambda lib, x, y: lib.inner(x, y), arr(2, 3), np.array(2.0, np.float32))
    run(lambda lib, x, y: lib.outer(x, y), arr(3), arr(4))
    run(lambda lib, x, y: x.ger(y), arr(3), arr(2))


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1)])
def test_addmm_family(beta, alpha):
    run(lambda lib, i, x, y: lib.addmm(i, x, y, beta=beta, alpha=alpha), arr(4), arr(2, 3), arr(3, 4))
    run(lambda lib, i, x, y: i.addmv(x, y, beta=beta, alpha=alpha), arr(2), arr(2, 3), arr(3))
    run(lambda lib, i, x, y: lib.addbmm(i, x, y, beta=beta, alpha=alpha), arr(2, 4), arr(3, 2, 5), arr(3, 5, 4))
    run(lambda lib, i, x, y: lib.baddbmm(i, x, y, beta=beta, alpha=alpha), arr(3, 2, 4), arr(3, 2, 5), arr(3, 5, 4))
    run(lambda lib, i, x, y: lib.addr(i, x, y, beta=beta, alpha=alpha), arr(2, 3), arr(2), arr(3))
    run(lambda lib, i, x, y: (i * 1).addmm_(x, y, beta=beta, alpha=alpha), arr(2, 4), arr(2, 3), arr(3, 4))
    run(lambda lib, i, x, y: (i * 1).baddbmm_(x, y, beta=beta, alpha=alpha), arr(3, 2, 4), arr(3, 2, 5),
        arr(3, 5, 4))


def test_matmul_gradcheck():
    for sa, sb in MATMUL_SHAPES[:9]:
        gradcheck_op(lambda x, y: x @ y, [arr(*sa, dtype=np.float64), arr(*sb, seed=1, dtype=np.float64)])
    gradgradcheck_op(lambda x, y: x @ y, [arr(2, 3, dtype=np.float64), arr(3, dtype=np.float64)])


# -- einsum ------------------------------------------------------------------------------------------------------
EINSUM_CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("ii->i", [(3, 3)]), ("ii", [(3, 3)]),
    ("i,i", [(4,), (4,)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("i,j->ij", [(3,), (2,)]), ("ijk->", [(2, 3, 4)]), ("ij->ji", [(2, 3)]), ("iij->j", [(3, 3, 2)]),
    ("a...,a->...", [(3, 2, 4), (3,)]), ("...ij", [(2, 3, 4)]), (" b i , b j -> b i j", [(2, 3), (2, 4)]),
    ("ij,ij->ij", [(1, 3), (2, 3)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), ("bA,ba->Aab", [(2, 3), (2, 4)]),
    ("ijk,ik->j", [(2, 3, 4), (2, 4)]), ("i...->...", [(3,)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES])
def test_einsum(equation, shapes):
    arrays = [arr(*s, seed=i) for i, s in enumerate(shapes)]
    run(lambda lib, *ts: lib.einsum(equation, *ts), *arrays)
    run(lambda lib, *ts: lib.einsum(equation, list(ts)), *arrays, layout="sliced")
    gradcheck_op(lambda *ts: jitorch.einsum(equation, *ts), [a.astype(np.float64) for a in arrays])


def test_einsum_sublist_and_double_backward():
    a, b = arr(2, 3), arr(3, 4, seed=1)
    run(lambda lib, x, y: lib.einsum(x, [0, 1], y, [1, 2], [0, 2]), a, b)
    run(lambda lib, x, y: lib.einsum(x, [0, 1], y, [1, 2]), a, b)
    run(lambda lib, x: lib.einsum(x, [Ellipsis, 0]), a)
    gradgradcheck_op(lambda x, y: jitorch.einsum("ij,jk->ik", x, y), [a.astype(np.float64), b.astype(np.float64)])
    gradgradcheck_op(lambda x: jitorch.einsum("ii->i", x), [arr(3, 3, dtype=np.float64)])


def test_einsum_errors():
    error(lambda lib, x: lib.einsum("ij->ji", x), arr(2, 3, 4), match="operand 0")
    error(lambda lib, x, y: lib.einsum("ij,jk", x, y), arr(2, 3), arr(4, 2), match="subscript j")
    error(lambda lib, x: lib.einsum("ij,jk", x), arr(2, 3))
    error(lambda lib, x: lib.einsum("ij->k", x), arr(2, 3))
    error(lambda lib, x: lib.einsum("ij->ii", x), arr(2, 3))
    error(lambda lib, x: lib.einsum("ii->i", x), arr(2, 3))


# -- tensordot, kron, cross, cdist ------------------------------------------------------------------------------
@pytest.mark.parametrize("dims", [2, 1, 0, ([1, 0], [0, 1]), ([2], [0]), ([-1], [-2])], ids=str)
def test_tensordot(dims):
    a, b = arr(3, 4, 2), arr(4, 3, 2, seed=1)
    if dims in (2, 1, 0):
        b = arr(*(a.shape[3 - dims:] + (2,)), seed=1) if dims else arr(2, seed=1)
    if dims == ([-1], [-2]):
        b = arr(4, 2, 3, seed=1)
    run(lambda lib, x, y: lib.tensordot(x, y, dims), a, b)


def test_tensordot_errors():
    error(lambda lib, x, y: lib.tensordot(x, y, ([0], [0])), arr(3, 4), arr(4, 3), match="contracted")


def test_kron_and_cross():
    run(lambda lib, x, y: lib.kron(x, y), arr(2, 3), arr(4, 2))
    run(lambda lib, x, y: x.kron(y), arr(3), arr(2, 2))
    run(lambda lib, x, y: lib.kron(x, y), np.arange(4).reshape(2, 2), np.arange(3))
    run(lambda lib, x, y: lib.cross(x, y, dim=1), arr(4, 3), arr(4, 3, seed=1))
    run(lambda lib, x, y: lib.linalg.cross(x, y), arr(2, 4, 3), arr(1, 4, 3, seed=1))
    error(lambda lib, x, y: lib.linalg.cross(x, y), arr(2, 4, 3), arr(4, 3, seed=1))
    run(lambda lib, x, y: x.cross(y, 0), arr(3, 2), arr(3, 2, seed=1), layout="transposed")
    error(lambda lib, x, y: lib.linalg.cross(x, y), arr(4, 2), arr(4, 2))
    gradcheck_op(lambda x, y: jitorch.linalg.cross(x, y), [arr(2, 3, dtype=np.float64), arr(1, 3, dtype=np.float64)])


@pytest.mark.parametrize("p", [2.0, 1.0, 0.0, 3.0, math.inf])
def test_cdist(p):
    run(lambda lib, x, y: lib.cdist(x, y, p=p), arr(5, 3), arr(4, 3, seed=1))
    run(lambda lib, x, y: lib.cdist(x, y, p=p), arr(2, 5, 3), arr(4, 3, seed=1), layout=("contiguous", "transposed"))
    if p != 0:
        gradcheck_op(lambda x, y: jitorch.cdist(x, y, p),
                     [arr(3, 2, dtype=np.float64), arr(2, 2, seed=1, dtype=np.float64)])


def test_cdist_matrix_product_path_and_zero_distance():
    x = arr(30, 4)
    run(lambda lib, a, b: lib.cdist(a, b), x, arr(27, 4, seed=1), atol=1e-4)
    run(lambda lib, a, b: lib.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist"), x[:3], x[:3].copy())
    error(lambda lib, a, b: lib.cdist(a, b), arr(3, 4), arr(3, 5))
    error(lambda lib, a, b: lib.cdist(a, b), np.ones((3, 4), np.int64), arr(3, 4), match="X1 got: Long")
    error(lambda lib, a, b: lib.cdist(a, b), arr(3, 4), np.ones((3, 4), bool), match="X2 got: Bool")
    error(lambda lib, a, b: lib.cdist(a, b, compute_mode="mm"), arr(3, 4), arr(3, 4), match="compute_mode")


# -- norms -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ord", [2, 1, 0, 3, 0.5, -1, math.inf, -math.inf])
def test_vector_norm(ord):
    x = arr(3, 4)
    x[1, 2] = 0.0
    run(lambda lib, t: lib.linalg.vector_norm(t, ord), x)
    run(lambda lib, t: lib.linalg.vector_norm(t, ord, dim=1, keepdim=True), x, layout="transposed")
    run(lambda lib, t: lib.linalg.vector_norm(t, ord, dim=(0,)), x)
    run(lambda lib, t: lib.linalg.vector_norm(t, ord, dtype=lib.float64), x)
    if ord not in (0, 0.5, -1, -math.inf):
        gradcheck_op(lambda t: jitorch.linalg.vector_norm(t, ord, 1), [arr(2, 3, dtype=np.float64)])


def test_norm_zero_vector_gradient_and_errors():
    run(lambda lib, t: lib.linalg.vector_norm(t), np.zeros((3,), np.float32))
    run(lambda lib, t: lib.linalg.vector_norm(t, 3), np.zeros((3,), np.float32))
    run(lambda lib, t: lib.norm(t, dim=1), np.zeros((2, 3), np.float32))
    run(lambda lib, t: lib.linalg.vector_norm(t), np.array(-2.0, np.float32))
    run(lambda lib, t: lib.linalg.vector_norm(t), np.zeros((0,), np.float32))
    error(lambda lib, t: lib.linalg.vector_norm(t), np.arange(3))
    error(lambda lib, t: lib.linalg.vector_norm(t, math.inf), np.zeros((0,), np.float32))


@pytest.mark.parametrize("ord", ["fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf])
def test_matrix_norm(ord):
    run(lambda lib, t: lib.linalg.matrix_norm(t, ord), arr(3, 4))
    run(lambda lib, t: lib.linalg.matrix_norm(t, ord, dim=(0, 2), keepdim=True), arr(3, 2, 4))
    run(lambda lib, t: lib.linalg.norm(t, ord), arr(4, 3), layout="transposed")
    gradcheck_op(lambda t: jitorch.linalg.matrix_norm(t, ord), [arr(2, 3, 4, dtype=np.float64)])


def test_linalg_norm_dispatch():
    x = arr(2, 3, 4)
    run(lambda lib, t: lib.linalg.norm(t), x)
    run(lambda lib, t: lib.linalg.norm(t, dim=1), x)
    run(lambda lib, t: lib.linalg.norm(t, 3, dim=(1,), keepdim=True), x)
    run(lambda lib, t: lib.linalg.norm(t, "fro", dim=(0, 2)), x)
    run(lambda lib, t: lib.linalg.norm(t, 1), arr(4))
    run(lambda lib, t: lib.norm(t, p=1, dim=0), x)
    run(lambda lib, t: t.norm(), x)
    run(lambda lib, t: lib.norm(t, "nuc"), arr(3, 3))
    error(lambda lib, t: lib.linalg.norm(t, 2), x)
    error(lambda lib, t: lib.linalg.matrix_norm(t), arr(3))
