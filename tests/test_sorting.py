"""Sorting, selection, set and counting ops (sort, topk, median, unique, cummax, searchsorted, ...) against PyTorch.

``run(fn, *inputs)`` calls ``fn(lib, *tensors)`` with ``lib`` = jitorch and torch on the same NumPy data and compares
values, dtypes, indices and (random-upstream) gradients through ``helpers.check_op``.
"""
import numpy as np
import pytest
import torch
from helpers import check_error, check_op, gradcheck_op, gradgradcheck_op

import jitorch


def run(fn, *inputs, **kw):
    return check_op(lambda *a: fn(jitorch, *a), lambda *a: fn(torch, *a), inputs, **kw)


def error(fn, *inputs, match=()):
    return check_error(lambda *a: fn(jitorch, *a), lambda *a: fn(torch, *a), inputs, match=match)


def distinct(shape, seed=0, dtype=np.float32):
    """Values without ties, so that every index is deterministic."""
    n = int(np.prod(shape))
    return (np.random.default_rng(seed).permutation(n).reshape(shape) - n / 2).astype(dtype) / 4


def with_ties(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).integers(0, 4, shape).astype(dtype)


NAN = float("nan")


# -- sort / argsort / msort ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "expanded"])
def test_sort_values_indices_grad(dim, descending, layout):
    run(lambda lib, x: lib.sort(x, dim=dim, descending=descending), distinct((4, 5)), layout=layout)


@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_with_ties_and_nan(descending):
    x = with_ties((3, 7))
    x[0, 2] = x[1, 5] = x[1, 0] = NAN
    run(lambda lib, t: lib.sort(t, dim=1, descending=descending, stable=True), x)
    run(lambda lib, t: t.argsort(dim=0, descending=descending, stable=True), x, grad=False)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_])
def test_sort_integer_and_bool(dtype):
    x = np.random.default_rng(1).integers(0, 5, (3, 6)).astype(dtype)
    run(lambda lib, t: lib.sort(t, stable=True, dim=-1, descending=True), x)
    run(lambda lib, t: lib.argsort(t, dim=0, stable=True), x)


def test_sort_edge_shapes():
    run(lambda lib, t: lib.sort(t), np.array(2.5, dtype=np.float32))
    run(lambda lib, t: lib.sort(t, 0), np.zeros((0, 3), np.float32))
    run(lambda lib, t: lib.msort(t), distinct((4, 3)))
    run(lambda lib, t: t.sort(0).values * 2, distinct((5,)))
    run(lambda lib, t: lib.argsort(t), np.array(1.0, dtype=np.float32), grad=False)


def test_sort_double_backward():
    gradcheck_op(lambda t: t.sort(1).values, [distinct((3, 4), dtype=np.float64)])
    gradgradcheck_op(lambda t: (t.sort(0, descending=True).values ** 2), [distinct((3, 2), dtype=np.float64)])


# -- topk / kthvalue -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [0, 1, 3, 5])
@pytest.mark.parametrize("largest", [True, False])
def test_topk(k, largest):
    run(lambda lib, t: lib.topk(t, k, dim=1, largest=largest), distinct((3, 5)), layout="transposed")
    run(lambda lib, t: t.topk(min(k, 3), 0, largest, True), distinct((3, 5), 2))


def test_topk_nan_and_errors():
    x = distinct((6,))
    x[2] = NAN
    run(lambda lib, t: lib.topk(t, 2), x)
    run(lambda lib, t: lib.topk(t, 2, largest=False), x)
    run(lambda lib, t: lib.topk(t, 1), np.array(3.0, np.float32))
    error(lambda lib, t: lib.topk(t, 7), distinct((6,)), match="k")
    error(lambda lib, t: t.topk(2), np.array([True, False, True]), match="bool")


@pytest.mark.parametrize("keepdim", [False, True])
def test_kthvalue(keepdim):
    run(lambda lib, t: lib.kthvalue(t, 2, 1, keepdim), distinct((3, 4)))
    run(lambda lib, t: t.kthvalue(3, dim=0, keepdim=keepdim), distinct((4, 2, 3)), layout="sliced")
    run(lambda lib, t: lib.kthvalue(t, 1), np.array(1.5, np.float32))
    error(lambda lib, t: lib.kthvalue(t, 5), distinct((4,)))


def test_topk_kthvalue_gradcheck():
    gradcheck_op(lambda t: t.topk(2, 1).values, [distinct((3, 4), dtype=np.float64)])
    gradcheck_op(lambda t: t.kthvalue(2, 0).values, [distinct((3, 4), dtype=np.float64)])


# -- median / nanmedian / mode ------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 4, 5])
def test_median_global_lower_and_tie_gradient(n):
    run(lambda lib, t: lib.median(t), distinct((n,)))
    run(lambda lib, t: t.median(), with_ties((2, n)))  # ties share the gradient evenly


def test_median_dim():
    run(lambda lib, t: lib.median(t, 1), distinct((3, 4)))
    run(lambda lib, t: t.median(dim=0, keepdim=True), distinct((5, 3)), layout="transposed")
    run(lambda lib, t: lib.median(t, 0), np.array(2.0, np.float32))
    error(lambda lib, t: lib.median(t, 0), np.zeros((0, 2), np.float32))


def test_median_with_nan():
    x = distinct((3, 5))
    x[1, 3] = x[1, 1] = NAN
    run(lambda lib, t: lib.median(t, 1), x)
    run(lambda lib, t: lib.median(t), x)
    run(lambda lib, t: lib.median(t), np.zeros((0,), np.float32))


def test_nanmedian():
    x = distinct((4, 5))
    x[0, 1] = x[2, :] = x[3, 4] = NAN
    x[3, 0] = NAN
    run(lambda lib, t: lib.nanmedian(t, 1), x)
    run(lambda lib, t: t.nanmedian(), x)
    run(lambda lib, t: lib.nanmedian(t, 0, keepdim=True), distinct((3, 2)))


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_mode(dtype):
    x = np.random.default_rng(3).integers(0, 4, (4, 9)).astype(dtype)
    run(lambda lib, t: lib.mode(t, 1), x)
    run(lambda lib, t: t.mode(0, keepdim=True), x)
    run(lambda lib, t: lib.mode(t), np.array([[1.0, 2, 2, 1]], np.float32))
    run(lambda lib, t: lib.mode(t), np.array(4.0, np.float32))


def test_median_mode_gradcheck():
    gradcheck_op(lambda t: t.median(1).values, [distinct((3, 4), dtype=np.float64)])
    gradcheck_op(lambda t: t.median(), [distinct((5,), dtype=np.float64)])
    gradcheck_op(lambda t: t.nanmedian(0).values, [distinct((3, 4), dtype=np.float64)])
    gradcheck_op(lambda t: t.mode(1).values, [distinct((2, 4), dtype=np.float64)])


# -- cummax / cummin / logcumsumexp -------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_cumulative_extremes(op):
    x = with_ties((3, 6))
    run(lambda lib, t: getattr(lib, op)(t, 1), x)
    run(lambda lib, t: getattr(t, op)(0), x, layout="transposed")
    x[1, 2] = x[1, 4] = NAN
    run(lambda lib, t: getattr(lib, op)(t, 1), x)
    run(lambda lib, t: getattr(lib, op)(t, 0), np.array([3, 1, 2, 1, 5]))
    run(lambda lib, t: getattr(lib, op)(t, 0), np.array(1.0, np.float32))
    gradcheck_op(lambda t: getattr(t, op)(1).values, [distinct((2, 5), dtype=np.float64)])


def test_logcumsumexp():
    x = distinct((3, 6)) * 4
    x[0, 0] = -1000.0  # a running max that changes: a naive max-shift underflows to -inf
    run(lambda lib, t: lib.logcumsumexp(t, 1), x, atol=1e-5)
    run(lambda lib, t: t.logcumsumexp(0), x, layout="sliced", atol=1e-5)
    run(lambda lib, t: lib.logcumsumexp(t, 0), np.array(0.5, np.float32))
    run(lambda lib, t: lib.logcumsumexp(t, 0), np.zeros((0,), np.float32))
    gradcheck_op(lambda t: t.logcumsumexp(1), [distinct((2, 4), dtype=np.float64)])
    gradgradcheck_op(lambda t: t.logcumsumexp(0), [distinct((4,), dtype=np.float64)])
    error(lambda lib, t: lib.logcumsumexp(t, 0), np.arange(3))


# -- unique -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("return_inverse", [False, True])
@pytest.mark.parametrize("return_counts", [False, True])
def test_unique(return_inverse, return_counts):
    x = np.random.default_rng(4).integers(0, 5, (3, 4))
    run(lambda lib, t: lib.unique(t, return_inverse=return_inverse, return_counts=return_counts), x)
    run(lambda lib, t: t.unique(sorted=True, return_inverse=return_inverse, return_counts=return_counts),
        with_ties((7,)), grad=False)
    rows = np.array([[1, 2], [0, 5], [1, 2], [0, 1]])
    run(lambda lib, t: lib.unique(t, return_inverse=return_inverse, return_counts=return_counts, dim=0), rows)
    run(lambda lib, t: lib.unique(t, return_inverse=return_inverse, return_counts=return_counts, dim=1), rows.T)


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_unique_consecutive(dim):
    x = np.array([[1, 1, 2, 2, 3, 1, 1], [1, 1, 2, 5, 3, 1, 1]])
    run(lambda lib, t: lib.unique_consecutive(t, return_inverse=True, return_counts=True, dim=dim), x)
    run(lambda lib, t: t.unique_consecutive(), np.array([0.5, 0.5, 1.0, 0.5], np.float32), grad=False)
    run(lambda lib, t: lib.unique(t), np.zeros((0,), np.int64))


# -- searchsorted / bucketize / histc / bincount -----------------------------------------------------------------
@pytest.mark.parametrize("right", [False, True])
def test_searchsorted(right):
    seq = np.array([1.0, 2.0, 2.0, 4.0, 7.0], np.float32)
    values = np.array([[0.0, 2.0, 3.0], [7.0, 8.0, 2.0]], np.float32)
    run(lambda lib, s, v: lib.searchsorted(s, v, right=right), seq, values, grad=False)
    run(lambda lib, s, v: lib.searchsorted(s, v, side="right" if right else "left", out_int32=True), seq, values,
        grad=False)
    batched = np.sort(distinct((2, 5)), axis=1)
    run(lambda lib, s, v: lib.searchsorted(s, v, right=right), batched, values, grad=False)
    run(lambda lib, s: lib.searchsorted(s, 2.0, right=right), seq, grad=False)
    run(lambda lib, s, v: lib.bucketize(v, s, right=right), seq, values, grad=False)
    run(lambda lib, s, v: lib.bucketize(v, s, out_int32=True), seq, np.array(3.0, np.float32), grad=False)


def test_searchsorted_sorter_and_errors():
    seq = np.array([4.0, 1.0, 7.0, 2.0], np.float32)
    sorter = np.argsort(seq)
    values = np.array([0.0, 3.0, 5.0], np.float32)
    run(lambda lib, s, o, v: lib.searchsorted(s, v, sorter=o), seq, sorter, values, grad=False)
    error(lambda lib, s, v: lib.searchsorted(s, v), distinct((2, 3)), distinct((3, 3)), match="boundaries")
    error(lambda lib, s, v: lib.searchsorted(s, v, side="middle"), seq, values)


def test_histc():
    x = np.random.default_rng(5).uniform(-2, 2, (50,)).astype(np.float32)
    run(lambda lib, t: lib.histc(t, bins=10), x, grad=False)
    run(lambda lib, t: t.histc(4, min=-1, max=1), x, grad=False)
    run(lambda lib, t: lib.histc(t, bins=3), np.array([0.0, 1.0, 1.0, 2.0]), grad=False)
    run(lambda lib, t: lib.histc(t, bins=5), np.full((3,), 2.0, np.float32), grad=False)
    error(lambda lib, t: lib.histc(t), np.arange(3))
    error(lambda lib, t: lib.histc(t, 4, min=2, max=1), x)


def test_bincount():
    x = np.array([0, 3, 1, 3, 3, 6])
    run(lambda lib, t: lib.bincount(t), x)
    run(lambda lib, t: t.bincount(minlength=10), x)
    run(lambda lib, t, w: lib.bincount(t, w), x, np.linspace(0, 1, 6).astype(np.float32), grad=False)
    run(lambda lib, t, w: lib.bincount(t, weights=w), x, np.arange(6), grad=False)
    for half in ("float16", "bfloat16"):  # torch sums half weights into double
        run(lambda lib, t, w: lib.bincount(t, weights=w.to(getattr(lib, half))), x, np.arange(6.0), grad=False)
    run(lambda lib, t: lib.bincount(t), np.zeros((0,), np.int64))
    error(lambda lib, t: lib.bincount(t), np.array([1, -1]))
    error(lambda lib, t: lib.bincount(t), np.ones((2, 2), np.int64))
    error(lambda lib, t: lib.bincount(t), np.ones((2,), np.float32))


def test_complex_sort_is_an_error():
    error(lambda lib, t: lib.sort(t), np.array([1 + 1j, 2]))
