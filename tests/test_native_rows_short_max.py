"""Softmax and log_softmax rows whose lengths sit around the vector widths, through the generated row kernels
(`native_rows`): the row max is a ``maxnum`` reduction with ``nnan nsz`` (`llvm_body`), which LLVM vectorizes for
any row length; a row with a nan must still give nan, -inf elements 0 (softmax) or -inf (log_softmax), an all -inf
row nan, and +inf nan, as torch does. Forward and backward (random upstream gradients) against torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as JF
import torch.nn.functional as TF
from jitorch.ops import native_rows

from helpers import check_op

# Elements per test: a few thousand, so the rows split over threads with an odd remainder.
SIZE = 4096
LENGTHS = [1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 100, 127, 128, 129, 130]


def _special_rows(x):
    """Rows 0-4 of ``x`` given a nan, a -inf, all -inf, a +inf, and -0.0 beside 0.0 as their largest values."""
    x[0, -1] = np.nan
    x[1, 0] = -np.inf
    x[2, :] = -np.inf
    x[3, x.shape[1] // 2] = np.inf
    x[4, :] = -1.0
    x[4, 0] = -0.0
    x[4, -1] = 0.0
    return x


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_short_rows_match_torch_with_special_rows(fn, dtype, n):
    rows = -(-SIZE // n) + 3  # an odd remainder of rows
    x = _special_rows(np.random.default_rng(n).uniform(-8, 8, (rows, n)).astype(dtype))
    native_rows._kernels.clear()
    got = getattr(JF, fn)(jitorch.tensor(x), dim=-1).numpy()
    expected = getattr(TF, fn)(torch.tensor(x), dim=-1).numpy()
    assert any(k[0] == fn for k in native_rows._kernels), "the generated kernel did not run"
    tol = 2e-6 if dtype == "float32" else 1e-12
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("n", [1, 16, 31, 48, 64, 65, 130])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_short_rows_backward_matches_torch(fn, dtype, n):
    rows = -(-SIZE // n) + 1
    x = np.random.default_rng(n + 1).uniform(-8, 8, (rows, n)).astype(dtype)
    tol = 2e-6 if dtype == "float32" else 1e-12
    native_rows._kernels.clear()
    check_op(lambda a: getattr(JF, fn)(a, dim=-1), lambda a: getattr(TF, fn)(a, dim=-1), [x], atol=tol, rtol=tol)
    assert any(k[0] == f"{fn}_backward" for k in native_rows._kernels), "the backward kernel did not run"


def test_empty_rows_match_torch():
    for shape in [(0, 64), (4096, 0)]:
        x = np.zeros(shape, np.float32)
        for fn in ("softmax", "log_softmax"):
            assert getattr(JF, fn)(jitorch.tensor(x), dim=-1).shape == getattr(TF, fn)(torch.tensor(x), dim=-1).shape
