"""mse_loss as a row pair against torch: float32 values and gradients bit for bit through the native pass (a mean's
input gradient within an ulp for an upstream gradient other than 1: the row sees ``g / n``), other dtypes within
tolerance, every reduction with random upstream gradients (input and target), layouts, broadcast target, 0-d and
empty tensors, double backward."""
import warnings

import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as JF
from helpers import check_op, gradgradcheck_op, make_array, tol_for

_EDGES = np.array([0.0, -0.0, 1.0, -1.0, 3.0, -3.0, np.inf, -np.inf, 1e30, -1e30, np.nan], np.float32)


def _inputs(shape, dtype, seed=0, edges=False):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2).astype(dtype)
    y = (rng.standard_normal(shape) * 2).astype(dtype)
    if edges:
        x.reshape(-1)[:len(_EDGES)] = _EDGES[:x.size].astype(dtype)
        y.reshape(-1)[3:3 + len(_EDGES)] = _EDGES[:max(x.size - 3, 0)].astype(dtype)
    return x, y


def _bits(jt, th, ulps=0):
    a, b = jt.detach().numpy(), th.detach().numpy()
    assert a.dtype == b.dtype and a.shape == b.shape
    if ulps:
        np.testing.assert_allclose(a, b, rtol=ulps * np.finfo(a.dtype).eps, atol=0)
        return
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    assert same.all(), (np.flatnonzero(~same)[:5], a[~same][:5], b[~same][:5])


def _pair(lib, x, y, reduction, g):
    a, b = lib.tensor(x, requires_grad=True), lib.tensor(y, requires_grad=True)
    out = lib.nn.functional.mse_loss(a, b, reduction=reduction)
    out.backward(lib.tensor(g))
    return out, a.grad, b.grad


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("n", [300, 4096, 100_003])  # past the native pass's minimum size; odd tails
def test_float32_bit_for_bit(reduction, n):
    x, y = _inputs(n, np.float32, edges=reduction == "none")
    rng = np.random.default_rng(5)
    g = rng.standard_normal(x.shape if reduction == "none" else ()).astype(np.float32)
    (jo, jx, jy), (to, tx, ty) = _pair(jitorch, x, y, reduction, g), _pair(torch, x, y, reduction, g)
    if reduction == "none":
        _bits(jo, to)
    else:
        _bits(jo, to, ulps=4)  # the reduction's summation order: jitorch's own sum/mean
    _bits(jx, tx, ulps=2 if reduction == "mean" else 0)
    _bits(jy, ty, ulps=2 if reduction == "mean" else 0)
    if reduction == "mean":  # the upstream gradient 1 (a plain loss.backward()): bit for bit, as 2 * fl(1/n) = fl(2/n)
        (_, jx, jy), (_, tx, ty) = (_pair(lib, x, y, reduction, np.float32(1)) for lib in (jitorch, torch))
        _bits(jx, tx)
        _bits(jy, ty)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_values_and_gradients(dtype, reduction):
    x, y = _inputs((7, 33), dtype, seed=1)
    atol, rtol = tol_for(dtype)
    if reduction != "none":
        atol, rtol = atol * 10, rtol * 10
    fn = lambda lib: lambda a, b: lib.nn.functional.mse_loss(a, b, reduction=reduction)  # noqa: E731
    check_op(fn(jitorch), fn(torch), [x, y], atol=atol, rtol=rtol)
    check_op(fn(jitorch), fn(torch), [x, y.astype(np.float64)], atol=atol, rtol=rtol)  # promoted


@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded"])
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_layouts_broadcast_0d_empty(layout, reduction):
    x, y = _inputs((20, 30), np.float32, seed=2)
    fn = lambda lib: lambda a, b: lib.nn.functional.mse_loss(a, b, reduction=reduction)  # noqa: E731
    check_op(fn(jitorch), fn(torch), [x, y], layout=layout, atol=1e-6, rtol=1e-6)
    check_op(fn(jitorch), fn(torch), [x, y[0]], atol=1e-6, rtol=1e-6)  # broadcast target
    check_op(fn(jitorch), fn(torch), [np.full((), 1.5, np.float32), np.zeros((), np.float32)])
    check_op(fn(jitorch), fn(torch), [np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)])


def test_broadcast_warning_and_grad_fn_names():
    x, y = _inputs((4, 5), np.float32)
    for lib in (jitorch, torch):
        with pytest.warns(UserWarning, match="Using a target size"):
            lib.nn.functional.mse_loss(lib.tensor(x), lib.tensor(y[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        JF.mse_loss(jitorch.tensor(x), jitorch.tensor(y))
    for reduction in ("none", "mean", "sum"):
        a = jitorch.tensor(x, requires_grad=True)
        assert type(JF.mse_loss(a, jitorch.tensor(y), reduction=reduction).grad_fn).__name__ == "MseLossBackward0"


def test_integer_inputs_raise_as_torch():
    x = make_array((3,), "int64")
    for lib in (jitorch, torch):
        with pytest.raises(NotImplementedError, match="mse_cpu"):
            lib.nn.functional.mse_loss(lib.tensor(x), lib.tensor(x))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_double_backward(reduction):
    x, y = _inputs((9, 40), np.float64, seed=3)
    rng = np.random.default_rng(4)
    g = rng.standard_normal(x.shape if reduction == "none" else ())
    gg = rng.standard_normal(x.shape)
    results = []
    for lib in (jitorch, torch):
        a, b, gt = (lib.tensor(v, requires_grad=True) for v in (x, y, g))
        out = lib.nn.functional.mse_loss(a, b, reduction=reduction)
        da, db = lib.autograd.grad(out, (a, b), gt, create_graph=True)
        results.append([t.detach().numpy() for t in lib.autograd.grad((da * lib.tensor(gg)).sum() + db.sum(),
                                                                       (a, b, gt))])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    fn = lambda a, b: JF.mse_loss(a, b, reduction=reduction)  # noqa: E731
    gradgradcheck_op(fn, [x[:3, :5], y[:3, :5]])
