"""The native head of small float32 top-k (``ops/native_topk.py``): the stable order's first k + 1 positions and the
rows whose head holds a tie (NaNs equal), then torch's replayed choice among ties: values and indices as torch's,
and as the sorting path's (the native one switched off)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.ops import native_topk


def _rows(shape, kind, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "normal":
        return rng.standard_normal(shape).astype(np.float32)
    a = rng.integers(-3, 3, shape).astype(np.float32)  # many ties
    if kind == "nan":
        a[rng.random(shape) < 0.2] = np.nan
        a[rng.random(shape) < 0.2] = -0.0
    return a


@pytest.mark.parametrize("shape", [(32, 32), (5, 70), (3, 4, 17), (9,)])
@pytest.mark.parametrize("kind", ["normal", "ties", "nan"])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_torch(shape, kind, largest):
    a = _rows(shape, kind)
    assert native_topk.topk_head(a, 4, largest) is not None
    for k in [k for k in (1, 3, 8, 15) if k <= shape[-1]]:
        got = jitorch.from_numpy(a).topk(k, largest=largest)
        want = torch.from_numpy(a).topk(k, largest=largest)
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
        assert got.values.numpy().tobytes() == want.values.numpy().tobytes()


def test_native_head_agrees_with_the_sort(monkeypatch):
    a = _rows((40, 33), "nan", seed=1)
    native = [jitorch.from_numpy(a).topk(k, largest=s).indices.numpy() for k in (1, 5, 15) for s in (True, False)]
    monkeypatch.setattr(native_topk, "MAX_HEAD", 0)
    assert native_topk.topk_head(a, 4, True) is None
    sorted_ = [jitorch.from_numpy(a).topk(k, largest=s).indices.numpy() for k in (1, 5, 15) for s in (True, False)]
    for got, want in zip(native, sorted_):
        np.testing.assert_array_equal(got, want)


def test_head_flags_tied_rows_only():
    a = np.array([[3.0, 1.0, 3.0, 0.0], [4.0, 3.0, 2.0, 1.0], [np.nan, 0.0, np.nan, 1.0]], np.float32)
    order, tied = native_topk.topk_head(a, 2, descending=True)
    assert order.tolist() == [[0, 2], [0, 1], [0, 2]] and tied.tolist() == [True, False, True]
    assert native_topk.topk_head(a[1:2], 3, descending=True)[1] is None


def test_topk_gradient_scatters_to_the_picked_positions():
    a = _rows((8, 12), "normal", seed=2)
    x, tx = jitorch.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    g = np.arange(24, dtype=np.float32).reshape(8, 3)
    x.topk(3).values.backward(jitorch.from_numpy(g))
    tx.topk(3).values.backward(torch.from_numpy(g))
    assert x.grad.numpy().tobytes() == tx.grad.numpy().tobytes()
