"""smooth_l1_loss / huber_loss / hardswish as rows against torch: values bit for bit on float32 (ATen's formulas, the
native pass), float64/float16 within tolerance, gradients with random upstream gradients (input and target), double
backward, edge values, layouts, broadcasting, 0-d and empty tensors."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jitorch
import jitorch.nn.functional as JF
from helpers import check_op, make_array, tol_for

_EDGES = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3.0, -3.0, 2.999, -2.999, np.inf, -np.inf, 1e30, -1e30], np.float32)


def _inputs(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2).astype(dtype)
    y = (rng.standard_normal(shape) * 2).astype(dtype)
    x.reshape(-1)[:len(_EDGES)] = _EDGES[:x.size].astype(dtype)
    return x, y


def _bits(jt, th):
    a, b = jt.detach().numpy(), th.detach().numpy()
    assert a.dtype == b.dtype and a.shape == b.shape
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    assert same.all(), (np.flatnonzero(~same)[:5], a[~same][:5], b[~same][:5])


@pytest.mark.parametrize("loss,param", [("smooth_l1_loss", "beta"), ("huber_loss", "delta")])
@pytest.mark.parametrize("value", [1.0, 0.5, 0.3, 2.0])
def test_float32_bit_for_bit(loss, param, value):
    x, y = _inputs((64, 96), np.float32)
    kw = {param: value, "reduction": "none"}
    jx, jy = jitorch.tensor(x, requires_grad=True), jitorch.tensor(y, requires_grad=True)
    tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    jl, tl = getattr(JF, loss)(jx, jy, **kw), getattr(TF, loss)(tx, ty, **kw)
    _bits(jl, tl)
    g = np.random.default_rng(5).standard_normal(x.shape).astype(np.float32)
    jl.backward(jitorch.tensor(g))
    tl.backward(torch.tensor(g))
    _bits(jx.grad, tx.grad)
    _bits(jy.grad, ty.grad)


@pytest.mark.parametrize("loss,param", [("smooth_l1_loss", "beta"), ("huber_loss", "delta")])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_values_and_gradients(loss, param, dtype, reduction):
    x, y = _inputs((7, 33), dtype, seed=1)
    x, y = x.clip(-1e3, 1e3), y.clip(-1e3, 1e3)  # half types: no overflowing sums
    atol, rtol = tol_for(dtype)
    if reduction != "none":
        atol, rtol = atol * 10, rtol * 10
    fn = lambda lib: lambda a, b: getattr(lib.nn.functional, loss)(a, b, reduction=reduction, **{param: 0.7})  # noqa: E731
    check_op(fn(jitorch), fn(torch), [x, y], atol=atol, rtol=rtol)


@pytest.mark.parametrize("loss,param", [("smooth_l1_loss", "beta"), ("huber_loss", "delta")])
@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded"])
def test_layouts_broadcasting_small(loss, param, layout):
    x, y = _inputs((20, 30), np.float32, seed=2)
    fn = lambda lib: lambda a, b: getattr(lib.nn.functional, loss)(a, b, reduction="none", **{param: 1.0})  # noqa: E731
    check_op(fn(jitorch), fn(torch), [x, y], layout=layout, atol=1e-6, rtol=1e-6)
    check_op(fn(jitorch), fn(torch), [x, y[0]], atol=1e-6, rtol=1e-6)  # broadcast target (torch warns)
    check_op(fn(jitorch), fn(torch), [np.full((), 1.5, np.float32), np.zeros((), np.float32)])
    check_op(fn(jitorch), fn(torch), [np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)])


@pytest.mark.parametrize("loss,param", [("smooth_l1_loss", "beta"), ("huber_loss", "delta")])
def test_double_backward(loss, param):
    x, y = _inputs((9, 40), np.float64, seed=3)
    rng = np.random.default_rng(4)
    g, gg = rng.standard_normal(x.shape), rng.standard_normal(x.shape)
    results = []
    for lib in (jitorch, torch):
        a, b, gt = (lib.tensor(v, requires_grad=True) for v in (x, y, g))
        out = getattr(lib.nn.functional, loss)(a, b, reduction="none", **{param: 0.8})
        da, db = lib.autograd.grad(out, (a, b), gt, create_graph=True)
        results.append([t.detach().numpy() for t in lib.autograd.grad((da * lib.tensor(gg)).sum() + db.sum(),
                                                                       (a, b, gt))])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_smooth_l1_beta_zero_and_negative():
    x, y = _inputs((5, 6), np.float32)
    check_op(lambda a, b: JF.smooth_l1_loss(a, b, beta=0.0), lambda a, b: TF.smooth_l1_loss(a, b, beta=0.0), [x, y])
    with pytest.raises(RuntimeError, match="negative values for beta"):
        JF.smooth_l1_loss(jitorch.tensor(x), jitorch.tensor(y), beta=-1.0)


def _hardswish_inputs(n, dtype, seed=0):
    x = np.random.default_rng(seed).uniform(-5, 5, n).astype(dtype)
    x[:len(_EDGES)] = _EDGES.astype(dtype)
    x[len(_EDGES)] = np.nan
    return x


def test_hardswish_float32_bit_for_bit():
    x = _hardswish_inputs(4096, np.float32)  # a multiple of ATen's vector width: NaN takes its vectorized blend
    g = np.random.default_rng(1).standard_normal(x.size).astype(np.float32)
    jx, tx = jitorch.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    jo, to = JF.hardswish(jx), TF.hardswish(tx)
    _bits(jo, to)
    a, b = jo.detach().numpy(), to.detach().numpy()
    assert (np.signbit(a) == np.signbit(b))[~np.isnan(b)].all()  # -0.0 below -3, as ATen
    jo.backward(jitorch.tensor(g))
    to.backward(torch.tensor(g))
    _bits(jx.grad, tx.grad)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_hardswish_dtypes_layouts(dtype, layout):
    x = make_array((24, 40), dtype, np.random.default_rng(2), -5, 5)
    x[0, :6] = [-3, 3, 0, -0.0, -4, 2.999]
    atol, rtol = tol_for(dtype)
    check_op(JF.hardswish, TF.hardswish, [x], layout=layout, atol=atol, rtol=rtol)
    check_op(JF.hardswish, TF.hardswish, [np.array(x[0, 1])], atol=atol, rtol=rtol)  # 0-d
    check_op(JF.hardswish, TF.hardswish, [x[:0]], atol=atol, rtol=rtol)  # empty


def test_hardswish_double_backward_and_inplace():
    x = _hardswish_inputs(300, np.float64)[20:]  # no NaN
    rng = np.random.default_rng(3)
    g, gg = rng.standard_normal(x.shape), rng.standard_normal(x.shape)
    results = []
    for lib in (jitorch, torch):
        a, gt = lib.tensor(x, requires_grad=True), lib.tensor(g, requires_grad=True)
        (da,) = lib.autograd.grad(lib.nn.functional.hardswish(a), a, gt, create_graph=True)
        results.append([t.detach().numpy() for t in lib.autograd.grad(da, (a, gt), lib.tensor(gg))])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    y = _hardswish_inputs(1000, np.float32)
    a, b = jitorch.tensor(y), torch.tensor(y)
    JF.hardswish(a, inplace=True)
    TF.hardswish(b, inplace=True)
    _bits(a, b)
