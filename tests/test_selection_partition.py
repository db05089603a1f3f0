"""topk, median and nanmedian of long slices take an O(n) partition instead of a full sort: the same values and
indices as torch's, ties (at the cut, among the kept, at the median), NaNs, integer and boolean inputs included, and
the 2-norm's single einsum pass equals torch's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

SHAPES = [(1000,), (50, 140), (3, 5, 96)]


def _data(kind, shape, rng):
    if kind == "normal":
        return rng.standard_normal(shape).astype(np.float32)
    if kind == "few ints":
        return rng.integers(0, 20, shape).astype(np.int64)
    if kind == "nan":
        a = rng.standard_normal(shape).astype(np.float32)
        a[rng.random(shape) < 0.05] = np.nan
        return a
    if kind == "ties":
        return rng.integers(0, 3, shape).astype(np.float64)
    return rng.random(shape) < 0.5


def _same(got, want):
    (gv, gi), (wv, wi) = got, want
    np.testing.assert_array_equal(gv.numpy(), wv.numpy())
    np.testing.assert_array_equal(gi.numpy(), wi.numpy())


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", ["normal", "few ints", "nan", "ties", "bool"])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_of_long_slices_matches_torch(shape, kind, largest):
    rng = np.random.default_rng(len(shape) + len(kind))
    a = _data(kind, shape, rng)
    for dim in range(len(shape)):
        for k in (1, 3, shape[dim] // 5):
            if kind == "bool":
                a_t = torch.from_numpy(a.astype(np.uint8))  # torch has no bool topk: compare on bytes
                want = torch.topk(a_t, k, dim, largest=largest)
                got = jitorch.topk(jitorch.from_numpy(a.astype(np.uint8)), k, dim, largest=largest)
            else:
                want = torch.topk(torch.from_numpy(a), k, dim, largest=largest)
                got = jitorch.topk(jitorch.from_numpy(a), k, dim, largest=largest)
            _same(got, want)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", ["normal", "few ints", "nan", "ties"])
@pytest.mark.parametrize("fn", ["median", "nanmedian"])
def test_median_of_long_slices_matches_torch(shape, kind, fn):
    a = _data(kind, shape, np.random.default_rng(len(shape) * 7 + len(kind)))
    for dim in range(len(shape)):
        _same(getattr(jitorch, fn)(jitorch.from_numpy(a), dim), getattr(torch, fn)(torch.from_numpy(a), dim))
    np.testing.assert_array_equal(getattr(jitorch, fn)(jitorch.from_numpy(a)).numpy(),
                                  getattr(torch, fn)(torch.from_numpy(a)).numpy())


@pytest.mark.parametrize("shape", [(1000, 300), (4, 5, 6), (7,)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_two_norm_matches_torch(shape, dtype):
    x = np.random.default_rng(3).standard_normal(shape).astype(dtype)
    dims = [None] + [(d,) for d in range(len(shape))] + ([(0, len(shape) - 1)] if len(shape) > 1 else [])
    for dim in dims:
        for keepdim in (False, True):
            want = torch.linalg.vector_norm(torch.from_numpy(x), 2, dim=dim, keepdim=keepdim)
            got = jitorch.linalg.vector_norm(jitorch.from_numpy(x), 2, dim=dim, keepdim=keepdim)
            assert tuple(got.shape) == tuple(want.shape) and got.dtype is getattr(jitorch, np.dtype(dtype).name)
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5 if dtype == np.float32 else 1e-12)
