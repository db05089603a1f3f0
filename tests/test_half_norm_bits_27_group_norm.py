"""float16/bfloat16 group norm through the ``native_group_norm`` row (jitorch/ops/group_norm.py) bit for bit against
torch's CPU kernels: the output computed in float32 and rounded once, the statistics saved in the parameters' type,
the backward's per-group algebra from those rounded statistics (reading unrounded ones put 30-60% of the input and
weight gradients one half step away). Compared as bits, with random upstream gradients.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch._dispatch import apply
from jitorch.ops.group_norm import GROUP_NORM

CASES = [((4, 6, 5, 7), 3, False), ((4, 6, 5, 7), 3, True), ((2, 8, 16, 16), 4, False), ((2, 8, 16, 16), 4, True),
         ((3, 32, 9), 8, False), ((2, 6, 3, 4, 5), 2, False)]


def _arrays(shape, seed):
    rng = np.random.default_rng(seed)
    c = shape[1]
    return ((rng.standard_normal(shape) * 2 + 0.3).astype(np.float32), rng.standard_normal(shape).astype(np.float32),
            rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32))


def _run(lib, arrays, dtype, groups, channels_last, param_dtype=None, row=False):
    x, g, w, b = arrays
    dt, pdt = getattr(lib, dtype), getattr(lib, param_dtype or dtype)
    xt = lib.from_numpy(x).to(dt)
    if channels_last:
        xt = xt.to(memory_format=lib.channels_last)
    xt.requires_grad_()
    wt, bt = (lib.from_numpy(p).to(pdt).requires_grad_() for p in (w, b))
    if row:
        y = apply(GROUP_NORM, xt, wt, bt, groups=groups, eps=1e-5)[0]
    else:
        y = lib.nn.functional.group_norm(xt, groups, wt, bt)
    y.backward(lib.from_numpy(g).to(dt))
    return [t.detach().float().numpy() for t in (y, xt.grad, wt.grad, bt.grad)], y.dtype


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.mark.parametrize("shape,groups,channels_last", CASES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_group_norm_row_is_torchs_bits(shape, groups, channels_last, dtype):
    arrays = _arrays(shape, seed=len(shape) + groups)
    (got, got_dtype), (want, _) = (_run(jitorch, arrays, dtype, groups, channels_last, row=True),
                                   _run(torch, arrays, dtype, groups, channels_last))
    assert got_dtype == getattr(jitorch, dtype)
    # The output is the float32 row's rounded: float16's 11 bits show its other float32 order now and then.
    off = got[0] != want[0]
    assert off.sum() <= max(1, off.size // 500), f"output: {off.sum()} of {off.size} differ"
    np.testing.assert_allclose(got[0], want[0], rtol=2 ** -10, atol=0)
    for name, g, w in zip(("input grad", "weight grad", "bias grad"), got[1:], want[1:]):
        np.testing.assert_array_equal(_bits(g), _bits(w), err_msg=name)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_group_norm_row_statistics_in_the_parameters_type(dtype):
    x = jitorch.from_numpy(_arrays((2, 4, 3, 3), 0)[0]).to(getattr(jitorch, dtype))
    w32 = jitorch.ones(4)
    assert apply(GROUP_NORM, x, None, None, groups=2, eps=1e-5)[1].dtype == x.dtype
    mixed = apply(GROUP_NORM, x, w32, None, groups=2, eps=1e-5)
    assert mixed[0].dtype == x.dtype and mixed[1].dtype == jitorch.float32


def test_bfloat16_input_float32_parameters_row():
    # autocast's mix: statistics and parameter gradients float32 (their sums in another order: within rounding).
    arrays = _arrays((2, 8, 16, 16), 5)
    (got, _), (want, _) = (_run(jitorch, arrays, "bfloat16", 4, False, "float32", row=True),
                           _run(torch, arrays, "bfloat16", 4, False, "float32"))
    np.testing.assert_array_equal(_bits(got[0]), _bits(want[0]))
    np.testing.assert_array_equal(_bits(got[1]), _bits(want[1]))
    for g, w in zip(got[2:], want[2:]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_half_group_norm_row_double_backward_stays_connected():
    arrays = _arrays((2, 4, 3, 3), 2)
    res = []
    for lib in (jitorch, torch):
        x = lib.from_numpy(arrays[0]).to(lib.bfloat16).requires_grad_()
        w = lib.from_numpy(arrays[2]).to(lib.bfloat16).requires_grad_()
        if lib is jitorch:
            y = apply(GROUP_NORM, x, w, None, groups=2, eps=1e-5)[0]
        else:
            y = lib.nn.functional.group_norm(x, 2, w)
        gx, = lib.autograd.grad(y, x, lib.from_numpy(arrays[1]).to(lib.bfloat16), create_graph=True)
        res.append([t.float().numpy() for t in (gx.detach(), lib.autograd.grad((gx.float() ** 2).sum(), w)[0])])
    for g, w in zip(*res):
        np.testing.assert_allclose(g, w, rtol=0.03, atol=0.03 * np.abs(w).max())


def test_functional_group_norm_half_gradients_are_torchs_bits():
    arrays = _arrays((2, 8, 16, 16), 9)
    (got, _), (want, _) = _run(jitorch, arrays, "bfloat16", 4, False), _run(torch, arrays, "bfloat16", 4, False)
    for g, w in zip(got, want):
        # (float32 sums in another order than torch's lanes: at most one element in a thousand one bfloat16 step off)
        steps = np.abs(_bits(g).astype(np.int64) - _bits(w).astype(np.int64)) >> 16
        assert steps.max() <= 1 and np.count_nonzero(steps) <= max(1, g.size // 1000)
