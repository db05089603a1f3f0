"""The eager CPU float32 fast paths (one generated kernel where NumPy took several passes or a slow loop) give torch's
answer: piecewise activations with their scalar parameters written in (`native_eager.pointwise_constants`), the
branch-free ``where``/``masked_fill`` (`native_select`), ``clamp`` with Scalar bounds, ``sign`` and ``nan_to_num``.

Sizes are at least a few thousand elements so the native paths run (they start at 128-256); the special values
(NaN, +-inf, +-0.0, the bounds themselves) sit inside those arrays. Values are compared bit for bit, sign of zero
included, and gradients with a random upstream gradient. Other dtypes and layouts, which keep the NumPy code, are
checked on the same values too."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import check_op, make_array

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 6.0, 0.5, -0.5, 0.1, -3.0, 3.0, 2.0, -2.0]


def _values(shape=(64, 96), seed=0):
    x = make_array(shape, "float32", np.random.default_rng(seed), -8.0, 8.0)
    x.flat[:len(SPECIAL)] = SPECIAL
    return x


def _bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    np.testing.assert_array_equal(a, b)
    if a.dtype.kind == "f":  # the sign of zeros (a NaN's sign bit is no value torch promises)
        a, b = np.where(np.isnan(a), 0, a), np.where(np.isnan(b), 0, b)
    np.testing.assert_array_equal(np.signbit(a), np.signbit(b), err_msg="sign of zero")


def _both(fn, x, layout="contiguous"):
    out = []
    for lib in (jitorch, torch):
        t = lib.from_numpy(x.copy())
        if layout == "transposed":
            t = lib.from_numpy(np.ascontiguousarray(x.T)).t()
        out.append(fn(lib, t))
    return out[0].numpy(), out[1].numpy()


PIECEWISE = {
    "leaky_relu": lambda lib, t: lib.nn.functional.leaky_relu(t, 0.2),
    "leaky_relu_default": lambda lib, t: lib.nn.functional.leaky_relu(t),
    "hardtanh": lambda lib, t: lib.nn.functional.hardtanh(t, -1.5, 2.0),
    "relu6": lambda lib, t: lib.nn.functional.relu6(t),
    "softshrink": lambda lib, t: lib.nn.functional.softshrink(t, 0.5),
    "hardshrink": lambda lib, t: lib.nn.functional.hardshrink(t, 0.5),
    "threshold": lambda lib, t: lib.nn.functional.threshold(t, 0.1, -20.0),
}


@pytest.mark.parametrize("name", sorted(PIECEWISE))
def test_piecewise_activation_rows_match_torch_with_gradients(name):
    fn = PIECEWISE[name]
    # NaN only in the forward checks: torch's own gradient at NaN (hardtanh, the shrinks) is 0 in its vector loop
    # and the upstream gradient in its scalar tail; jitorch passes the gradient on every path
    x = np.nan_to_num(_values(), nan=0.25, posinf=np.inf, neginf=-np.inf)
    check_op(lambda t: fn(jitorch, t), lambda t: fn(torch, t), [x], atol=0, rtol=0)
    check_op(lambda t: fn(jitorch, t), lambda t: fn(torch, t), [x], atol=0, rtol=0, layout="transposed")


@pytest.mark.parametrize("name", ["leaky_relu", "hardtanh", "hardshrink", "threshold"])
def test_piecewise_activation_values_bit_for_bit(name):
    # relu6/softshrink's sign of zero differs from torch on the NumPy path too (see the report), so not here
    got, want = _both(PIECEWISE[name], _values())
    _bits_equal(got, want)


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_piecewise_activations_other_dtypes_keep_numpy_path(dtype):
    x = np.nan_to_num(_values(), nan=0.25, posinf=np.inf, neginf=-np.inf).astype(dtype)
    for name in ("leaky_relu", "hardtanh", "threshold"):
        check_op(lambda t: PIECEWISE[name](jitorch, t), lambda t: PIECEWISE[name](torch, t), [x],
                 atol=1e-3 if dtype == "float16" else 0, rtol=1e-3 if dtype == "float16" else 0)


def test_piecewise_constants_kernel_per_parameter_value():
    # one kernel per constant tuple: a second slope must not reuse the first's kernel
    x = _values()
    for slope in (0.01, 0.3, 2.0, 0):
        got, want = _both(lambda lib, t: lib.nn.functional.leaky_relu(t, slope), x)
        _bits_equal(got, want)


WHERES = {
    "arrays": lambda lib, c, x, y: lib.where(c, x, y),
    "scalar_other": lambda lib, c, x, y: lib.where(c, x, 0.0),
    "scalar_input": lambda lib, c, x, y: lib.where(c, -2.5, y),
    "int_scalar": lambda lib, c, x, y: lib.where(c, x, 3),
    "zero_dim": lambda lib, c, x, y: lib.where(c, x, lib.tensor(1.25)),
    "masked_fill_neg_inf": lambda lib, c, x, y: x.masked_fill(c, float("-inf")),
    "masked_fill_nan": lambda lib, c, x, y: x.masked_fill(c, float("nan")),
    "masked_fill_tensor": lambda lib, c, x, y: x.masked_fill(c, lib.tensor(-0.0)),
    "scalar_rounds_to_float32": lambda lib, c, x, y: lib.where(c, x, 0.1),
}


@pytest.mark.parametrize("name", sorted(WHERES))
def test_where_native_select_matches_torch(name):
    fn = WHERES[name]
    x, y = _values(seed=1), _values(seed=2)
    cond = np.abs(_values(seed=3)) < 4  # no long runs: the pattern NumPy's where mispredicts
    out = []
    for lib in (jitorch, torch):
        out.append(fn(lib, lib.from_numpy(cond.copy()), lib.from_numpy(x.copy()), lib.from_numpy(y.copy())).numpy())
    _bits_equal(*out)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "expanded"])
def test_where_gradients_and_layouts_match_torch(layout):
    x, y = _values(seed=1), _values(seed=2)
    cond = np.abs(_values(seed=3)) < 4
    check_op(lambda c, a, b: jitorch.where(c, a, b), lambda c, a, b: torch.where(c, a, b), [cond, x, y],
             atol=0, rtol=0, layout=layout)
    check_op(lambda c, a: jitorch.where(c, a, 0.5), lambda c, a: torch.where(c, a, 0.5), [cond, x],
             atol=0, rtol=0, layout=layout)


def test_where_broadcast_and_other_dtypes_fall_back_correctly():
    cond = np.abs(_values(seed=3)) < 4
    row = _values((96,), seed=4)
    for dtype in ("float32", "float64", "float16", "int32"):
        x = _values(seed=1).astype(dtype) if dtype != "int32" else np.arange(cond.size, dtype=dtype).reshape(cond.shape)
        out = []
        for lib in (jitorch, torch):
            out.append(lib.where(lib.from_numpy(cond.copy()), lib.from_numpy(x.copy()),
                                 lib.from_numpy(row.copy())).numpy())
        _bits_equal(*out)


CLAMPS = {
    "both": lambda t: t.clamp(-1.0, 1.0),
    "min_zero": lambda t: t.clamp(min=0.0),
    "max_zero": lambda t: t.clamp(max=0.0),
    "min_neg_zero": lambda t: t.clamp(min=-0.0),
    "zero_bounds": lambda t: t.clamp(-0.0, 0.0),
    "min_above_max": lambda t: t.clamp(2.0, 1.0),
    "inexact_bounds": lambda t: t.clamp(min=0.1, max=0.7),
    "int_bounds": lambda t: t.clamp(-2, 5),
    "clamp_min": lambda t: t.clamp_min(0.5),
    "clip": lambda t: t.clip(max=2.5),
}


@pytest.mark.parametrize("name", sorted(CLAMPS))
def test_clamp_scalar_bounds_match_torch(name):
    got, want = _both(lambda lib, t: CLAMPS[name](t), _values())
    _bits_equal(got, want)
    check_op(CLAMPS[name], CLAMPS[name], [_values()], atol=0, rtol=0)


def test_clamp_other_dtypes_and_layouts():
    for dtype in ("float64", "int32"):
        x = _values().astype(dtype) if dtype != "int32" else np.arange(-3000, 3144, dtype=dtype).reshape(64, 96)
        got, want = _both(lambda lib, t: t.clamp(-1, 1), x)
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
    got, want = _both(lambda lib, t: t.clamp(-1.0, 1.0), _values(), layout="transposed")
    _bits_equal(got, want)


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_sign_matches_torch(layout):
    got, want = _both(lambda lib, t: t.sign(), _values(), layout)
    _bits_equal(got, want)
    check_op(lambda t: t.sign(), lambda t: t.sign(), [_values()], atol=0, rtol=0)


NAN_TO_NUMS = {
    "defaults": lambda t: t.nan_to_num(),
    "explicit": lambda t: t.nan_to_num(1.5, 5.0, -7.0),
    "posinf_only": lambda t: t.nan_to_num(posinf=100.0),
    "beyond_float32": lambda t: t.nan_to_num(posinf=1e39),  # stays on the NumPy path
}


@pytest.mark.parametrize("name", sorted(NAN_TO_NUMS))
def test_nan_to_num_matches_torch(name):
    got, want = _both(lambda lib, t: NAN_TO_NUMS[name](t), _values())
    _bits_equal(got, want)
    check_op(NAN_TO_NUMS[name], NAN_TO_NUMS[name], [_values()], atol=0, rtol=0)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("size", [50, 6144])
def test_hardsigmoid_row_bit_for_bit_with_gradients(dtype, size):
    x = _values().ravel()[:size]
    g = np.random.default_rng(5).standard_normal(size).astype(np.float32)
    results = []
    for lib in (jitorch, torch):
        t = lib.tensor(x, dtype=getattr(lib, dtype), requires_grad=True)
        y = lib.nn.functional.hardsigmoid(t)
        (gx,) = lib.autograd.grad(y, t, lib.tensor(g, dtype=getattr(lib, dtype)), create_graph=True)
        assert gx.requires_grad  # (torch has no derivative of hardsigmoid_backward; jitorch's is zero)
        results.append((y.detach().float().numpy(), gx.detach().float().numpy()))
    for got, want in zip(*results):
        _bits_equal(got, want)


def test_hardsigmoid_inplace_and_transposed():
    x = _values()
    check_op(lambda t: jitorch.nn.functional.hardsigmoid(t), lambda t: torch.nn.functional.hardsigmoid(t), [x],
             atol=0, rtol=0, layout="transposed")
    got, want = _both(lambda lib, t: lib.nn.functional.hardsigmoid(t * 1, inplace=True), x)
    _bits_equal(got, want)
