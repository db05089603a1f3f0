"""The CPU float32 shortcuts of ``where``, ``clamp`` and ``masked_fill`` (`jitorch._pointwise_select`) and the
constants' kernel lookup of `native_eager.pointwise_constants`: torch's bits (signed zeros, NaN), dtypes, gradients,
node names and errors, on the shapes each takes and on the ones it hands to the general path."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import same_error

_RNG = np.random.default_rng(0)
_X = _RNG.standard_normal((16, 24)).astype(np.float32)
_X[0, :4] = (np.nan, np.inf, -0.0, 0.0)
_M = _RNG.random((16, 24)) < 0.5


def _bits(t):
    a = t.detach().numpy()
    return a.view(np.int32) if a.dtype == np.float32 else a


def _same(jt, th):
    assert str(jt.dtype).split(".")[-1] == str(th.dtype).split(".")[-1]
    assert jt.shape == th.shape
    np.testing.assert_array_equal(_bits(jt), _bits(th))


@pytest.mark.parametrize("bounds", [(0.0, None), (-0.0, None), (0, None), (None, 0.0), (None, -0.0), (-0.0, 0.0),
                                    (0.0, -0.0), (-0.5, 0.5), (1, -1), (float("nan"), None), (None, float("inf")),
                                    (-2 ** 40 - 1, 2 ** 40 + 1), (True, None), (2 ** 62 + 1, None)])
def test_clamp_bits_match_torch_for_each_bound_form(bounds):
    # the same values in another sign or type follow each other: a lookup that took 0 for -0.0 gives -0.0's bits
    for lo, hi in (bounds, (0.0, 0.0), bounds):
        _same(jitorch.tensor(_X).clamp(lo, hi), torch.tensor(_X).clamp(lo, hi))


def test_a_zero_constant_keeps_its_sign_in_the_kernel_lookup():
    x = -np.abs(_X)
    for slope in (0.0, -0.0, 0, -0.0, 0.0):
        got = jitorch.nn.functional.leaky_relu(jitorch.tensor(x), slope)
        _same(got, torch.nn.functional.leaky_relu(torch.tensor(x), slope))


@pytest.mark.parametrize("call", [
    lambda lib, x: x.clamp(-1e39), lambda lib, x: x.clamp(max=3.5e38), lambda lib, x: x.clamp_min(1e300),
    lambda lib, x: x.clamp_max(-1e300), lambda lib, x: x.clamp(lib.tensor(0.0), 1e39),
    lambda lib, x: lib.where(lib.tensor(_M), x, 1e300), lambda lib, x: lib.where(lib.tensor(_M), -1e300, x),
    lambda lib, x: lib.where(lib.tensor(_M).float(), x, 0.0),
])
def test_errors_and_refusals_are_torchs(call):
    same_error(lambda lib: call(lib, lib.tensor(_X)))


@pytest.mark.parametrize("other", [0.0, -0.0, 2, float("-inf"), float("nan"), "tensor", "scalar_tensor", "expanded"])
def test_where_matches_torch_with_each_kind_of_branch(other):
    def run(lib):
        m = lib.tensor(_M)
        x = lib.tensor(_X, requires_grad=True)
        o = {"tensor": lambda: lib.tensor(_X[::-1].copy(), requires_grad=True),
             "scalar_tensor": lambda: lib.tensor(-0.0, requires_grad=True),
             "expanded": lambda: lib.tensor(1.5).expand(16, 24)}.get(other, lambda: other)()
        outs = [lib.where(m, x, o), lib.where(m, o, x)]
        sum(out.sum() for out in outs).backward()
        return outs, x.grad, getattr(o, "grad", None), [out.grad_fn.name() for out in outs]
    (jt, jgx, jgo, jnames), (th, tgx, tgo, tnames) = run(jitorch), run(torch)
    for a, b in zip(jt, th):
        _same(a, b)
    _same(jgx, tgx)
    if tgo is not None:
        _same(jgo, tgo)
    assert jnames == tnames


def test_where_of_two_numbers_takes_the_default_dtype():
    m = jitorch.tensor(_M)
    jitorch.set_default_dtype(jitorch.float64)
    try:
        assert jitorch.where(m, 1.0, 0.0).dtype is jitorch.float64
    finally:
        jitorch.set_default_dtype(jitorch.float32)
    assert jitorch.where(m, 1.0, 0.0).dtype is jitorch.float32


@pytest.mark.parametrize("value", [0.0, -0.0, -2.5, 7, float("-inf"), float("nan"), 2 ** 30 + 1])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "broadcast_mask"])
def test_masked_fill_matches_torch(value, layout):
    def run(lib):
        x = lib.tensor(_X if layout != "transposed" else _X.T.copy().T, requires_grad=True)
        m = lib.tensor(_M if layout != "broadcast_mask" else _M[:1])
        out = x.masked_fill(m, value)
        (out * lib.tensor(_X)).sum().backward()
        return out, x.grad, out.grad_fn.name(), out.is_contiguous()
    (jt, jg, jn, jc), (th, tg, tn, tc) = run(jitorch), run(torch)
    _same(jt, th)
    _same(jg, tg)
    assert (jn, jc) == (tn, tc)


def test_shortcuts_read_a_view_after_its_base_changed_and_mark_inference_results():
    for lib in (jitorch, torch):
        base = lib.tensor(_X.copy())
        view = base[:8]
        base.add_(1.0)
        m = lib.tensor(_M[:8])
        with lib.inference_mode():
            outs = [view.clamp(-0.5, 0.5), lib.where(m, view, 0.0), view.masked_fill(m, 2.0)]
        assert all(o.is_inference() for o in outs)
        if lib is jitorch:
            got = outs
        else:
            for a, b in zip(got, outs):
                _same(a, b)


def test_clamp_gradient_and_node_match_torch():
    def run(lib):
        x = lib.tensor(_X, requires_grad=True)
        outs = [x.clamp(-0.5, 0.5), x.clamp(min=0.0), x.clamp(max=-0.0), x.clamp(0.5, -0.5)]
        sum((o * o).sum() for o in outs).backward()
        return outs, x.grad, [o.grad_fn.name() for o in outs]
    (jt, jg, jn), (th, tg, tn) = run(jitorch), run(torch)
    for a, b in zip(jt, th):
        _same(a, b)
    _same(jg, tg)
    assert jn == tn
