"""Accuracy of float reductions over long outer axes, against torch and a float64 reference.

NumPy adds a reduced axis outside a kept one row after row (``x.sum(0)`` of a (N, 4) float32 array near 1000 is
off by 1e-3 at 2^18 rows); PyTorch's cascade sum keeps 1e-7. Each case computes the float64 result and asserts
jitorch's relative error is within a small factor of torch's (or a fixed bound where torch's own is poor).
"""
from __future__ import annotations

from contextlib import nullcontext as _nothing

import ml_dtypes
import numpy as np
import pytest
import torch

import jitorch

ROWS = 1 << 18


def _data(shape, seed=0, offset=1000.0):
    return (np.random.default_rng(seed).random(shape, dtype=np.float32) + np.float32(offset)).astype(np.float32)


def _rel(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def _numpy(t):
    t = t.detach()
    return t.float().numpy() if t.dtype in (torch.bfloat16, jitorch.bfloat16) else t.numpy()


def _check(fn, x, *, layout=None, factor=4.0, floor=2e-7):
    """fn(lib, tensor) on ``x`` in float32 for both libraries, against fn on the float64 tensor."""
    tx, jx = torch.from_numpy(x), jitorch.tensor(x)
    if layout == "channels_last":
        tx, jx = tx.contiguous(memory_format=torch.channels_last), jx.contiguous(memory_format=jitorch.channels_last)
    elif layout == "transposed":
        tx, jx = tx.t(), jx.t()
    want = fn(torch, tx.double()).numpy()
    torch_err, jit_err = _rel(_numpy(fn(torch, tx)), want), _rel(_numpy(fn(jitorch, jx)), want)
    assert jit_err <= max(factor * torch_err, floor), (jit_err, torch_err)


CASES = {
    "sum(0)": ((ROWS, 4), None, lambda t, x: x.sum(0)),
    "sum(0) keepdim": ((ROWS, 3), None, lambda t, x: x.sum(0, keepdim=True)),
    "mean(0)": ((ROWS, 4), None, lambda t, x: x.mean(0)),
    "sum(0) of wide rows": ((2048, 1024), None, lambda t, x: x.sum(0)),
    "mean(0) of an odd row count": ((ROWS + 77, 5), None, lambda t, x: x.mean(0)),
    "sum(0, 1)": ((512, 512, 4), None, lambda t, x: x.sum((0, 1))),
    "mean(1) of a (4, N) transposed view": ((ROWS, 4), "transposed", lambda t, x: x.mean(1)),
    "sum(0, 2, 3) channels-last": ((64, 4, 64, 64), "channels_last", lambda t, x: x.sum((0, 2, 3))),
    "mean(0, 2, 3) of an NCHW batch": ((512, 4, 16, 16), None, lambda t, x: x.mean((0, 2, 3))),
    "nansum(0)": ((ROWS, 4), None, lambda t, x: x.nansum(0)),
    "logsumexp(0)": ((ROWS, 4), None, lambda t, x: t.logsumexp(x - 1000, 0)),
    "sum(0, dtype=float64)": ((ROWS, 4), None, lambda t, x: x.sum(0, dtype=t.float64).float()),
}


@pytest.mark.parametrize("name", list(CASES))
def test_long_outer_axes_sum_as_accurately_as_torch(name):
    shape, layout, fn = CASES[name]
    _check(fn, _data(shape), layout=layout)


@pytest.mark.parametrize("name, fn", [("var(0)", lambda t, x: x.var(0)), ("std(0)", lambda t, x: x.std(0)),
                                      ("var(0, 1)", lambda t, x: x.reshape(-1, 512, 4).var((0, 1))),
                                      ("var_mean(0)", lambda t, x: t.var_mean(x, 0)[1])])
def test_statistics_over_long_outer_axes(name, fn):
    # torch accumulates float32 variances in float64 (4e-8 here); so does jitorch (a float32 two-pass: 2.2e-7)
    _check(fn, _data((ROWS, 4), seed=1), factor=2.0, floor=0)


VAR_CASES = {
    "var(0) of wide rows": ((4096, 1024), lambda t, x: x.var(0)),  # float32 two-pass: 2.4e-6, torch 4.3e-8
    "var(-1)": ((1024, 4096), lambda t, x: x.var(-1)),  # 1.5e-7, torch 4.3e-8
    "std(1, keepdim)": ((2048, 1024), lambda t, x: x.std(1, keepdim=True)),
    "var()": ((1024, 1024), lambda t, x: x.var()),
    "var(0, 2) correction=0": ((256, 8, 512), lambda t, x: x.var((0, 2), correction=0)),
    "std_mean(0)": ((4096, 256), lambda t, x: t.std_mean(x, 0)[0]),
}


@pytest.mark.parametrize("name", list(VAR_CASES))
def test_float32_variances_accumulate_in_float64(name):
    shape, fn = VAR_CASES[name]
    _check(fn, _data(shape, seed=8), factor=2.0, floor=0)


def test_variance_gradient_and_edge_values_match_torch():
    x = np.random.default_rng(9).standard_normal((6, 5)).astype(np.float32)
    g = np.random.default_rng(10).standard_normal(6).astype(np.float32)
    for c in (0, 1, 5, 6):  # 5: no degrees of freedom (inf), 6: a negative divisor in torch's backward
        tx, jx = torch.from_numpy(x).requires_grad_(), jitorch.tensor(x, requires_grad=True)
        with pytest.warns(UserWarning) if c >= 5 else _nothing():
            tv, jv = tx.var(1, correction=c), jx.var(1, correction=c)
        tv.backward(torch.from_numpy(g))
        jv.backward(jitorch.tensor(g))
        assert type(jv.grad_fn).__name__ == type(tv.grad_fn).__name__ == "VarBackward0"
        np.testing.assert_allclose(jv.detach().numpy(), tv.detach().numpy(), rtol=1e-6)
        np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    constant = np.full((4096, 3), 1000.1, np.float32)
    np.testing.assert_array_equal(jitorch.tensor(constant).std(0).numpy(), np.zeros(3, np.float32))


def test_nansum_skips_nans_in_the_tree():
    x = _data((ROWS, 4), seed=2)
    x[::7, 1] = np.nan
    want = np.nansum(x.astype(np.float64), 0)
    got = jitorch.tensor(x).nansum(0).numpy()
    assert _rel(got, want) <= max(4 * _rel(torch.from_numpy(x).nansum(0).numpy(), want), 2e-7)
    assert not np.isnan(got).any()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_inputs_accumulate_in_float32_over_outer_axes(dtype):
    x = _data((ROWS, 4), seed=3, offset=1.0)
    half = x.astype(getattr(ml_dtypes, dtype) if dtype == "bfloat16" else np.float16)
    exact = half.astype(np.float64).sum(0)
    tx = torch.from_numpy(half.astype(np.float32)).to(getattr(torch, dtype))
    jx = jitorch.tensor(half.astype(np.float32)).to(getattr(jitorch, dtype))
    torch_err = _rel(tx.sum(0, dtype=torch.float32).numpy(), exact)
    assert _rel(jx.sum(0, dtype=jitorch.float32).numpy(), exact) <= max(4 * torch_err, 2e-7)
    # In the half dtype the result's own rounding dominates: both libraries round the same float32 sum.
    np.testing.assert_array_equal(_numpy(jx.sum(0)), _numpy(tx.sum(0)))


def test_sums_keep_the_values_and_layout_of_numpy_where_short():
    """Few outer rows and integer dtypes keep NumPy's sum (its order is pairwise or exact there); float32 sums over
    trailing axes run as a generated row reduction (`ops.native_sum`), at least as accurate as NumPy's."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((20, 30, 40)).astype(np.float32)
    for dims in [0, 1, (0, 2)]:
        np.testing.assert_array_equal(jitorch.tensor(x).sum(dims).numpy(), np.add.reduce(x, axis=dims))
    for dims in [2, (1, 2), (0, 1, 2)]:
        exact = np.add.reduce(x.astype(np.float64), axis=dims)
        got, numpy_error = jitorch.tensor(x).sum(dims).numpy(), np.abs(np.add.reduce(x, axis=dims) - exact).max()
        assert got.shape == exact.shape and np.abs(got - exact).max() <= max(numpy_error, 1e-6 * np.abs(exact).max())
    ints = rng.integers(-5, 5, (ROWS, 3))
    np.testing.assert_array_equal(jitorch.tensor(ints).sum(0).numpy(), ints.sum(0))


def test_batch_norm_statistics_over_a_long_batch():
    # torch's own (N, C) batch norm adds the batch in order (its running mean is off by 1e-3 here): a fixed bound
    x = _data((ROWS, 4), seed=5)
    bn = jitorch.nn.BatchNorm1d(4, momentum=1.0)
    out = bn(jitorch.tensor(x))
    x64 = x.astype(np.float64)
    assert _rel(bn.running_mean.numpy(), x64.mean(0)) <= 2e-7
    assert _rel(bn.running_var.numpy(), x64.var(0, ddof=1)) <= 4e-6
    want = (x64 - x64.mean(0)) / np.sqrt(x64.var(0) + 1e-5)
    assert _rel(out.detach().numpy(), want) <= 1e-3


def test_linear_bias_gradient_over_a_long_batch():
    x, g = np.random.default_rng(6).standard_normal((ROWS, 3)).astype(np.float32), _data((ROWS, 4), seed=7)
    want = g.astype(np.float64).sum(0)
    errors = []
    for lib, tensor in ((torch, torch.from_numpy), (jitorch, jitorch.tensor)):
        lib.manual_seed(0)
        layer = lib.nn.Linear(3, 4)
        layer(tensor(x)).backward(tensor(g))
        errors.append(_rel(layer.bias.grad.numpy(), want))
    assert errors[1] <= max(4 * errors[0], 2e-7), errors


def test_gru_hidden_bias_gradient_over_a_long_sequence():
    # b_hh's gradient sums steps * batch rows: added one after another, 9e-6 here against torch's 7e-7
    torch.manual_seed(0)
    tm, jm = torch.nn.GRU(4, 8), jitorch.nn.GRU(4, 8)
    with jitorch.no_grad():
        for p, q in zip(jm.parameters(), tm.parameters()):
            p.copy_(jitorch.tensor(q.detach().numpy()))
    x, g = _data((1024, 256, 4), seed=11, offset=0.0), _data((1024, 256, 8), seed=12, offset=100.0)
    wide = torch.nn.GRU(4, 8).double()
    wide.load_state_dict({k: v.double() for k, v in tm.state_dict().items()})
    grads, double = [], lambda a: torch.from_numpy(a.astype(np.float64))
    for m, tensor in ((tm, torch.from_numpy), (jm, jitorch.tensor), (wide, double)):
        m(tensor(x))[0].backward(tensor(g))
        grads.append(m.bias_hh_l0.grad.numpy())
    torch_err, jit_err = _rel(grads[0], grads[2]), _rel(grads[1], grads[2])
    assert jit_err <= max(4 * torch_err, 2e-7), (jit_err, torch_err)


@pytest.mark.parametrize("offset", [0.0, 3.0])
def test_bfloat16_batch_norm_matches_torch_bit_for_bit(offset):
    # ATen's bfloat16 kernel keeps the mean and the sum of squared deviations in bfloat16 before the inverse
    # square root (itself rounded); rounding only the mean and inverse deviation left values 1-3 ulp apart
    rng = np.random.default_rng(13)
    x = (rng.standard_normal((64, 32)) + offset).astype(np.float32)
    w, b = rng.standard_normal(32).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    half = {lib: [lib.tensor(a).to(lib.bfloat16) for a in (x, w, b)] for lib in (torch, jitorch)}
    for params in (lambda t: t[1:], lambda t: (None, None)):
        outs = [lib.nn.functional.batch_norm(half[lib][0], None, None, *params(half[lib]), training=True)
                for lib in (torch, jitorch)]
        assert outs[1].dtype == jitorch.bfloat16
        np.testing.assert_array_equal(_numpy(outs[1]), _numpy(outs[0]))
