"""The ``scalar`` kernels of `codegen.llvm_indexed` (one element per index: an inner dim's ``index_select``,
``gather``/``scatter_add`` along the last dim, ``index_add_`` along it) against PyTorch: an index shared by every row
(checked once, in the first row of the call) and one per row, unit and other strides along the dim, int32 and
negative indices, a bad index anywhere (the first row's or a later one's), and the kernels over a row range that
does not start at row 0 (a thread's share)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import check_error, check_op, gradcheck_op, gradgradcheck_op
from jitorch.codegen.llvm_indexed import IndexedAlongDim, IndexedOutOfBounds
from jitorch.ops import native_indexed

RNG = np.random.default_rng(1)


def _taken(monkeypatch):
    calls = []
    run = native_indexed._run
    monkeypatch.setattr(native_indexed, "_run", lambda *a: calls.append(a[0]) or run(*a))
    return calls


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_index_select_of_an_inner_dim_matches_torch(monkeypatch, layout, index_dtype):
    calls = _taken(monkeypatch)
    x = RNG.standard_normal((40, 90)).astype(np.float32)
    index = RNG.integers(0, 90, 70).astype(index_dtype)
    # the gradient is index_add_ along the same dim: the scalar scatter-add with the shared index
    check_op(lambda a, i: a.index_select(1, i), lambda a, i: a.index_select(1, i), [x, index],
             layout=[layout, "contiguous"], atol=0, rtol=0, grad_atol=1e-5, grad_rtol=1e-5)
    assert calls.count("gather") >= 1 and calls.count("scatter_add") >= 1


def test_index_select_of_a_middle_dim_and_a_broadcast_source(monkeypatch):
    calls = _taken(monkeypatch)
    x = RNG.standard_normal((6, 50, 1)).astype(np.float64)
    index = RNG.integers(0, 50, 400)
    check_op(lambda a, i: a.expand(6, 50, 1).index_select(1, i), lambda a, i: a.expand(6, 50, 1).index_select(1, i),
             [x, index], atol=0, rtol=0, grad_atol=1e-12)
    x = RNG.standard_normal((1, 90)).astype(np.float32)
    check_op(lambda a, i: a.expand(30, 90).index_select(1, i), lambda a, i: a.expand(30, 90).index_select(1, i),
             [x, RNG.integers(0, 90, 100)], atol=0, rtol=0, grad_atol=1e-4, grad_rtol=1e-5)
    assert "gather" in calls


def test_index_select_errors_and_empty_results():
    x = RNG.standard_normal((40, 90)).astype(np.float32)
    bad = RNG.integers(0, 90, 70)
    bad[55] = 90
    # dim 1 has ATen's own kernel and message; the other dims say "index out of range in self"
    check_error(lambda a, i: a.index_select(1, i), lambda a, i: a.index_select(1, i), [x, bad],
                match="INDICES element is out of DATA bounds, id=90 axis_dim=90")
    bad[55] = -1  # index_select takes no negative index
    check_error(lambda a, i: a.index_select(1, i), lambda a, i: a.index_select(1, i), [x, bad], match="id=-1")
    x3 = RNG.standard_normal((4, 30, 90)).astype(np.float32)
    for d in (0, 2, -1):
        check_error(lambda a, i: a.index_select(d, i), lambda a, i: a.index_select(d, i), [x3, bad],
                    match="index out of range in self")
    check_error(lambda a, i: a.index_select(1, i), lambda a, i: a.index_select(1, i),
                [np.zeros((40, 0), np.float32), np.zeros(3, np.int64)], match="axis dim should be positive")
    check_op(lambda a, i: a.index_select(1, i), lambda a, i: a.index_select(1, i),
             [np.zeros((40, 90), np.float32), np.zeros(0, np.int64)], atol=0)


def test_gather_and_scatter_add_along_the_last_dim_with_a_row_per_index(monkeypatch):
    calls = _taken(monkeypatch)
    x = RNG.standard_normal((30, 80)).astype(np.float64)
    index = RNG.integers(0, 80, (30, 120))
    check_op(lambda a, i: a.gather(1, i), lambda a, i: a.gather(1, i), [x, index], layout=["sliced", "contiguous"],
             atol=0, rtol=0, grad_atol=1e-12)
    gradcheck_op(lambda a: jitorch.gather(a, 1, jitorch.tensor(index)), [x])
    bad = index.copy()
    bad[17, 3] = 80  # a later row's bad index: the rows before it are done, the error is torch's
    check_error(lambda a, i: a.gather(1, i), lambda a, i: a.gather(1, i), [x, bad], match="out of bounds")
    base = np.zeros((30, 80))
    check_error(lambda b, i, s: b.scatter_add(1, i, s), lambda b, i, s: b.scatter_add(1, i, s),
                [base, bad, RNG.standard_normal((30, 120))], match="out of bounds")
    assert calls.count("gather") >= 2


@pytest.mark.parametrize("kind", ["gather", "scatter_add"])
@pytest.mark.parametrize("wrap", [False, True])
@pytest.mark.parametrize("strides", ["unit", "reversed"])
def test_scalar_kernels_over_a_row_range_with_a_shared_index(kind, wrap, strides):
    src = RNG.standard_normal((9, 60, 1)).astype(np.float32)
    if strides == "reversed":
        src = src[:, ::-1]
    index = RNG.integers(-60 if wrap else 0, 60, (1, 45, 1)).astype(np.int32)
    idx3 = np.broadcast_to(index, (9, 45, 1))  # stride 0 along the rows: checked in a call's first row only
    fn = IndexedAlongDim(kind, "f32", "i32", "scalar", wrap)
    wrapped = np.where(idx3 < 0, idx3 + 60, idx3)
    if kind == "gather":
        out = np.full((9, 45, 1), np.nan, np.float32)
        fn._fn(3, 9, out.ctypes.data, src.ctypes.data, idx3.ctypes.data, 45, 1, 60,
               *(s // 4 for s in out.strides), *(s // 4 for s in src.strides), *(s // 4 for s in idx3.strides))
        expect = np.take_along_axis(src, wrapped, 1)
        np.testing.assert_array_equal(out[3:], expect[3:])
        assert np.isnan(out[:3]).all()  # rows before the range untouched
    else:
        values = RNG.standard_normal((9, 45, 1)).astype(np.float32)
        out = np.zeros((9, 60, 1), np.float32)[:, ::-1] if strides == "reversed" else np.zeros((9, 60, 1), np.float32)
        fn._fn(3, 9, out.ctypes.data, values.ctypes.data, idx3.ctypes.data, 45, 1, 60,
               *(s // 4 for s in out.strides), *(s // 4 for s in values.strides), *(s // 4 for s in idx3.strides))
        expect = np.zeros((9, 60, 1), np.float32)
        np.add.at(expect, (np.arange(9)[:, None, None], wrapped, 0), values)
        expect[:3] = 0
        np.testing.assert_array_equal(out, expect)  # the same additions in the same order
    bad = index.copy()
    bad[0, 30, 0] = 60
    bad3 = np.broadcast_to(bad, (9, 45, 1))
    target = np.zeros((9, 60, 1), np.float32)
    with pytest.raises(IndexedOutOfBounds) as err:
        if kind == "gather":
            fn(src, bad3)
        else:
            fn(np.ones((9, 45, 1), np.float32), bad3, target)
    assert err.value.position == 0  # found in the first row, before anything is written
    assert not target.any()


def test_index_add_along_the_last_dim_matches_torch(monkeypatch):
    calls = _taken(monkeypatch)
    base = RNG.standard_normal((50, 40)).astype(np.float32)
    source = RNG.standard_normal((50, 100)).astype(np.float32)
    index = RNG.integers(0, 40, 100)
    check_op(lambda b, i, s: b.index_add(1, i, s, alpha=2), lambda b, i, s: b.index_add(1, i, s, alpha=2),
             [base, index, source], layout=["contiguous", "contiguous", "transposed"], atol=1e-5, rtol=1e-5)
    assert "scatter_add" in calls
    t = jitorch.tensor(base)
    bad = torch.tensor(index)
    bad[70] = 40
    with pytest.raises((IndexError, RuntimeError)):
        torch.tensor(base).index_add_(1, bad, torch.tensor(source))
    with pytest.raises((IndexError, RuntimeError)):
        t.index_add_(1, jitorch.tensor(bad.numpy()), jitorch.tensor(source))
    np.testing.assert_array_equal(t.numpy(), base)  # a failed call leaves self as it was


def test_row_gradients_into_a_broadcast_zero_match_torch_and_differentiate_twice(monkeypatch):
    """The gradient of ``x[idx]`` and of an embedding accumulates into a broadcast zero (the row's copy writes it out
    once): values as torch's, repeated rows summed, and a second derivative through it."""
    calls = _taken(monkeypatch)
    weight = RNG.standard_normal((300, 16))
    index = RNG.integers(0, 300, (20, 30))
    index[0, :5] = 7  # repeats accumulate
    check_op(lambda w, i: jitorch.nn.functional.embedding(i, w), lambda w, i: torch.nn.functional.embedding(i, w),
             [weight.astype(np.float32), index], atol=0, grad_atol=1e-5, grad_rtol=1e-5)
    check_op(lambda w, i: w[i] * w[i], lambda w, i: w[i] * w[i], [weight, index], atol=1e-12, grad_atol=1e-12)
    assert "scatter_add" in calls
    small = jitorch.tensor(index[:3, :4] % 40)
    gradgradcheck_op(lambda w: jitorch.nn.functional.embedding(small, w) ** 2, [weight[:40]])
