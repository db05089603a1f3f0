"""topk, kthvalue, median and nanmedian of long slices take an O(n) partition instead of a full sort: the same values
and indices as torch's, ties (at the cut, among the kept, at the median), NaNs, integer and boolean inputs included,
and the 2-norm's single einsum pass equals torch's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.ops import sorting as sorting_ops

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


LONG = [(3000,), (4, 2100), (2, 2, 2048)]  # slices long enough for the partition (`sorting._PARTITION_MIN`)


@pytest.mark.parametrize("shape", LONG)
@pytest.mark.parametrize("largest", [True, False])
def test_topk_of_long_slices_matches_torch(shape, largest):
    a = _data("normal", shape, np.random.default_rng(len(shape)))
    for k in (1, 3, 500):
        _same(jitorch.topk(jitorch.from_numpy(a), k, -1, largest=largest),
              torch.topk(torch.from_numpy(a), k, -1, largest=largest))


@pytest.mark.parametrize("shape", LONG)
@pytest.mark.parametrize("kind", ["normal", "few ints", "nan", "ties", "bool"])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_partition_equals_the_full_sort(monkeypatch, shape, kind, largest):
    # Past REPLAY_MAX torch's own tie order is not replayed: both paths give the stable order, and must agree.
    a = _data(kind, shape, np.random.default_rng(len(shape) + len(kind)))
    if a.dtype == bool:
        a = a.astype(np.uint8)
    for k in (1, 3, 500):
        fast = jitorch.topk(jitorch.from_numpy(a), k, -1, largest=largest)
        monkeypatch.setattr(sorting_ops, "_PARTITION_MIN", 1 << 40)
        full = jitorch.topk(jitorch.from_numpy(a), k, -1, largest=largest)
        monkeypatch.undo()
        np.testing.assert_array_equal(fast.values.numpy(), full.values.numpy())
        np.testing.assert_array_equal(fast.indices.numpy(), full.indices.numpy())


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", ["normal", "few ints", "nan", "ties"])
@pytest.mark.parametrize("fn", ["median", "nanmedian"])
def test_median_of_long_slices_matches_torch(shape, kind, fn):
    a = _data(kind, shape, np.random.default_rng(len(shape) * 7 + len(kind)))
    for dim in range(len(shape)):
        _same(getattr(jitorch, fn)(jitorch.from_numpy(a), dim), getattr(torch, fn)(torch.from_numpy(a), dim))
    np.testing.assert_array_equal(getattr(jitorch, fn)(jitorch.from_numpy(a)).numpy(),
                                  getattr(torch, fn)(torch.from_numpy(a)).numpy())


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", ["normal", "few ints", "nan", "ties", "bool"])
def test_kthvalue_of_long_slices_matches_torch(shape, kind):
    a = _data(kind, shape, np.random.default_rng(len(shape) * 5 + len(kind)))
    if a.dtype == bool:
        a = a.astype(np.uint8)
    if kind == "ties":
        a[a == 0] = -0.0  # equal to 0.0, kept in input order
    for dim in range(len(shape)):
        n = shape[dim]
        for k in (1, n // 3, n):
            _same(jitorch.kthvalue(jitorch.from_numpy(a), k, dim), torch.kthvalue(torch.from_numpy(a), k, dim))


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


@pytest.mark.parametrize("call", [lambda t: t.kthvalue(1), lambda t: t.median(), lambda t: t.median(0),
                                  lambda t: t.nanmedian(), lambda t: t.nanmedian(0)])
def test_bool_selection_is_refused_as_torch(call):
    from helpers import check_error

    check_error(call, call, [np.array([True, False, True])], match="not implemented for 'Bool'")
