"""Max pooling and its disjoint-window gradient as native kernels (jitorch/cpu/_lower_pool.py), in CPU graph replay
and in compiled training graphs: values, indices and input gradients equal torch's, ties and NaN included, and the
pools the kernels cannot express replay their rows instead."""
import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as F
from jitorch._compile import native_lowering
from jitorch.cpu import CPUGraph, graph
from jitorch.cpu._lower import NotLowerable

# (pool dims, input spatial size, keywords, max_pool native, scatter native)
CASES = [
    (2, (8, 8), dict(kernel_size=2), True, True),
    (2, (9, 9), dict(kernel_size=3), True, True),
    (2, (6, 8), dict(kernel_size=(2, 1), stride=(2, 2)), True, True),  # gaps between windows: zero gradient there
    (2, (7, 7), dict(kernel_size=2), True, False),  # floor mode drops the last row: the strides do not tile
    (2, (8, 8), dict(kernel_size=3, stride=2), True, None),  # overlapping windows: a scatter-add, not this row
    (2, (8, 8), dict(kernel_size=2, padding=1), False, False),
    (1, (10,), dict(kernel_size=2), True, True),
    (3, (4, 6, 4), dict(kernel_size=2), True, True),
]


def _data(rng, shape, dtype):
    # Halves make ties, clipping at 0 makes runs of equal zeros (a ReLU's output), and a few NaN.
    x = np.maximum(np.round(rng.standard_normal(shape) * 2) / 2, 0).astype(dtype)
    x.reshape(-1)[rng.choice(x.size, max(1, x.size // 40), replace=False)] = np.nan
    return x


def _pool(lib, nd):
    return getattr(lib.nn.functional, f"max_pool{nd}d")


def _torch_reference(nd, x, gup, kw):
    tx = torch.tensor(x, requires_grad=True)
    values, indices = _pool(torch, nd)(tx, return_indices=True, **kw)
    (values * torch.tensor(gup)).sum().backward()
    return values.detach().numpy(), indices.numpy(), tx.grad.numpy()


def _fallbacks(report):
    return {step.split(" = ")[-1].split("(")[0] for step, _ in report}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nd, spatial, kw, pool_native, scatter_native", CASES)
def test_cpu_graph_pools_match_torch(nd, spatial, kw, pool_native, scatter_native, dtype):
    rng = np.random.default_rng(nd + len(kw))
    shape = (3, 2) + spatial
    x = jitorch.tensor(_data(rng, shape, dtype), requires_grad=True)
    out_shape = _pool(torch, nd)(torch.zeros(shape), **kw).shape
    gup = jitorch.tensor(rng.standard_normal(out_shape).astype(dtype))
    g = CPUGraph()
    with graph(g):
        values, indices = _pool(jitorch, nd)(x, return_indices=True, **kw)
        (values * gup).sum().backward()
    fallbacks = _fallbacks(g.native_report()["fallbacks"])
    assert ("max_pool" not in fallbacks) == pool_native, fallbacks
    if scatter_native is not None:
        assert ("max_pool_scatter" not in fallbacks) == scatter_native, fallbacks
    for _ in range(3):  # new data through the static input and upstream gradient
        xd, gd = _data(rng, shape, dtype), rng.standard_normal(out_shape).astype(dtype)
        with jitorch.no_grad():
            x.copy_(jitorch.tensor(xd))
            gup.copy_(jitorch.tensor(gd))
        g.replay()
        want_v, want_i, want_g = _torch_reference(nd, xd, gd, kw)
        np.testing.assert_array_equal(values.detach().numpy(), want_v)
        np.testing.assert_array_equal(indices.numpy(), want_i)
        np.testing.assert_array_equal(x.grad.numpy(), want_g)


@pytest.mark.parametrize("nd, spatial, kw, pool_native, scatter_native", CASES)
def test_compiled_training_pools_match_torch(nd, spatial, kw, pool_native, scatter_native):
    rng = np.random.default_rng(10 + nd)
    shape = (2, 3) + spatial

    def f(x, w, gup):
        values, indices = _pool(jitorch, nd)((x * w).relu(), return_indices=True, **kw)
        return (values * gup).sum(), indices

    compiled = jitorch.compile(f)
    w = jitorch.tensor(rng.standard_normal((3,) + (1,) * nd).astype(np.float32), requires_grad=True)
    for _ in range(4):
        xd = rng.standard_normal(shape).astype(np.float32)
        x = jitorch.tensor(xd, requires_grad=True)
        out_shape = _pool(torch, nd)(torch.zeros(shape), **kw).shape
        gd = rng.standard_normal(out_shape).astype(np.float32)
        loss, indices = compiled(x, w, jitorch.tensor(gd))
        loss.backward()
        tx, tw = torch.tensor(xd, requires_grad=True), torch.tensor(w.detach().numpy(), requires_grad=True)
        tv, ti = _pool(torch, nd)((tx * tw).relu(), return_indices=True, **kw)
        (tv * torch.tensor(gd)).sum().backward()
        np.testing.assert_allclose(loss.item(), float((tv * torch.tensor(gd)).sum().detach()), rtol=1e-4, atol=1e-6)
        np.testing.assert_array_equal(indices.numpy(), ti.numpy())
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-5)
        w.grad = None
    plan = compiled.train_entries[0].plan
    steps = plan.fwd.native.report()["python_steps"] + plan.bwd.native.report()["python_steps"]
    python = {name.rstrip("_0123456789") for name, _ in steps}
    assert ("max_pool" not in python) == pool_native, python
    if scatter_native is not None:
        assert ("max_pool_scatter" not in python) == scatter_native, python


def test_a_lowering_refused_after_registering_its_results_runs_its_row(monkeypatch):
    """A row whose lowering registered its output and a constant, then refused, must run as its Python row with
    memory of its own: before, the kept registration aliased the row's result into the native plan (wrong
    gradients, then heap corruption)."""
    real = native_lowering._ref

    def refuse_constants(plan, arr, nodes, t):
        if arr.dtype == np.int64 and arr.flags.owndata and arr.shape == (8, 8):  # the scatter's position table
            raise NotLowerable("refused for the test")
        return real(plan, arr, nodes, t)

    monkeypatch.setattr(native_lowering, "_ref", refuse_constants)
    rng = np.random.default_rng(3)
    conv = jitorch.nn.Conv2d(2, 3, 3, padding=1)
    tconv = torch.nn.Conv2d(2, 3, 3, padding=1)
    with torch.no_grad():
        tconv.weight.copy_(torch.tensor(conv.weight.detach().numpy()))
        tconv.bias.copy_(torch.tensor(conv.bias.detach().numpy()))
    compiled = jitorch.compile(lambda x: F.max_pool2d(conv(x).relu(), 2).sum())
    for _ in range(5):
        xd = rng.standard_normal((4, 2, 8, 8)).astype(np.float32)
        compiled(jitorch.tensor(xd)).backward()
        torch.nn.functional.max_pool2d(tconv(torch.tensor(xd)).relu(), 2).sum().backward()
        np.testing.assert_allclose(conv.weight.grad.numpy(), tconv.weight.grad.numpy(), rtol=1e-4, atol=1e-5)
        conv.weight.grad, tconv.weight.grad = None, None
    steps = compiled.train_entries[0].plan.bwd.native.report()["python_steps"]
    assert any(name.startswith("max_pool_scatter") for name, _ in steps), steps
