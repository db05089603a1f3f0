"""vmap's remembered traces (`jitorch/_vmap_cache.py`): a repeated call runs the recorded graph without tracing, and
every change the graph baked in makes it trace again: other data gives the values a fresh trace gives (checked
against torch.func on the same data), and a changed global, closure value, module attribute, rebound tensor, shape
or grad mode retraces."""
from __future__ import annotations

import gc
import importlib

import numpy as np
import pytest
import torch

import jitorch
from jitorch import _vmap_cache

make_fx = importlib.import_module("jitorch.fx.make_fx")  # the module (jitorch.fx.make_fx is also the function)

B = 9


@pytest.fixture
def traces(monkeypatch):
    """How many traces vmap's batched path recorded in this test."""
    count = [0]
    real = make_fx.record_graph

    def spy(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)
    monkeypatch.setattr(make_fx, "record_graph", spy)
    _vmap_cache.clear()
    return count


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _close(got, want, atol=1e-5):
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=atol)


def test_per_sample_gradients_trace_once_and_follow_new_data(traces):
    init = {"0.weight": data(7, 5, seed=10), "0.bias": data(7, seed=11), "2.weight": data(3, 7, seed=12),
            "2.bias": data(3, seed=13)}
    results = {}
    for lib in (jitorch, torch):
        model = lib.nn.Sequential(lib.nn.Linear(5, 7), lib.nn.Tanh(), lib.nn.Linear(7, 3))
        params = {k: lib.tensor(v) for k, v in init.items()}

        def loss(p, x, y, lib=lib, model=model):
            return lib.nn.functional.cross_entropy(lib.func.functional_call(model, p, (x[None],)), y[None])
        per_sample = lib.func.vmap(lib.func.grad(loss), in_dims=(None, 0, 0))
        runs = []
        for step in range(4):
            x, y = lib.tensor(data(B, 5, seed=step)), lib.tensor(np.arange(B) % 3)
            runs.append(per_sample(params, x, y))
            with lib.no_grad():  # a training step between calls: the parameters change in place
                for name, g in runs[-1].items():
                    params[name].sub_(0.5 * g.mean(0))
        results[lib.__name__] = runs
    assert traces[0] == 1
    for got, want in zip(results["jitorch"], results["torch"]):
        for name in want:
            _close(got[name], want[name])


SCALE = 2.0


def test_a_changed_global_or_closure_value_retraces(traces):
    global SCALE
    x = jitorch.tensor(data(B, 4))
    f = jitorch.func.vmap(lambda r: (r * SCALE).sum())
    first = f(x)
    SCALE = 3.0
    try:
        second = f(x)
    finally:
        SCALE = 2.0
    assert traces[0] == 2
    _close(second, first * 1.5)

    def make(shift):
        return jitorch.func.vmap(lambda r: (r + shift).sum())
    _close(make(1.0)(x), (x + 1).sum(1))
    _close(make(5.0)(x), (x + 5).sum(1))


def test_a_changed_module_setting_or_rebound_tensor_retraces(traces):
    act = jitorch.nn.LeakyReLU(0.1)
    mask = [jitorch.ones(4)]
    holder = type("Holder", (), {})()
    holder.mask = jitorch.ones(4)

    def fn(r):
        return (act(r) * holder.mask).sum()
    f = jitorch.func.vmap(fn)
    x = jitorch.tensor(data(B, 4))
    f(x)
    act.negative_slope = 0.5
    _close(f(x), jitorch.nn.functional.leaky_relu(x, 0.5).sum(1))
    holder.mask = jitorch.zeros(4)
    _close(f(x), jitorch.zeros(B))
    assert traces[0] == 3
    holder.mask.add_(2.0)  # an in-place update reaches the graph, which holds that tensor: no retrace
    _close(f(x), 2 * jitorch.nn.functional.leaky_relu(x, 0.5).sum(1))
    assert traces[0] == 3 and mask


def test_other_shapes_and_grad_mode_retrace(traces):
    f = jitorch.func.vmap(lambda r: r.softmax(-1))
    for shape in ((B, 4), (B, 6), (B + 3, 6), (B + 3, 6)):
        x = jitorch.tensor(data(*shape))
        _close(f(x), x.softmax(-1))
    assert traces[0] == 3
    with jitorch.no_grad():
        f(jitorch.tensor(data(B + 3, 6)))
    assert traces[0] == 4


def test_a_call_that_runs_sample_by_sample_is_remembered(traces):
    calls = jitorch.zeros(1)

    def counting(r):
        calls.add_(1)  # a write into a captured tensor: the trace refuses it, the per-sample loop runs it
        return r.sum() * calls[0]
    f = jitorch.func.vmap(counting)
    for seed in range(3):
        x = jitorch.tensor(data(B, 4, seed=seed))
        _close(f(x), x.sum(1) * (seed + 1))  # torch's vmap writes once per call, before every sample's product
    assert calls.item() == 3 and traces[0] == 1


def test_entries_die_with_their_function(traces):
    f = jitorch.func.vmap(lambda r: r.exp())
    f(jitorch.tensor(data(B, 3)))
    assert len(_vmap_cache._ENTRIES) == 1
    del f
    gc.collect()
    assert len(_vmap_cache._ENTRIES) == 0
    jitorch.func.vmap(lambda r: r.exp())(jitorch.tensor(data(B, 3)))
    jitorch.compiler.reset()
    assert len(_vmap_cache._ENTRIES) == 0
