"""float16/bfloat16 batch norm gradients bit for bit against torch's CPU kernels (jitorch/ops/half_batch_norm.py).

A mixed-precision training step (a model cast with ``.to(torch.bfloat16)``, or bfloat16 activations with float32
parameters under autocast) differentiates batch norm in the half type: the input gradient is rounded once from
float32 arithmetic on the saved half statistics (input and gradient in one layout), or in c10 half arithmetic step
by step (layouts that differ). The composite gradient landed one half step away on about one element in ten.
Compared as the uint16 bits of each result, with random upstream gradients.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

SHAPES = [(8, 5, 7, 9), (16, 3, 12, 12), (32, 7), (4, 6, 10), (2, 3, 4, 5, 6)]
LAYOUTS = ["contiguous", "channels_last", "channels_last_input_only"]


def _step(lib, arrays, dtype, train, layout, param_dtype=None, affine=True):
    x, dy, w, b, rm, rv = arrays
    dt = getattr(lib, dtype)
    pdt = getattr(lib, param_dtype or dtype)
    xt = lib.from_numpy(x).to(dt)
    g = lib.from_numpy(dy).to(dt)
    if layout != "contiguous":
        xt = xt.to(memory_format=lib.channels_last)
        if layout == "channels_last":
            g = g.to(memory_format=lib.channels_last)
    xt.requires_grad_()
    wt = lib.from_numpy(w).to(pdt).requires_grad_() if affine else None
    bt = lib.from_numpy(b).to(pdt).requires_grad_() if affine else None
    y = lib.nn.functional.batch_norm(xt, lib.from_numpy(rm).to(pdt), lib.from_numpy(rv).to(pdt), wt, bt,
                                     training=train)
    y.backward(g)
    grads = [xt.grad] + ([wt.grad, bt.grad] if affine else [])
    return [t.detach().float().numpy() for t in [y] + grads]


def _arrays(shape, seed):
    rng = np.random.default_rng(seed)
    c = shape[1]
    return ((rng.standard_normal(shape) * 2 + 0.5).astype(np.float32), rng.standard_normal(shape).astype(np.float32),
            rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32),
            rng.standard_normal(c).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32))


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def _cases():
    for shape in SHAPES:
        for layout in LAYOUTS if len(shape) == 4 else LAYOUTS[:1]:
            yield shape, layout


@pytest.mark.parametrize("shape,layout", list(_cases()))
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_bfloat16_batch_norm_gradients_are_torchs_bits(shape, layout, train, affine):
    arrays = _arrays(shape, seed=len(shape) * 10 + LAYOUTS.index(layout))
    got = _step(jitorch, arrays, "bfloat16", train, layout, affine=affine)
    want = _step(torch, arrays, "bfloat16", train, layout, affine=affine)
    for name, g, w in zip(("output", "input grad", "weight grad", "bias grad"), got, want):
        np.testing.assert_array_equal(_bits(g), _bits(w), err_msg=name)


@pytest.mark.parametrize("shape,layout", list(_cases()))
@pytest.mark.parametrize("train", [True, False])
def test_float16_batch_norm_gradients_are_torchs_bits(shape, layout, train):
    # float16's 11 bits show torch's float32 summation order now and then (a channel sum one float32 ulp away):
    # at most one element in a thousand may sit one float16 step away.
    arrays = _arrays(shape, seed=len(shape) * 10 + LAYOUTS.index(layout) + 100)
    got = _step(jitorch, arrays, "float16", train, layout)
    want = _step(torch, arrays, "float16", train, layout)
    np.testing.assert_array_equal(_bits(got[0]), _bits(want[0]), err_msg="output")
    for name, g, w in zip(("input grad", "weight grad", "bias grad"), got[1:], want[1:]):
        off = g != w
        assert off.mean() <= 1e-3 or off.sum() <= 1, f"{name}: {off.sum()} of {off.size} differ"
        np.testing.assert_allclose(g, w, rtol=2 ** -10, atol=0, err_msg=name)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("train", [True, False])
def test_bfloat16_input_with_float32_parameters(layout, train):
    # autocast's batch norm: bfloat16 activations, float32 parameters and statistics (ATen's mixed type: the
    # statistics and the parameter gradients stay float32).
    arrays = _arrays((8, 5, 7, 9), seed=7)
    got = _step(jitorch, arrays, "bfloat16", train, layout, param_dtype="float32")
    want = _step(torch, arrays, "bfloat16", train, layout, param_dtype="float32")
    np.testing.assert_array_equal(_bits(got[0]), _bits(want[0]), err_msg="output")
    np.testing.assert_array_equal(_bits(got[1]), _bits(want[1]), err_msg="input grad")
    for name, g, w in zip(("weight grad", "bias grad"), got[2:], want[2:]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=name)  # float32 sums in another order


def test_batch_norm_module_training_steps_match_torch():
    # A bfloat16 BatchNorm2d followed by an in-place ReLU, three steps: gradients accumulate bit for bit.
    arrays = _arrays((16, 4, 6, 6), seed=3)
    results = []
    for lib in (jitorch, torch):
        bn = lib.nn.BatchNorm2d(4).to(lib.bfloat16)
        x = lib.from_numpy(arrays[0]).to(lib.bfloat16).requires_grad_()
        for step in range(3):
            y = lib.relu_(bn(x * (step + 1)))
            y.backward(lib.from_numpy(arrays[1]).to(lib.bfloat16))
        results.append([t.float().numpy() for t in (x.grad, bn.weight.grad, bn.bias.grad, bn.running_mean,
                                                    bn.running_var)])
    for g, w in zip(*results):
        np.testing.assert_array_equal(_bits(g), _bits(w))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("train", [True, False])
def test_create_graph_forward_ad_and_vmap_keep_the_composite(dtype, train):
    # Second derivatives, jvp and vmap differentiate the float32 composite forward: torch's values to half precision.
    arrays = _arrays((6, 3, 4, 5), seed=11)
    res = []
    for lib in (jitorch, torch):
        dt = getattr(lib, dtype)
        x = lib.from_numpy(arrays[0]).to(dt).requires_grad_()
        w = lib.from_numpy(arrays[2]).to(dt).requires_grad_()
        b = lib.from_numpy(arrays[3]).to(dt).requires_grad_()
        g = lib.from_numpy(arrays[1]).to(dt)
        stats = lambda: (lib.zeros(3, dtype=dt), lib.full((3,), 1.5, dtype=dt))  # noqa: E731
        y = lib.nn.functional.batch_norm(x, *stats(), w, b, training=train)
        gx, gw = lib.autograd.grad(y, (x, w), g, create_graph=True)
        gg = lib.autograd.grad((gx.float() ** 2).sum() + (gw.float() ** 2).sum(), x)[0]
        f = lambda xx: lib.nn.functional.batch_norm(xx, *stats(), w.detach(), b.detach(), training=train)  # noqa
        tangent = lib.func.jvp(f, (x.detach(),), (g,))[1]
        per_sample = lambda xx: lib.nn.functional.batch_norm(xx, None, None, w.detach(), b.detach(),  # noqa: E731
                                                             training=True)
        mapped = lib.func.vmap(per_sample)(x.detach().reshape(2, 3, 3, 4, 5))
        res.append([t.detach().float().numpy() for t in (gx, gw, gg, tangent, mapped)])
    for name, g, w in zip(("grad", "weight grad", "second derivative", "jvp", "vmap"), *res):
        np.testing.assert_allclose(g, w, rtol=0.02, atol=0.02 * np.abs(w).max(), err_msg=name)
