"""Two-operand einsums that are batched products run as one ``matmul`` (``ops/einsum_matmul.py``): torch's values,
dtypes, gradients and contiguous strides for attention-style, permuted-output, transposed-operand, multi-label and
empty contractions; the equations it declines (diagonals, one-sided sums, thin products) keep NumPy's einsum."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.ops import einsum_matmul
from helpers import check_op

CASES = [
    ("bhqd,bhkd->bhqk", (2, 3, 8, 5), (2, 3, 7, 5)),
    ("bhqk,bhkd->bhqd", (2, 3, 8, 7), (2, 3, 7, 5)),
    ("bqd,bkd->bkq", (4, 6, 5), (4, 9, 5)),
    ("ij,jk->ki", (6, 5), (5, 7)),
    ("abcd,dcef->abef", (2, 5, 3, 4), (4, 3, 6, 5)),
    ("bij,jk->bik", (3, 6, 5), (5, 7)),
    ("ijb,kjb->bik", (6, 5, 3), (7, 5, 3)),
    ("qd,kd->qk", (9, 0), (8, 0)),
    ("bqd,bkd->bqk", (0, 5, 4), (0, 6, 4)),
    ("ij,kj->ik", (6, 1), (5, 1)),  # an outer product: one summed label of size 1
]


@pytest.mark.parametrize("equation,sa,sb", CASES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_batched_product_einsums_match_torch(equation, sa, sb, layout):
    rng = np.random.default_rng(len(equation))
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    assert einsum_matmul.einsum_as_matmul(np, equation, a, b) is not None
    got, want = check_op(lambda x, y: jitorch.einsum(equation, x, y), lambda x, y: torch.einsum(equation, x, y),
                         [a, b], layout=layout, atol=1e-5, rtol=1e-5)
    assert got.is_contiguous() and tuple(got.stride()) == tuple(want.contiguous().stride())


@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_other_float_dtypes(dtype):
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((3, 6, 5)) + (1j * rng.standard_normal((3, 6, 5)) if dtype is np.complex64 else 0))
    b = (rng.standard_normal((3, 7, 5)) + (1j * rng.standard_normal((3, 7, 5)) if dtype is np.complex64 else 0))
    check_op(lambda x, y: jitorch.einsum("bqd,bkd->bqk", x, y), lambda x, y: torch.einsum("bqd,bkd->bqk", x, y),
             [a.astype(dtype), b.astype(dtype)], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("equation,sa,sb", [
    ("ii,ij->ij", (5, 5), (5, 6)),     # a diagonal
    ("ijk,jl->il", (5, 4, 3), (4, 6)),  # k summed within one operand
    ("bi,bi->b", (6, 9), (6, 9)),      # a batched dot: thin
    ("ij,ij->ij", (6, 9), (6, 9)),     # elementwise
])
def test_declined_equations_still_match_torch(equation, sa, sb):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    assert einsum_matmul.einsum_as_matmul(np, equation, a, b) is None
    check_op(lambda x, y: jitorch.einsum(equation, x, y), lambda x, y: torch.einsum(equation, x, y), [a, b],
             atol=1e-5, rtol=1e-5)


def test_half_inputs_keep_their_path():
    a = np.random.default_rng(3).standard_normal((2, 8, 4)).astype(np.float16)
    got = jitorch.einsum("bqd,bkd->bqk", jitorch.from_numpy(a), jitorch.from_numpy(a))
    want = torch.einsum("bqd,bkd->bqk", torch.from_numpy(a).float(), torch.from_numpy(a).float()).half()
    assert got.dtype == jitorch.float16
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), atol=1e-2, rtol=1e-2)
