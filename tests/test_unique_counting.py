"""``unique``/``unique_consecutive`` of whole tensors (ops/unique_counting.py) and ``embedding_bag(mode="max")``'s
bag maxima (ops/segment_max.py) against torch: values, dtypes, inverse and counts, gradients."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import assert_same, to_jitorch, to_torch


def _both(fn, array):
    jt, th = fn(jitorch, to_jitorch(array)), fn(torch, to_torch(array))
    jt, th = (jt, th) if isinstance(th, tuple) else ((jt,), (th,))
    assert len(jt) == len(th)
    for i, (a, b) in enumerate(zip(jt, th)):
        assert_same(a, b, what=f"output {i}")


def _unique(return_inverse, return_counts, sorted=True):
    return lambda lib, t: lib.unique(t, sorted=sorted, return_inverse=return_inverse, return_counts=return_counts)


INTEGER_INPUTS = {
    "int64": np.random.default_rng(0).integers(0, 1000, 5000),
    "int32_negative": np.random.default_rng(1).integers(-50, 50, (30, 40)).astype(np.int32),
    "uint8": np.random.default_rng(2).integers(0, 256, 700).astype(np.uint8),
    "int8": np.random.default_rng(3).integers(-128, 128, 300).astype(np.int8),
    "int16": np.random.default_rng(4).integers(-300, 300, (5, 7)).astype(np.int16),
    "bool": np.random.default_rng(5).random((4, 9)) < 0.3,
    "all_true": np.ones(5, bool),
    "wide_range": np.random.default_rng(6).integers(-2**62, 2**62, 100),  # too wide to count: sorted instead
    "extremes": np.array([2**63 - 1, -2**63, 0, 2**63 - 1]),
    "empty": np.zeros((0, 3), np.int64),
    "zero_dim": np.array(7, np.int64),
}


@pytest.mark.parametrize("name", list(INTEGER_INPUTS))
@pytest.mark.parametrize("flags", [(False, False), (True, False), (False, True), (True, True)])
def test_unique_of_integers_matches_torch(name, flags):
    _both(_unique(*flags), INTEGER_INPUTS[name])
    _both(_unique(*flags, sorted=False), INTEGER_INPUTS[name])


def test_unique_of_non_contiguous_and_float_inputs():
    x = np.random.default_rng(7).integers(-5, 20, (6, 8))
    _both(lambda lib, t: lib.unique(t.t(), return_inverse=True, return_counts=True), x)
    _both(lambda lib, t: lib.unique(t[:, ::3], return_inverse=True), x)
    floats = np.array([1.5, np.nan, -0.0, 0.0, 1.5, np.nan, -2.0], np.float32)
    _both(_unique(True, True), floats)
    _both(_unique(True, True), floats[::-1].copy())


@pytest.mark.parametrize("runs", ["long", "short"])
@pytest.mark.parametrize("flags", [(False, False), (True, False), (False, True), (True, True)])
def test_unique_consecutive_matches_torch(runs, flags):
    rng = np.random.default_rng(8)
    x = np.sort(rng.integers(0, 20, 2000)) if runs == "long" else rng.integers(0, 3, (40, 50))
    fn = lambda lib, t: lib.unique_consecutive(t, return_inverse=flags[0], return_counts=flags[1])  # noqa: E731
    _both(fn, x)
    _both(lambda lib, t: fn(lib, t.t()) if t.dim() == 2 else fn(lib, t[::2]), x)
    for special in (np.zeros((0, 2), np.int32), np.array(3.0, np.float32), rng.random(30) < 0.5,
                    np.array([1.0, np.nan, np.nan, 2.0], np.float32), rng.integers(0, 3, 50).astype(np.uint8)):
        _both(fn, special)


def _bag_case(lib, weight, ids, offsets, grad, **kw):
    w = lib.tensor(weight, requires_grad=True)
    out = lib.nn.functional.embedding_bag(lib.tensor(ids), w, lib.tensor(offsets) if offsets is not None else None,
                                          mode="max", **kw)
    out.backward(lib.tensor(grad))
    return out, w.grad


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["offsets", "empty_bags", "nan", "ties", "padding", "two_d", "last_offset"])
def test_embedding_bag_max_matches_torch(dtype, case):
    rng = np.random.default_rng(9)
    weight = rng.standard_normal((50, 6)).astype(dtype)
    ids = rng.integers(0, 50, 40)
    offsets = np.array([0, 3, 3, 10, 17, 17, 30, 40])  # empty bags in the middle and at the end
    kw = {}
    if case == "offsets":
        offsets = np.array([0, 5, 9, 20, 33])
    elif case == "nan":
        weight[[ids[0], ids[4], ids[11]], [0, 2, 5]] = np.nan  # a bag's first row, and later rows
        weight[ids[12], :] = np.nan
    elif case == "ties":
        weight = rng.integers(0, 3, (50, 6)).astype(dtype)
    elif case == "padding":
        kw["padding_idx"] = int(ids[3])
    elif case == "two_d":
        ids, offsets = ids.reshape(8, 5), None
    elif case == "last_offset":
        kw["include_last_offset"] = True
    bags = 8 if offsets is None else len(offsets) - (1 if case == "last_offset" else 0)
    grad = rng.standard_normal((bags, 6)).astype(dtype)
    (jo, jg), (to, tg) = (_bag_case(lib, weight, ids, offsets, grad, **kw) for lib in (jitorch, torch))
    assert_same(jo, to, what="output")
    assert_same(jg, tg, what="weight gradient")


@pytest.mark.parametrize("ids,offsets", [([2, 2, 2, 2], [0, 2]), ([], [0, 0])])
def test_embedding_bag_max_with_no_rows_left_gives_zeros_as_torch(ids, offsets):
    weight = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    got = jitorch.nn.functional.embedding_bag(jitorch.tensor(ids, dtype=jitorch.long), jitorch.tensor(weight),
                                              jitorch.tensor(offsets), mode="max", padding_idx=2)
    want = torch.nn.functional.embedding_bag(torch.tensor(ids, dtype=torch.long), torch.from_numpy(weight),
                                             torch.tensor(offsets), mode="max", padding_idx=2)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
