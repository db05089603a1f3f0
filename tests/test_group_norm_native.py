"""The ``native_group_norm`` rows (group statistics and the per-channel affine in one kernel, ATen's two-pass backward)
against torch: weight only, bias only, channels-last and strided inputs, half inputs (computed in float32), one group
and a group per channel, double backward (the composite's graph), and upstream gradients that are broadcast scalars."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch


def _run(lib, x, groups, w, b, g, layout=None, dtype=None):
    xt = lib.tensor(x)
    if dtype is not None:
        xt = xt.to(getattr(lib, dtype))
    if layout == "channels_last":
        xt = xt.contiguous(memory_format=lib.channels_last)
    elif layout == "strided":
        xt = xt.transpose(-1, -2).contiguous().transpose(-1, -2)
    xt.requires_grad_()
    wt, bt = (lib.tensor(v, requires_grad=True) if v is not None else None for v in (w, b))
    # torch 2.13's backward fails for a bias without a weight ("tensor does not have a device"): its oracle takes a
    # constant weight of ones, the same function
    weight = lib.ones(x.shape[1], dtype=bt.dtype) if lib is torch and wt is None and bt is not None else wt
    out = lib.nn.functional.group_norm(xt, groups, weight, bt)
    out.backward(lib.tensor(g).to(out.dtype))
    grads = [t.grad.float().numpy() for t in (xt, wt, bt) if t is not None]
    layout_of = out.is_contiguous(memory_format=lib.channels_last) if layout == "channels_last" else None
    return [out.detach().float().numpy(), str(out.dtype).rsplit(".", 1)[-1], layout_of] + grads


@pytest.mark.parametrize("params", ["weight", "bias", "both"])
@pytest.mark.parametrize("layout", [None, "channels_last", "strided"])
def test_group_norm_row_params_and_layouts_match_torch(params, layout):
    rng = np.random.default_rng(3)
    shape = (3, 12, 5, 6)
    x, g = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(12).astype(np.float32) if params in ("weight", "both") else None
    b = rng.standard_normal(12).astype(np.float32) if params in ("bias", "both") else None
    got, want = (_run(lib, x, 4, w, b, g, layout) for lib in (jitorch, torch))
    assert got[1:3] == want[1:3]
    for a, e in zip(got[:1] + got[3:], want[:1] + want[3:]):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape, groups", [((2, 6, 7), 1), ((2, 6, 7), 6), ((5, 4), 2), ((2, 8, 3, 4, 5), 4)])
def test_group_norm_row_group_counts_and_ranks_float64(shape, groups):
    rng = np.random.default_rng(groups)
    x, g = rng.standard_normal(shape), rng.standard_normal(shape)
    w, b = rng.standard_normal(shape[1]), rng.standard_normal(shape[1])
    got, want = (_run(lib, x, groups, w, b, g) for lib in (jitorch, torch))
    for a, e in zip(got[:1] + got[3:], want[:1] + want[3:]):
        np.testing.assert_allclose(a, e, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_group_norm_row_half_inputs(dtype):
    rng = np.random.default_rng(7)
    x, g = rng.standard_normal((2, 8, 6, 6)).astype(np.float32), rng.standard_normal((2, 8, 6, 6)).astype(np.float32)
    got, want = (_run(lib, x, 2, None, None, g, dtype=dtype) for lib in (jitorch, torch))
    assert got[1] == want[1] == dtype
    tol = 2e-2 if dtype == "bfloat16" else 2e-3
    for a, e in zip(got[:1] + got[3:], want[:1] + want[3:]):
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)


def test_group_norm_row_double_backward_and_scalar_gradient():
    rng = np.random.default_rng(11)
    x, up = rng.standard_normal((2, 6, 3, 4)), rng.standard_normal((2, 6, 3, 4))
    w, b, vx = rng.standard_normal(6), rng.standard_normal(6), rng.standard_normal((2, 6, 3, 4))
    results = []
    for lib in (jitorch, torch):
        xt, wt, bt = (lib.tensor(v, requires_grad=True) for v in (x, w, b))
        out = lib.nn.functional.group_norm(xt, 3, wt, bt)
        assert type(out.grad_fn).__name__ == "NativeGroupNormBackward0"
        gx, gw = lib.autograd.grad(out, (xt, wt), lib.tensor(up), create_graph=True)
        ((gx * lib.tensor(vx)).sum() + (gw * gw).sum()).backward()
        xs = lib.tensor(x, requires_grad=True)
        lib.nn.functional.group_norm(xs, 2, wt.detach()).sum().backward()  # a broadcast scalar upstream gradient
        results.append([t.detach().numpy() for t in (gx, gw, xt.grad, wt.grad, xs.grad)])
    for a, e in zip(*results):
        np.testing.assert_allclose(a, e, rtol=1e-9, atol=1e-10)
