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
from jitorch._compile.reduce_overhead import compile_reduce_overhead


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


def test_outputs_of_earlier_calls_stay_valid_on_the_cpu():
    # torch.compile's CPU reduce-overhead reuses no buffers: a script keeps each step's result (CUDA graph outputs
    # are retired by the next call instead: tests/test_cuda_graphs.py)
    f = compile_reduce_overhead(lambda x: x * 2 + 1)
    outs = [f(jitorch.full((3,), float(i))) for i in range(4)]
    assert [o.tolist() for o in outs] == [[2 * i + 1.0] * 3 for i in range(4)]
    assert f.generation == 3  # the capture and two replays (the warm-up runs eagerly)


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


@pytest.mark.parametrize("other", [
    lambda: jitorch.arange(12.0).reshape(3, 4) / 10,
    lambda: jitorch.arange(8.0, dtype=jitorch.float64).reshape(2, 4) / 10,
    lambda: (jitorch.arange(8.0).reshape(4, 2) / 10).t(),
])
def test_other_inputs_capture_again(other):
    # torch.compile traces again for another shape, dtype or layout (the last, smaller batch): so does a capture
    f = compile_reduce_overhead(lambda x: x.exp())
    base = jitorch.arange(8.0).reshape(2, 4) / 10
    for x in (base, base, other(), other(), base):
        np.testing.assert_allclose(f(x).numpy(), x.exp().numpy(), rtol=1e-6)
    assert f.recaptures == 2


@pytest.mark.skipif(jitorch.cuda.is_available(), reason="needs a machine without CUDA")
def test_an_input_on_a_device_there_is_none_of_raises():
    with pytest.raises(RuntimeError, match="device"):
        jitorch.zeros(2, 4, device="cuda")


def test_non_tensor_arguments_are_baked_and_captured_again_when_they_change():
    f = compile_reduce_overhead(lambda x, scale: x * scale)
    f(jitorch.ones(2), 3.0)
    assert f(jitorch.ones(2), 3.0).tolist() == [3.0, 3.0]
    assert f(jitorch.ones(2), 4.0).tolist() == [4.0, 4.0]
    assert f(jitorch.ones(2), 4.0).tolist() == [4.0, 4.0] and f.recaptures == 1


def test_module_attributes_and_modes_are_baked_and_captured_again():
    class Temperature(jitorch.nn.Module):
        def __init__(self):
            super().__init__()
            self.temperature = 1.0
            self.drop = jitorch.nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(x) / self.temperature

    m = Temperature().eval()
    f = compile_reduce_overhead(m.forward, module=m)
    with jitorch.no_grad():
        for t in (1.0, 1.0, 1.0, 0.5, 0.25):
            m.temperature = t
            assert f(jitorch.ones(2)).tolist() == [1 / t, 1 / t]
        m.train()
        assert set(f(jitorch.ones(1000)).unique().tolist()) <= {0.0, 8.0}  # dropout on: 1 / 0.5 / 0.25


def test_python_side_effects_run_on_every_call_uncaptured():
    calls = []

    def f(x):
        calls.append(1)
        return x + 1
    g = compile_reduce_overhead(f)
    with pytest.warns(UserWarning, match="changes Python state"):  # once: the warm-up saw the append
        for v in range(5):
            assert g(jitorch.full((2,), float(v))).tolist() == [v + 1.0] * 2
    assert len(calls) == 5 and g.graph is None  # as torch.compile, which replays them; a capture would skip them


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


def test_a_function_that_reads_values_back_runs_compiled_around_them():
    def f(x):
        if x.sum() > 0:  # a data-dependent branch: a capture would freeze it
            x = x * 2
        return x.relu() + 1

    g = compile_reduce_overhead(f)
    for sign in (1.0, 1.0, -1.0, 1.0, -1.0):
        x = jitorch.tensor([1.0, -2.0, 3.0]) * sign
        assert g(x).tolist() == f(x).tolist()
    assert g.graph is None and "reads tensor values back" in g.fallback_reason


def test_a_closure_tensor_that_requires_grad_keeps_autograd_over_calls():
    """A capture carries no autograd: a call reading a tensor that requires grad by name (not an argument, not a
    parameter) runs through the default compiled path, so every call's output requires grad and gradients
    accumulate as torch's."""
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal(4).astype(np.float32)
    xs = [rng.standard_normal((2, 4)).astype(np.float32) for _ in range(3)]
    ups = [rng.standard_normal(2).astype(np.float32) for _ in range(3)]
    w, tw = jitorch.tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    f = compile_reduce_overhead(lambda t: (t * w).sum(-1))
    for x, up in zip(xs, ups):
        y, ty = f(jitorch.tensor(x)), (torch.tensor(x) * tw).sum(-1)
        assert y.requires_grad
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-6)
        y.backward(jitorch.tensor(up))
        ty.backward(torch.tensor(up))
        np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)
    with jitorch.no_grad():  # no autograd needed: captured and replayed
        for x in xs:
            y = f(jitorch.tensor(x))
            np.testing.assert_allclose(y.numpy(), (x * w0).sum(-1), rtol=1e-6)
    assert not y.requires_grad and f.graph is not None


def test_a_global_module_read_by_name_keeps_autograd():
    torch.manual_seed(0)
    ref = torch.nn.Linear(3, 2)
    net = jitorch.nn.Linear(3, 2)
    with jitorch.no_grad():
        net.weight.copy_(jitorch.tensor(ref.weight.detach().numpy()))
        net.bias.copy_(jitorch.tensor(ref.bias.detach().numpy()))
    f = compile_reduce_overhead(lambda t: net(t).sum())
    x = np.random.default_rng(4).standard_normal((5, 3)).astype(np.float32)
    for _ in range(3):
        y = f(jitorch.tensor(x))
        assert y.requires_grad
        y.backward()
        ref(torch.tensor(x)).sum().backward()
    np.testing.assert_allclose(net.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(net.bias.grad.numpy(), ref.bias.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_a_side_effect_through_an_argument_is_not_captured():
    """A dict the caller passes in and the step updates (a step counter) must change on every call, as in eager."""
    def step(x, state):
        state["n"] = state.get("n", 0) + 1
        return (x * 2).sum()

    cf, state = jitorch.compile(step, mode="reduce-overhead"), {}
    with pytest.warns(UserWarning, match="changes Python state"):
        outs = [cf(jitorch.ones(3), state).item() for _ in range(5)]
    assert state == {"n": 5} and outs == [6.0] * 5



@pytest.mark.parametrize("index", [np.s_[:, ::4], np.s_[::-1], np.s_[1:3, ::-2], np.s_[::2, 1], np.s_[2:2]])
def test_argument_spans_cover_every_byte_a_strided_view_touches(index):
    """Overlap checks between arguments and written buffers use these spans: a strided view reaches past
    ``start + nbytes`` (``x[:, ::4]`` and ``x[1]`` share elements)."""
    from jitorch.runtime.host_pointer import byte_span as _span, data_address

    base = np.zeros((4, 8), np.float32)
    view = base[index]
    low, high = _span(view)
    if view.size == 0:
        assert low == high
        return
    addresses = [data_address(view) + int(np.dot(i, view.strides)) for i in np.ndindex(view.shape)]
    assert low <= min(addresses) and max(addresses) + view.itemsize <= high
    assert high - low <= base.nbytes
