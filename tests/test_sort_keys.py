"""Sort and top-k of float32/float16/bfloat16/int32 inputs of at least ``KEYED_MIN_SIZE`` elements sort unique
64-bit keys (``ops/sort_keys.py``): the same values, indices, dtypes and strides as torch's stable sort and topk
(ties, NaNs, signed zeros, infinities, every dim, descending, non-contiguous inputs), gradients included."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.ops import sort_keys
from helpers import check_op, np_dtype

DTYPES = ["float32", "float16", "bfloat16", "int32"]


def _data(kind, dtype, shape, rng):
    if dtype == "int32":
        span = 4 if kind == "ties" else 2 ** 31 - 1
        return rng.integers(-span, span, shape).astype(np.int32)
    a = rng.standard_normal(shape)
    if kind == "ties":
        a = np.round(a * 2)
    a = a.astype(np_dtype(dtype))
    if kind == "special":
        flat = a.reshape(-1)
        specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32).astype(a.dtype)
        flat[rng.integers(0, flat.size, flat.size // 10)] = specials[rng.integers(0, 6, flat.size // 10)]
    return a


def _same(got, want):
    for g, w in zip(got, want):
        assert str(g.dtype).split(".")[-1] == str(w.dtype).split(".")[-1]
        assert tuple(g.stride()) == tuple(w.stride())
        np.testing.assert_array_equal(g.float().numpy() if g.is_floating_point() else g.numpy(),
                                      w.float().numpy() if w.is_floating_point() else w.numpy())


def _pair(a):
    if a.dtype.name == "bfloat16":
        fresh = torch.empty(a.shape, dtype=torch.bfloat16)  # (an empty from_numpy keeps NumPy's odd strides)
        return jitorch.from_numpy(a.copy()), fresh.copy_(torch.from_numpy(a.astype(np.float32)))
    return jitorch.from_numpy(a.copy()), torch.from_numpy(a.copy())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["normal", "ties", "special"])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_matches_torch(dtype, kind, dim, descending):
    a = _data(kind, dtype, (70, 90), np.random.default_rng(len(kind) + dim))
    assert sort_keys.keyed(a, dim)
    x, t = _pair(a)
    _same(jitorch.sort(x, dim=dim, descending=descending, stable=True),
          torch.sort(t, dim=dim, descending=descending, stable=True))
    _same([jitorch.argsort(x, dim=dim, descending=descending, stable=True)],
          [torch.argsort(t, dim=dim, descending=descending, stable=True)])


@pytest.mark.parametrize("descending", [False, True])
def test_unstable_sort_without_ties_matches_torch(descending):
    a = np.random.default_rng(1).permutation(200 * 60).astype(np.float32).reshape(200, 60)
    x, t = _pair(a)
    for dim in (0, 1):
        _same(x.sort(dim, descending), t.sort(dim, descending))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["normal", "ties", "special"])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_torch(dtype, kind, largest):
    a = _data(kind, dtype, (60, 400), np.random.default_rng(len(kind)))
    x, t = _pair(a)
    for dim in (0, 1):
        for k in (1, 2, 10, 14):
            _same(x.topk(k, dim, largest), t.topk(k, dim, largest))


def test_topk_bound_with_sorted_and_constant_rows():
    # Sorted rows put every candidate in the last chunks; constant rows tie everything (the replayed tie order).
    a = np.concatenate([np.tile(np.arange(500, dtype=np.float32), (6, 1)), np.full((6, 500), 2.0, np.float32),
                        np.tile(np.arange(500, 0, -1, dtype=np.float32), (6, 1))])
    x, t = _pair(a)
    for largest in (True, False):
        for k in (1, 5, 60):
            _same(x.topk(k, 1, largest), t.topk(k, 1, largest))


@pytest.mark.parametrize("layout", ["transposed", "sliced"])
def test_non_contiguous_sort_and_topk_with_gradients(layout):
    a = np.random.default_rng(2).standard_normal((80, 100)).astype(np.float32)
    check_op(lambda v: v.sort(dim=0, stable=True), lambda v: v.sort(dim=0, stable=True), [a], layout=layout)
    check_op(lambda v: v.sort(1, descending=True), lambda v: v.sort(1, descending=True), [a], layout=layout)
    check_op(lambda v: v.topk(7, 1), lambda v: v.topk(7, 1), [a], layout=layout)
    check_op(lambda v: v.topk(3, 0, largest=False), lambda v: v.topk(3, 0, largest=False), [a], layout=layout)


def test_keyed_paths_equal_numpys_stable_argsort(monkeypatch):
    a = _data("special", "float32", (64, 100), np.random.default_rng(3))
    x = jitorch.from_numpy(a)
    keyed = [x.sort(d, descending=s).indices.numpy() for d in (0, 1) for s in (False, True)]
    heads = [x.topk(9, d, largest=s).indices.numpy() for d in (0, 1) for s in (False, True)]
    monkeypatch.setattr(sort_keys, "KEYED_MIN_SIZE", 1 << 60)
    assert not sort_keys.keyed(a, 0)
    for got, want in zip(keyed + heads, [x.sort(d, descending=s).indices.numpy() for d in (0, 1) for s in (0, 1)]
                         + [x.topk(9, d, largest=s).indices.numpy() for d in (0, 1) for s in (0, 1)]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", [(), (0,), (5000, 0), (0, 5000)])
def test_empty_and_zero_d(shape):
    a = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    check_op(lambda v: v.sort(-1), lambda v: v.sort(-1), [a])
    if a.ndim and a.shape[-1]:
        check_op(lambda v: v.topk(1, -1), lambda v: v.topk(1, -1), [a])


def test_short_slices_of_large_inputs():
    a = _data("ties", "float32", (9000, 8), np.random.default_rng(5))
    assert sort_keys.keyed(a, 1) and not sort_keys.keyed(a[:600], 1)
    x, t = _pair(a)
    for dim in (0, 1):
        _same(jitorch.sort(x, dim=dim, stable=True), torch.sort(t, dim=dim, stable=True))
        _same(x.topk(1, dim), t.topk(1, dim))


@pytest.mark.parametrize("shape", [(10,), (3, 7), (2, 0)])
def test_small_bfloat16_with_nans(shape):
    # NumPy's own sort misplaces ml_dtypes' NaNs: bfloat16 slices take the keys at every size.
    a = _data("special", "bfloat16", shape, np.random.default_rng(6))
    a.reshape(-1)[::3] = np.nan
    x, t = _pair(a)
    for descending in (False, True):
        _same(jitorch.sort(x, dim=-1, descending=descending, stable=True),
              torch.sort(t, dim=-1, descending=descending, stable=True))
    if a.shape[-1] >= 3:
        _same(x.topk(3), t.topk(3))
        _same(x.kthvalue(2), t.kthvalue(2))
