"""Which index kthvalue / topk / sort(stable) / median / mode report among tied values, against torch 2.13's CPU
kernels: several tie patterns (few levels, all equal, NaNs), float and integer dtypes, both ends of the dims, 0-d and
empty inputs, and topk's two algorithms (partial sort when ``k * 64 <= n``, else nth_element then sort)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import check_op

import jitorch
from jitorch.ops.sorting_ties import replay_kthvalue, replay_mode, replay_topk


def _pattern(name, shape, dtype):
    rng = np.random.default_rng(abs(hash((name, shape, dtype))) % 2**32)
    if name == "levels":
        a = rng.integers(0, 3, shape)
    elif name == "equal":
        a = np.full(shape, 2)
    elif name == "pairs":
        a = np.arange(int(np.prod(shape))).reshape(shape) // 2
    else:  # "nans": few levels with NaNs among them (floats only)
        a = rng.integers(0, 3, shape).astype(np.float64)
        a[rng.random(shape) < 0.25] = np.nan
    return np.asarray(a).astype(dtype)


PATTERNS = [("levels", "float32"), ("levels", "int64"), ("equal", "float64"), ("pairs", "int32"),
            ("nans", "float32"), ("levels", "uint8"), ("nans", "float64")]
SHAPES = [(7,), (40,), (3, 20), (2, 5, 30), (200,)]


@pytest.mark.parametrize("pattern,dtype", PATTERNS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dim", [0, -1])
def test_kthvalue_and_topk_indices_among_ties_as_torch(pattern, dtype, shape, dim):
    a = _pattern(pattern, shape, dtype)
    n = shape[dim]
    for k in sorted({1, 2, n // 2 or 1, n}):
        check_op(lambda x: jitorch.kthvalue(x, k, dim), lambda x: torch.kthvalue(x, k, dim), [a], grad=False)
        for largest in (True, False):
            check_op(lambda x: jitorch.topk(x, k, dim, largest), lambda x: torch.topk(x, k, dim, largest), [a],
                     grad=False)


@pytest.mark.parametrize("pattern,dtype", PATTERNS + [("levels", "bool")])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dim", [0, -1])
def test_mode_median_and_stable_sort_indices_among_ties_as_torch(pattern, dtype, shape, dim):
    a = _pattern(pattern, shape, dtype)
    check_op(lambda x: jitorch.mode(x, dim), lambda x: torch.mode(x, dim), [a], grad=False)
    for descending in (False, True):
        check_op(lambda x: jitorch.sort(x, dim=dim, descending=descending, stable=True),
                 lambda x: torch.sort(x, dim=dim, descending=descending, stable=True), [a], grad=False)
    if dtype != "bool":
        check_op(lambda x: jitorch.median(x, dim), lambda x: torch.median(x, dim), [a], grad=False)


def test_gradients_follow_the_tied_index_torch_picks():
    a = _pattern("levels", (3, 40), "float64")
    check_op(lambda x: jitorch.kthvalue(x, 5, 1).values, lambda x: torch.kthvalue(x, 5, 1).values, [a])
    check_op(lambda x: jitorch.topk(x, 3, 1).values, lambda x: torch.topk(x, 3, 1).values, [a])
    check_op(lambda x: jitorch.mode(x, 1).values, lambda x: torch.mode(x, 1).values, [a])


@pytest.mark.parametrize("dtype", ["float32", "int64"])
@pytest.mark.parametrize("fn", ["kthvalue", "topk", "mode", "median", "sort"])
def test_zero_dim_inputs_as_torch(dtype, fn):
    a = np.array(3, dtype=dtype)
    args = {"kthvalue": (1,), "topk": (1,)}.get(fn, ())
    check_op(lambda x: getattr(jitorch, fn)(x, *args), lambda x: getattr(torch, fn)(x, *args), [a], grad=False)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "int64", "bool", "float32"])
@pytest.mark.parametrize("fn", ["median", "nanmedian"])
def test_median_of_an_empty_tensor_as_torch(dtype, fn):
    a = np.zeros((0,), dtype=dtype)
    check_op(getattr(jitorch, fn), getattr(torch, fn), [a], grad=False)


@pytest.mark.parametrize("shape", [(0,), (3, 0)], ids=str)
def test_empty_slices_as_torch(shape):
    a = np.zeros(shape, dtype=np.float32)
    check_op(lambda x: jitorch.sort(x, stable=True), lambda x: torch.sort(x, stable=True), [a], grad=False)
    check_op(lambda x: jitorch.topk(x, 0), lambda x: torch.topk(x, 0), [a], grad=False)
    check_op(lambda x: jitorch.kthvalue(x, 1, 0), lambda x: torch.kthvalue(x, 1, 0), [a], grad=False)


def test_the_replays_are_torchs_algorithms_on_random_ties():
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 200))
        a = rng.integers(0, int(rng.integers(1, 5)), n).astype(np.float64)
        a[rng.random(n) < 0.1] = np.nan
        t, k = torch.from_numpy(a), int(rng.integers(1, n + 1))
        assert replay_kthvalue(a.tolist(), k) == torch.kthvalue(t, k).indices.item()
        assert replay_mode(a.tolist()) == torch.mode(t).indices.item()
        for largest in (True, False):
            assert replay_topk(a.tolist(), k, largest) == torch.topk(t, k, largest=largest).indices.tolist()


@pytest.mark.parametrize("pattern,dtype", [("random", "float32"), ("levels", "int64"), ("nans", "float64")])
@pytest.mark.parametrize("shape,dim", [((6, 10), -1), ((64, 8), 1), ((30, 5), 0), ((3, 200), 1)], ids=str)
def test_unsorted_topk_order_as_torch(pattern, dtype, shape, dim):
    # MoE routers (DeepSeek's) index experts by topk(..., sorted=False)'s order: nth_element's, not sorted
    a = (np.random.default_rng(3).standard_normal(shape).astype(dtype) if pattern == "random"
         else _pattern(pattern, shape, dtype))
    n = shape[dim]
    for k in sorted({1, 2, 3, n // 2 or 1, n}):
        for largest in (True, False):
            check_op(lambda x: jitorch.topk(x, k, dim, largest, sorted=False),
                     lambda x: torch.topk(x, k, dim, largest, sorted=False), [a], grad=pattern == "random")
