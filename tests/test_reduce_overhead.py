"""``mode="reduce-overhead"`` (issue 6): warm-up, capture, replay by pointer substitution, checks, stale outputs.

Results are compared with torch 2.13 on the same data; the static outputs are zeroed before each replay, so a
replay that writes nothing cannot pass.
"""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

import jitorch
from jitorch._compile.reduce_overhead import OverwrittenOutputError, compile_reduce_overhead


def _rnn_step(h, x, w, u, b):
    return jitorch.tanh(h @ w + x @ u + b)


def _weights(gen):
    return [(gen.standard_normal(s) * 0.2).astype(np.float32) for s in ((16, 16), (8, 16), (1, 16))]


def _zero_graph_outputs(f):
    for o in f.out_spec_leaves:
        if isinstance(o, jitorch.Tensor):
            o._data[...] = 0


def test_replay_matches_torch_over_new_inputs_without_copies():
    gen = np.random.default_rng(0)
    w, u, b = _weights(gen)
    jw, ju, jb = (jitorch.tensor(a) for a in (w, u, b))
    f = compile_reduce_overhead(lambda h, x: _rnn_step(h, x, jw, ju, jb))
    for call in range(5):
        h, x = gen.standard_normal((4, 16)).astype(np.float32), gen.standard_normal((4, 8)).astype(np.float32)
        jh, jx = jitorch.tensor(h), jitorch.tensor(x)
        if f.graph is not None:
            _zero_graph_outputs(f)
        out = f(jh, jx)
        want = torch.tanh(torch.tensor(h) @ torch.tensor(w) + torch.tensor(x) @ torch.tensor(u) + torch.tensor(b))
        np.testing.assert_allclose(out._data, want.numpy(), rtol=1e-5, atol=1e-6)
        assert float(out.sum()) == pytest.approx(float(want.sum()), rel=1e-4, abs=1e-5)
    assert f.graph is not None and f.graph.native
    assert all(s is not None for s in f.slots)  # both inputs are read through substituted pointers
    static_h = f.static[0]._data.copy()
    f(jitorch.ones(4, 16), jitorch.ones(4, 8))
    np.testing.assert_array_equal(f.static[0]._data, static_h)  # the new input was not copied in


def test_output_of_an_earlier_call_raises_after_the_next_call():
    f = compile_reduce_overhead(lambda x: x * 2 + 1)
    f(jitorch.ones(3))
    first = f(jitorch.ones(3))
    kept = first.clone()
    assert first.tolist() == [3.0, 3.0, 3.0]
    second = f(jitorch.zeros(3))
    with pytest.raises(OverwrittenOutputError, match="overwritten by a subsequent run"):
        first + 1
    with pytest.raises(RuntimeError, match="clone"):
        repr(first)
    assert second.tolist() == [1.0, 1.0, 1.0] and kept.tolist() == [3.0, 3.0, 3.0]
    assert f.generation == 2  # the capture and one replay (the warm-up runs eagerly)


def test_output_fed_back_as_input_is_copied_not_aliased():
    gen = np.random.default_rng(1)
    w, u, b = _weights(gen)
    jw, ju, jb = (jitorch.tensor(a) for a in (w, u, b))
    f = compile_reduce_overhead(lambda h, x: _rnn_step(h, x, jw, ju, jb))
    h = jitorch.zeros(1, 16)
    th = torch.zeros(1, 16)
    for _ in range(6):
        x = gen.standard_normal((1, 8)).astype(np.float32)
        h = f(h, jitorch.tensor(x))
        th = torch.tanh(th @ torch.tensor(w) + torch.tensor(x) @ torch.tensor(u) + torch.tensor(b))
        np.testing.assert_allclose(h._data, th.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad, words", [
    (lambda: jitorch.zeros(3, 4), "shape"),
    (lambda: jitorch.zeros(2, 4, dtype=jitorch.float64), "dtype"),
    (lambda: jitorch.zeros(4, 2).t(), "contiguity"),
    (lambda: jitorch.zeros(2, 4, device="meta"), "device"),
])
def test_mismatched_inputs_raise_naming_the_difference(bad, words):
    f = compile_reduce_overhead(lambda x: x.exp())
    f(jitorch.zeros(2, 4))
    f(jitorch.zeros(2, 4))
    with pytest.raises(RuntimeError, match=words):
        f(bad())


def test_non_tensor_arguments_are_baked_and_checked():
    f = compile_reduce_overhead(lambda x, scale: x * scale)
    f(jitorch.ones(2), 3.0)
    assert f(jitorch.ones(2), 3.0).tolist() == [3.0, 3.0]
    with pytest.raises(RuntimeError, match="baked"):
        f(jitorch.ones(2), 4.0)


def test_side_effects_run_at_warm_up_and_capture_only():
    calls = []

    def f(x):
        calls.append(1)
        return x + 1
    g = compile_reduce_overhead(f)
    for v in range(5):
        assert g(jitorch.full((2,), float(v))).tolist() == [v + 1.0] * 2
    assert len(calls) == 2


def test_random_ops_draw_new_numbers_each_call():
    f = compile_reduce_overhead(lambda x: x + jitorch.rand(4))
    seen = [f(jitorch.zeros(4)).clone() for _ in range(4)]
    assert all(not bool((seen[i] == seen[j]).all()) for i in range(4) for j in range(i))


def test_in_place_update_of_an_input_reaches_the_callers_tensor():
    f = compile_reduce_overhead(lambda acc, x: acc.add_(x * 2))
    acc = jitorch.zeros(3)
    for _ in range(4):
        f(acc, jitorch.ones(3))
    assert acc.tolist() == [8.0, 8.0, 8.0]


def test_a_module_call_needing_autograd_runs_the_default_compiled_path():
    # As torch.compile(mode="reduce-overhead") on the CPU: a training forward is compiled (fused forward and
    # backward), not replayed and not eager, and says nothing about it.
    jitorch.manual_seed(0)
    lin = jitorch.nn.Sequential(jitorch.nn.Linear(3, 4), jitorch.nn.GELU(), jitorch.nn.Linear(4, 2))
    twin = copy.deepcopy(lin)
    f = compile_reduce_overhead(lin, module=lin)
    x, upstream = jitorch.randn(5, 3), jitorch.randn(5, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            out = f(x)
            out.backward(upstream)
            twin(x).backward(upstream)
    assert "autograd" in f.fallback_reason and f._default is not None and f._default.train_entries
    np.testing.assert_allclose(out.detach().numpy(), twin(x).detach().numpy(), rtol=1e-6)
    for p, q in zip(lin.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7)
    with jitorch.no_grad():
        g = compile_reduce_overhead(lin, module=lin)
        want = lin(jitorch.ones(2, 3))
        for _ in range(3):
            got = g(jitorch.ones(2, 3))
        np.testing.assert_allclose(got._data, want._data, rtol=1e-6)
