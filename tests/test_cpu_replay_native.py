"""CPU graphs replayed as native code (issue 6): the one-call path is taken, equals torch, and falls back correctly.

Each test zeroes the graph's outputs before every replay (a replay that writes nothing cannot pass) and feeds new
inputs by copying into the static inputs, as with CUDA graphs.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.cpu import CPUGraph, graph
from training_helpers import assert_replay_follows_seed, zero


def _pair(gen, *shape, scale=1.0, dtype=np.float32):
    a = (gen.standard_normal(shape) * scale).astype(dtype)
    return jitorch.tensor(a), torch.tensor(a)


def _rnn(lib, h, xs, w, u, b, steps):
    for t in range(steps):
        h = lib.tanh(h @ w + xs[t] @ u + b)
    return h


def test_rnn_loop_is_one_native_call_and_matches_torch():
    gen = np.random.default_rng(0)
    (w, tw), (u, tu), (b, tb) = (_pair(gen, *s, scale=0.1) for s in ((64, 64), (64, 64), (1, 64)))
    h0, xs = jitorch.zeros(1, 64), jitorch.zeros(30, 1, 64)
    g = CPUGraph()
    with graph(g):
        h = _rnn(jitorch, h0, xs, w, u, b, 30)
    report = g.native_report()
    assert g.native and report["fallbacks"] == [] and report["segments"] == 1
    assert report["calls"] == 90  # per step: two products and one fused add-add-tanh loop
    for _ in range(3):
        (nh, th), (nx, tx) = _pair(gen, 1, 64), _pair(gen, 30, 1, 64)
        h0.copy_(nh)
        xs.copy_(nx)
        zero(h)
        g.replay()
        np.testing.assert_allclose(h._data, _rnn(torch, th, tx, tw, tu, tb, 30).numpy(), rtol=1e-5, atol=1e-5)
    # Intermediates nobody holds live in the arena, which reuses memory: far smaller than 90 [1, 64] buffers.
    assert g._native.arena.nbytes <= 8 * 256


def _chain(v, n=100):
    ops = (lambda y: y * 1.01, lambda y: y + 0.1, lambda y: y.tanh(), lambda y: y.sigmoid(), lambda y: y.relu(),
           lambda y: y - 0.05, lambda y: y.exp() * 0.5, lambda y: y.abs().sqrt())
    for i in range(n):
        v = ops[i % len(ops)](v)
    return v


def test_elementwise_chain_fuses_into_one_loop():
    x = jitorch.zeros(1000)
    g = CPUGraph()
    with graph(g):
        out = _chain(x)
    assert g.native and g.native_report()["calls"] == 1
    gen = np.random.default_rng(1)
    for _ in range(3):
        nx, tx = _pair(gen, 1000)
        x.copy_(nx)
        zero(out)
        g.replay()
        np.testing.assert_allclose(out._data, _chain(tx).numpy(), rtol=2e-5, atol=1e-6)


def test_held_intermediates_are_written_and_dead_ones_are_not():
    x = jitorch.zeros(8)
    g = CPUGraph()
    with graph(g):
        kept = x * 3
        out = (kept + 1).exp() * 2
    assert g.native and g.native_report()["calls"] == 1
    assert g._native.arena.nbytes <= 64  # the dead (kept + 1) and exp values stay in registers
    x.copy_(jitorch.arange(8.0) / 8)
    zero(kept, out)
    g.replay()
    tx = torch.arange(8.0) / 8
    np.testing.assert_allclose(kept._data, (tx * 3).numpy(), rtol=1e-6)
    np.testing.assert_allclose(out._data, ((tx * 3 + 1).exp() * 2).numpy(), rtol=1e-6)


@pytest.mark.parametrize("fn", [
    lambda x: x.sum(), lambda x: x.sum(dim=1), lambda x: x.sum(dim=0, keepdim=True), lambda x: x.mean(dim=(0, 2)),
    lambda x: x.amax(dim=-1), lambda x: x.amin(dim=1, keepdim=True), lambda x: x.prod(dim=2),
    lambda x: x.exp().sum(dim=-1, keepdim=True) / x.shape[-1], lambda x: (x > 0).sum(dim=1),
    lambda x: x.transpose(0, 2).sum(dim=0), lambda x: x.double().sum(dim=1) * 2,
])
def test_reductions_replay_natively(fn):
    gen = np.random.default_rng(2)
    x, _ = _pair(gen, 3, 5, 7)
    g = CPUGraph()
    with graph(g):
        out = fn(x)
    assert g.native, g.native_report()
    for _ in range(2):
        nx, tx = _pair(gen, 3, 5, 7)
        x.copy_(nx)
        zero(out)
        g.replay()
        np.testing.assert_allclose(out._data, fn(tx).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shapes, fn", [
    (((5, 7), (7, 3)), lambda a, b: a @ b),
    (((7,), (7, 3)), lambda a, b: a @ b),
    (((5, 7), (7,)), lambda a, b: a @ b),
    (((7,), (7,)), lambda a, b: a @ b),
    (((7, 5), (3, 7)), lambda a, b: a.t() @ b.t()),
    (((70, 80), (80, 90)), lambda a, b: a @ b),  # large enough for the BLAS call
    (((70, 80), (90, 80)), lambda a, b: (a @ b.t()).relu()),
    (((4, 300), (300, 200)), lambda a, b: a @ b),  # rows too wide for one vector: the reduction loop
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmuls_replay_natively(shapes, fn, dtype):
    gen = np.random.default_rng(3)
    a, _ = _pair(gen, *shapes[0], dtype=dtype)
    b, _ = _pair(gen, *shapes[1], dtype=dtype)
    g = CPUGraph()
    with graph(g):
        out = fn(a, b)
    assert g.native, g.native_report()
    for _ in range(2):
        (na, ta), (nb, tb) = _pair(gen, *shapes[0], dtype=dtype), _pair(gen, *shapes[1], dtype=dtype)
        a.copy_(na)
        b.copy_(nb)
        zero(out)
        g.replay()
        tol = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(out._data, fn(ta, tb).numpy(), rtol=tol, atol=tol)


def test_mixed_dtypes_broadcast_and_comparisons():
    i = jitorch.zeros(4, 1, dtype=jitorch.int64)
    f = jitorch.zeros(3, dtype=jitorch.float64)
    g = CPUGraph()
    with graph(g):
        a = (i * f + 1.5) / 2
        mask = a > f
        picked = jitorch.where(mask, a, -a)
        c = i + 2.5
    assert g.native, g.native_report()
    i.copy_(jitorch.tensor([[1], [-2], [3], [0]]))
    f.copy_(jitorch.tensor([0.5, 0.25, 2.0], dtype=jitorch.float64))
    zero(a, mask, picked, c)
    g.replay()
    ti, tf = torch.tensor([[1], [-2], [3], [0]]), torch.tensor([0.5, 0.25, 2.0], dtype=torch.float64)
    ta = (ti * tf + 1.5) / 2
    assert a.tolist() == ta.tolist() and mask.tolist() == (ta > tf).tolist()
    assert picked.tolist() == torch.where(ta > tf, ta, -ta).tolist()
    assert c.tolist() == (ti + 2.5).tolist() and c.dtype == jitorch.float32


def test_in_place_updates_and_restores_run_natively():
    counter = jitorch.zeros(2)
    x = jitorch.tensor([1.0, 2.0])
    g = CPUGraph()
    with graph(g):
        counter.add_(1.0)
        acc = jitorch.zeros(2)
        acc.add_(x)
        acc.mul_(counter)
    assert g.native, g.native_report()
    for expected in (2.0, 3.0, 4.0):
        zero(acc)
        g.replay()
        assert counter.tolist() == [expected] * 2 and acc.tolist() == [expected, 2 * expected]


def test_unlowerable_steps_fall_back_between_native_segments():
    x = jitorch.zeros(3, 4)
    g = CPUGraph()
    with graph(g):
        y = (x * 2).cumsum(dim=1)  # cumsum has no native form here
        z = (y + 1).tanh()
    report = g.native_report()
    assert not g.native and report["segments"] == 3
    assert len(report["fallbacks"]) == 1 and "cumsum" in report["fallbacks"][0][0]
    gen = np.random.default_rng(4)
    nx, tx = _pair(gen, 3, 4)
    x.copy_(nx)
    zero(y, z)
    g.replay()
    np.testing.assert_allclose(z._data, ((tx * 2).cumsum(dim=1) + 1).tanh().numpy(), rtol=1e-6)


def test_overlapping_in_place_update_falls_back():
    # (a dense operand partly overlapping the output is refused, as torch; a strided one is torch's "too hard")
    x = jitorch.zeros(7)
    g = CPUGraph()
    with graph(g):
        x[2:5].add_(x[0:6:2])
    assert not g.native and "another view" in g.native_report()["fallbacks"][0][1]
    x.copy_(jitorch.arange(7.0))
    g.replay()
    assert x.tolist() == [0.0, 1.0, 2.0, 5.0, 8.0, 5.0, 6.0]


def test_random_draws_stay_graph_safe_in_native_replay():
    x = jitorch.zeros(4)
    g = CPUGraph()
    with graph(g):
        out = (x + jitorch.randn(4)).tanh()
    assert g.native and g.native_report()["draws"] == 1
    seen = []
    for _ in range(3):
        zero(out)
        g.replay()
        assert not any(bool((out == s).all()) for s in seen)
        seen.append(out.clone())
    assert_replay_follows_seed(g, out, 5)


def test_dropout_masks_draw_before_one_native_call_and_equal_eager_masks():
    # A random row reads no computed value, so it draws ahead of the native program instead of splitting it.
    gen = np.random.default_rng(3)
    x, _ = _pair(gen, 6, 8)
    w, _ = _pair(gen, 8, 8)
    g = CPUGraph()
    with jitorch.no_grad(), graph(g):
        out = jitorch.nn.functional.dropout((x @ w).relu(), 0.5) * 2 + jitorch.rand(6, 8)
    report = g.native_report()
    assert g.native and report["segments"] == 1 and report["draws"] == 2 and report["fallbacks"] == []
    for seed in (1, 2):
        jitorch.manual_seed(seed)
        zero(out)
        g.replay()
        jitorch.manual_seed(seed)
        with jitorch.no_grad():
            expected = jitorch.nn.functional.dropout((x @ w).relu(), 0.5) * 2 + jitorch.rand(6, 8)
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-6)


def test_python_replay_switch(monkeypatch):
    from jitorch.cpu import graphs
    monkeypatch.setattr(graphs, "NATIVE", False)
    x = jitorch.ones(3)
    g = CPUGraph()
    with graph(g):
        y = x * 5
    zero(y)
    g.replay()
    assert y.tolist() == [5.0] * 3 and not g.native and "disabled" in g.native_report()["error"]
