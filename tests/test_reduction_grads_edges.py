"""Reduction gradients at edges against PyTorch: NaN results that still route a gradient (quantile, max/min over
everything), dtype= keeping the input's gradient dtype, 0-d and in-place scans."""
import numpy as np
import pytest
import torch
from helpers import check_op

import jitorch

NAN = float("nan")


def run(fn, *inputs, **kw):
    return check_op(lambda *a: fn(jitorch, *a), lambda *a: fn(torch, *a), inputs, **kw)


def with_nans():
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    x[0, 1] = x[2, 3] = x[2, 0] = NAN
    x[3] = NAN  # an all-NaN row
    return x


Q = np.array([0.1, 0.5, 0.77], np.float32)


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("fn", ["quantile", "nanquantile"])
def test_quantile_nan_rows_route_the_gradient_to_a_nan(fn, interpolation):
    # torch gathers a NaN for a NaN result, so that element (not none) receives the gradient; q's gradient stays finite
    run(lambda lib, t, q: getattr(lib, fn)(t, q, dim=1, interpolation=interpolation), with_nans(), Q)
    run(lambda lib, t: getattr(lib, fn)(t, 0.25, dim=0, keepdim=True, interpolation=interpolation), with_nans())


def test_quantile_zero_dim_q_adds_no_dim():
    run(lambda lib, t, q: lib.quantile(t, q, dim=1), with_nans()[:3], np.array(0.25, np.float32))
    run(lambda lib, t, q: lib.nanquantile(t, q), with_nans(), np.array(0.6, np.float32))


def test_quantile_of_empty_input_is_a_runtime_error():
    run(lambda lib, t: lib.quantile(t, 0.5), np.zeros((0,), np.float32))


@pytest.mark.parametrize("fn", ["max", "min"])
def test_max_min_of_everything_split_the_gradient_over_nans(fn):
    run(lambda lib, t: getattr(lib, fn)(t), with_nans())
    run(lambda lib, t: getattr(t, fn)(), np.array([[1.0, NAN, 3.0], [NAN, 2.0, 3.0]], np.float32))
    ties = np.random.default_rng(1).integers(0, 3, (3, 5)).astype(np.float32)
    run(lambda lib, t: getattr(lib, fn)(t), ties, layout="transposed")


# -- dtype= and in-place scans ------------------------------------------------------------------------------------
X = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
X[0, 1] = X[2, 2] = 0.0  # zeros take prod's and cumprod's other backward path


@pytest.mark.parametrize("fn", ["prod", "cumsum", "cumprod"])
def test_dtype_argument_keeps_the_gradient_in_the_input_dtype(fn):
    run(lambda lib, t: getattr(lib, fn)(t, 1, dtype=lib.float64), X)
    run(lambda lib, t: getattr(t, fn)(0, dtype=lib.float16), X, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("fn", ["cumsum", "cumprod"])
def test_scans_of_zero_dim_inputs(fn):
    run(lambda lib, t: getattr(lib, fn)(t, 0), np.array(2.5, np.float32))
    run(lambda lib, t: getattr(t, fn)(-1, dtype=lib.float64), np.array(2.5, np.float32))


@pytest.mark.parametrize("fn", ["cumsum_", "cumprod_"])
def test_in_place_scans_backward(fn):
    run(lambda lib, t: getattr(t.clone(), fn)(1), X)
    run(lambda lib, t: getattr(t.clone(), fn)(0, dtype=lib.float32), X)


# -- sum's backward: a filled gradient for row-major inputs, torch's expanded one elsewhere ----------------------------
@pytest.mark.parametrize("dims,keepdim", [(None, False), ((1,), False), ((0, 2), False), ((1,), True), ((), False)])
def test_sum_backward_of_leaves_and_rows(dims, keepdim):
    xa = np.random.default_rng(7).standard_normal((2, 3, 4)).astype(np.float32)
    seen = []
    for lib in (torch, jitorch):
        x, w = lib.tensor(xa, requires_grad=True), lib.ones(5, 4, requires_grad=True)
        y = lib.nn.functional.linear(x, w)  # a row's output, then the leaf itself
        outs = [x.sum() if dims is None else x.sum(dims, keepdim=keepdim), y.sum(1) if keepdim else y.sum()]
        upstream = [lib.tensor(np.arange(float(o.numel())).reshape(o.shape).astype(np.float32)) for o in outs]
        lib.autograd.backward(outs, upstream)
        x.grad.add_(1)  # the stored .grad is the leaf's own, writable
        seen.append((x.grad.numpy().copy(), x.grad.stride(), w.grad.numpy().copy(), w.grad.stride()))
    (tx, tx_stride, tw, tw_stride), (jx, jx_stride, jw, jw_stride) = seen
    assert (jx_stride, jw_stride) == (tx_stride, tw_stride)
    np.testing.assert_array_equal(jx, tx)  # sums of upstream values: exact
    # a BLAS product of values near 30: its rounding is the library's
    np.testing.assert_allclose(jw, tw, rtol=1e-6, atol=1e-5)


def test_sum_backward_gradient_shared_by_two_leaves_and_a_float64_sum():
    seen = []
    for lib in (torch, jitorch):
        a, b = lib.ones(2, 3, requires_grad=True), lib.ones(3, requires_grad=True)
        (a.sum(0, dtype=lib.float64).sum() * 2 + b.sum()).backward()
        a.grad.mul_(3)
        seen.append((a.grad.tolist(), a.grad.dtype == lib.float32, b.grad.tolist()))
    assert seen[1] == seen[0]
