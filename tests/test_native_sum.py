"""Eager float32 sums over trailing axes as a generated row reduction (`ops.native_sum`): torch's values (within
float32 summation rounding), NaN and inf, keepdim, whole-array sums split over threads, means, gradients, and the
cases it hands back (other axes, dtypes, layouts, small arrays) unchanged."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.ops.native_sum import MIN_SIZE, SPLIT, trailing_sum

_CASES = {"last": ((64, 300), -1), "last_two": ((6, 40, 70), (1, 2)), "all": ((3 * SPLIT + 17,), None),
          "all_2d": ((200, 300), None), "rows_of_3": ((4000, 3), -1), "keep_3d": ((5, 64, 100), -1)}


@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_sums_match_torch(case, keepdim, threads):
    shape, dim = _CASES[case]
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 10 + 3).astype(np.float32)
    before = jitorch.get_num_threads()
    jitorch.set_num_threads(threads)
    try:
        for fn in ("sum", "mean"):
            kwargs = {} if dim is None else {"dim": dim, "keepdim": keepdim}
            got = getattr(jitorch.tensor(x), fn)(**kwargs)
            want = getattr(torch.tensor(x), fn)(**kwargs)
            assert got.shape == tuple(want.shape) and got.dtype == jitorch.float32
            exact = np.sum(x.astype(np.float64), axis=None if dim is None else dim, keepdims=keepdim and
                           dim is not None) / (1 if fn == "sum" else x.size // max(got.numel(), 1))
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5, atol=1e-3)
            np.testing.assert_allclose(got.numpy(), exact, rtol=1e-5, atol=1e-3)  # at least torch's accuracy
    finally:
        jitorch.set_num_threads(before)


def test_nan_and_inf_propagate_per_row():
    x = np.ones((20, 700), np.float32)
    x[1, 5], x[2, 699], x[3, 0], x[4, :2] = np.nan, np.inf, -np.inf, (np.inf, -np.inf)
    got, want = jitorch.tensor(x).sum(-1).numpy(), torch.tensor(x).sum(-1).numpy()
    np.testing.assert_array_equal(got, want)
    flat = np.ones(3 * SPLIT, np.float32)
    flat[SPLIT + 1] = np.nan
    assert np.isnan(jitorch.tensor(flat).sum().item())


def test_a_long_sum_stays_accurate():
    x = np.full(10 ** 7, 0.1, np.float32)  # pairwise float32: about 1e-7 relative; a naive one would be 1e-1
    got = jitorch.tensor(x).sum().item()
    assert abs(got - 10 ** 7 * float(np.float32(0.1))) / 1e6 < 1e-6


def test_gradients_through_the_native_sum_match_torch():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 300)).astype(np.float32)
    g = rng.standard_normal(64).astype(np.float32)
    a, b = jitorch.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    a.mean(-1).backward(jitorch.tensor(g))
    b.mean(-1).backward(torch.tensor(g))
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-6)


def test_cases_it_hands_back():
    x = np.ones((64, 300), np.float32)
    assert trailing_sum(x, (0,), False) is None  # leading axes: the cascade sum
    assert trailing_sum(x.T, (1,), False) is None  # not C-contiguous
    assert trailing_sum(x.astype(np.float64), (1,), False) is None
    assert trailing_sum(x[:2], (1,), False) is None and 2 * 300 < MIN_SIZE
    assert trailing_sum(np.ones(SPLIT + 5, np.float32), (0,), False) is None  # one row too short to split
    np.testing.assert_array_equal(jitorch.tensor(x).sum(0).numpy(), torch.tensor(x).sum(0).numpy())
    np.testing.assert_array_equal(jitorch.tensor(x).T.sum(1).numpy(), torch.tensor(x).T.sum(1).numpy())
