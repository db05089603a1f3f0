"""lerp, addcmul, addcdiv and hypot as rows (`jitorch/ops/muladd_ops.py`) against torch: values (float32 bit for bit,
ATen's fused multiply-adds), gradients with random upstream gradients, layouts, broadcasting and edge values."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from tests.helpers import LAYOUTS, assert_same, check_op, gradgradcheck_op, make_array

SHAPES = ((), (0, 3), (7,), (33, 40), (300, 401))


def _arrays(shape, dtype, n, seed=0, low=-3.0, high=3.0):
    rng = np.random.default_rng(seed)
    return [make_array(shape, dtype, rng, low, high) for _ in range(n)]


def _exact(dtype):
    return dict(atol=0.0, rtol=0.0) if dtype == "float32" else dict(atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("dtype", ("float32", "float64"))
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("weight", (0.3, 0.7, -0.5, 0.5, 1.0, 2.5))
def test_lerp_scalar_weight(dtype, shape, weight):
    a, b = _arrays(shape, dtype, 2)
    check_op(lambda x, y: jitorch.lerp(x, y, weight), lambda x, y: torch.lerp(x, y, weight), [a, b],
             grad_atol=1e-6, grad_rtol=1e-6, **_exact(dtype))


@pytest.mark.parametrize("dtype", ("float32", "float64"))
@pytest.mark.parametrize("shape", SHAPES)
def test_lerp_tensor_weight(dtype, shape):
    a, b = _arrays(shape, dtype, 2)
    w = _arrays(shape, dtype, 1, seed=3, low=-1.0, high=2.0)[0]
    check_op(jitorch.lerp, torch.lerp, [a, b, w], grad_atol=1e-5, grad_rtol=1e-5, **_exact(dtype))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_lerp_layouts(layout):
    a, b, w = _arrays((64, 48), "float32", 3)
    out = check_op(jitorch.lerp, torch.lerp, [a, b, w], layout=layout, atol=0.0, rtol=0.0)
    assert out[0].stride() == out[1].stride()


def test_lerp_broadcast_and_half():
    a, = _arrays((5, 1, 40), "float32", 1)
    b, = _arrays((3, 40), "float32", 1, seed=1)
    w, = _arrays((5, 3, 1), "float32", 1, seed=2, low=-1.0, high=2.0)
    check_op(jitorch.lerp, torch.lerp, [a, b, w], atol=0.0, rtol=0.0, grad_atol=1e-5)
    h = _arrays((50,), "float16", 3, seed=4)
    check_op(jitorch.lerp, torch.lerp, h, atol=0.0, rtol=0.0, grad=False)
    check_op(lambda x, y: jitorch.lerp(x, y, 0.7), lambda x, y: torch.lerp(x, y, 0.7), h[:2], atol=0.0, rtol=0.0,
             grad=False)


def test_lerp_ends_and_nonfinite():
    a = np.float32([1e8, -3.0, np.inf, np.nan, 0.0, 2.0])
    b = np.float32([1.0, 4.0, 1.0, 1.0, -np.inf, np.nan])
    for w in (0.0, 1.0, 0.49999997, 0.5, float("nan")):
        check_op(lambda x, y: jitorch.lerp(x, y, w), lambda x, y: torch.lerp(x, y, w), [a, b], atol=0.0, rtol=0.0,
                 grad=False)
    w = np.float32([0.0, 1.0, np.nan, 0.25, 0.75, 1.0])
    check_op(jitorch.lerp, torch.lerp, [a, b, w], atol=0.0, rtol=0.0, grad=False)


@pytest.mark.parametrize("op", ("addcmul", "addcdiv"))
@pytest.mark.parametrize("dtype", ("float32", "float64"))
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("value", (1, 0.3, -2))
def test_addc(op, dtype, shape, value):
    a, b = _arrays(shape, dtype, 2)
    c, = _arrays(shape, dtype, 1, seed=5, low=0.5, high=3.0)
    check_op(lambda x, y, z: getattr(jitorch, op)(x, y, z, value=value),
             lambda x, y, z: getattr(torch, op)(x, y, z, value=value), [a, b, c], grad_atol=1e-5, grad_rtol=1e-5,
             **_exact(dtype))


@pytest.mark.parametrize("op", ("addcmul", "addcdiv"))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_addc_layouts_and_broadcast(op, layout):
    a, b = _arrays((40, 30), "float32", 2)
    c, = _arrays((40, 30), "float32", 1, seed=5, low=0.5, high=3.0)
    jt, th = getattr(jitorch, op), getattr(torch, op)
    check_op(lambda x, y, z: jt(x, y, z, value=0.5), lambda x, y, z: th(x, y, z, value=0.5), [a, b, c],
             layout=layout, atol=0.0, rtol=0.0, grad_atol=1e-5, grad_rtol=1e-5)
    check_op(lambda x, y, z: jt(x, y, z, value=0.5), lambda x, y, z: th(x, y, z, value=0.5),
             [a[:1], b, c[:, :1]], atol=0.0, rtol=0.0, grad_atol=1e-5, grad_rtol=1e-5)


def test_addc_mixed_and_integer_dtypes():
    a, b = _arrays((20,), "float64", 2)
    c, = _arrays((20,), "float32", 1, seed=5, low=0.5, high=3.0)
    for op in ("addcmul", "addcdiv"):
        check_op(lambda x, y, z: getattr(jitorch, op)(x, y, z, value=0.5),
                 lambda x, y, z: getattr(torch, op)(x, y, z, value=0.5), [a, b, c], atol=1e-12, rtol=1e-12,
                 grad_atol=1e-6, grad_rtol=1e-6)  # (torch's gradient multiplies the float32 operand in float32)
    i, j, k = _arrays((20,), "int32", 3)
    check_op(lambda x, y, z: jitorch.addcmul(x, y, z, value=2), lambda x, y, z: torch.addcmul(x, y, z, value=2),
             [i, j, k], atol=0, rtol=0, grad=False)


@pytest.mark.parametrize("dtype", ("float32", "float64"))
@pytest.mark.parametrize("shape", SHAPES)
def test_hypot(dtype, shape):
    a, b = _arrays(shape, dtype, 2)
    check_op(jitorch.hypot, torch.hypot, [a, b], grad_atol=1e-6, grad_rtol=1e-5, **_exact(dtype))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_hypot_layouts(layout):
    a, b = _arrays((50, 60), "float32", 2)
    check_op(jitorch.hypot, torch.hypot, [a, b], layout=layout, atol=0.0, rtol=0.0)


@pytest.mark.parametrize("n", (6, 3000))
def test_hypot_extremes(n):
    special = np.float32([np.inf, -np.inf, np.nan, 3e30, 1e-30, 1e-45, 0.0, -0.0, 3.4e38, 1e-40, 2e19, 1e-23])
    rng = np.random.default_rng(7)
    a, b = rng.choice(special, n), rng.choice(special, n)
    check_op(jitorch.hypot, torch.hypot, [a, b], atol=0.0, rtol=0.0, grad=False)
    check_op(jitorch.hypot, torch.hypot, [a[:, None], b[None, :5]], atol=0.0, rtol=0.0, grad=False)
    h = np.float16([60000.0, 1e-7, np.inf, np.nan, 3.0, 0.0])
    check_op(jitorch.hypot, torch.hypot, [h, h[::-1].copy()], atol=0.0, rtol=0.0, grad=False)


def test_hypot_gradient_at_zero_and_double_backward():
    a, b = np.float64([0.0, 3.0, -1e-300]), np.float64([0.0, -4.0, 1e-300])
    check_op(jitorch.hypot, torch.hypot, [a, b], atol=0.0, rtol=0.0, grad_atol=1e-12)
    rng = np.random.default_rng(1)
    gradgradcheck_op(jitorch.hypot, [rng.standard_normal(5), rng.standard_normal(5)])
    gradgradcheck_op(lambda x, y, w: jitorch.lerp(x, y, w), [rng.standard_normal(4) for _ in range(3)])
    gradgradcheck_op(lambda x, y, z: jitorch.addcdiv(x, y, z, value=0.7),
                     [rng.standard_normal(4), rng.standard_normal(4), rng.uniform(1, 2, 4)])


def test_out_and_inplace():
    a, b, c = (jitorch.from_numpy(x) for x in _arrays((9,), "float32", 3))
    ta, tb, tc = (torch.from_numpy(x.numpy().copy()) for x in (a, b, c))
    out = jitorch.empty(9)
    jitorch.lerp(a, b, 0.25, out=out)
    assert_same(out, torch.lerp(ta, tb, 0.25))
    jitorch.addcmul(a, b, c, value=3.0, out=out)
    assert_same(out, torch.addcmul(ta, tb, tc, value=3.0))
    assert_same(a.clone().addcdiv_(b, c.abs() + 1, value=0.5), ta.clone().addcdiv_(tb, tc.abs() + 1, value=0.5))
    assert_same(a.clone().lerp_(b, 0.8), ta.clone().lerp_(tb, 0.8))


@pytest.mark.parametrize("weight", [0.3, 0.9, -0.2, 1.7])
def test_compiled_and_captured_scalar_lerp_are_torchs_bits(weight):
    """The fusion rule rounds the weight to the row's dtype and takes ``w - 1`` there, as ATen's Scalar: compiled
    graphs and a captured Adam-style update (one native loop) give torch's float32 bits."""
    gen = np.random.default_rng(5)
    a, b = (gen.standard_normal(1000).astype(np.float32) for _ in range(2))
    want = torch.lerp(torch.tensor(a), torch.tensor(b), weight).numpy()
    got = jitorch.compile(lambda x, y: jitorch.lerp(x, y, weight) * 1.0)(jitorch.tensor(a), jitorch.tensor(b))
    np.testing.assert_array_equal(got.numpy(), want)
    x, y = jitorch.tensor(a), jitorch.tensor(b)
    g = jitorch.cpu.CPUGraph()
    with jitorch.cpu.graph(g):
        x.lerp_(y, weight)
    assert g.native, g.native_report()["fallbacks"]
    x.copy_(jitorch.tensor(a))
    g.replay()
    np.testing.assert_array_equal(x.numpy(), want)
