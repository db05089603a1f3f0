"""jitorch.compile replays Python side effects on every call (as torch.compile does): appends, pops, attribute stores
and counters of state reachable from outside the call run once per call, the tensor work still compiled."""
import warnings

import numpy as np
import torch

import jitorch
from jitorch._compile.side_effects import PythonState

RNG = np.random.default_rng(0)
W = RNG.standard_normal((3, 3)).astype(np.float32)
B = RNG.standard_normal(3).astype(np.float32)


def _close(a, b, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a.tolist()), b.detach().numpy(), rtol=1e-5, atol=atol)


def _linear(lib):
    lin = lib.nn.Linear(3, 3)
    with lib.no_grad():
        lin.weight.copy_(lib.tensor(W))
        lin.bias.copy_(lib.tensor(B))
    return lin


def _feature_model(lib):
    class Q(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.feats, self.lin = [], _linear(lib)

        def forward(self, x):
            h = self.lin(x)
            self.feats.append(h)
            return h.relu()
    return Q()


def test_list_append_on_module_happens_every_call_with_each_calls_values():
    m, ref = _feature_model(jitorch), _feature_model(torch)
    f = jitorch.compile(m)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    with jitorch.no_grad(), torch.no_grad():
        for step in range(4):
            out = f(jitorch.tensor(x * step))
            expected = ref(torch.tensor(x * step))
            _close(out, expected)
            assert len(m.feats) == len(ref.feats) == step + 1
            for got, want in zip(m.feats, ref.feats):
                _close(got, want)
    assert len({id(t) for t in m.feats}) == 4  # a new tensor per call, not the trace's one again
    (entry,) = f._compiled_call.entries
    assert "Q.feats (list)" in entry.side_effects and entry.replay is not None and entry.replay.bailed is None


def test_global_list_append_in_a_compiled_function():
    log = []

    @jitorch.compile
    def h(x):
        log.append(x.shape[0])
        return x + 1

    x = jitorch.ones(2, 3)
    for _ in range(3):
        _close(h(x), torch.ones(2, 3) + 1)
    assert log == [2, 2, 2]
    assert len(h.entries) == 1


def test_pop_from_a_list_feeds_each_calls_value():
    def model(lib):
        class P(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.masks = []

            def forward(self, x):
                return x * x.new_tensor(self.masks.pop(0))
        return P()

    m, ref = model(jitorch), model(torch)
    f = jitorch.compile(m)
    for step in range(4):
        mask = np.array([step, 2.0, 3.0], np.float32)
        m.masks.append(mask)
        ref.masks.append(mask)
        _close(f(jitorch.ones(3)), ref(torch.ones(3)))
        assert len(m.masks) == len(ref.masks) == 0
    assert len(f._compiled_call.entries) == 1


def test_attribute_store_of_a_graph_tensor_and_a_counter():
    def model(lib):
        class A(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.calls, self.lin = 0, _linear(lib)

            def forward(self, x):
                attn = self.lin(x).softmax(-1)
                self.last_attn = attn
                self.calls += 1
                return attn * 2
        return A()

    m, ref = model(jitorch), model(torch)
    f = jitorch.compile(m)
    with warnings.catch_warnings(record=True) as log, jitorch.no_grad(), torch.no_grad():
        warnings.simplefilter("always")
        for step in range(12):  # past recompile_limit (8): no recompiles, no fallback
            x = RNG.standard_normal((2, 3)).astype(np.float32)
            _close(f(jitorch.tensor(x)), ref(torch.tensor(x)))
            _close(m.last_attn, ref.last_attn)
            assert m.calls == ref.calls == step + 1
    assert not log
    (entry,) = f._compiled_call.entries
    assert "A.calls" in entry.side_effects and "A.last_attn" in entry.side_effects


def test_dict_and_closure_counters_count_every_call():
    cfg = {"k": 0}
    seen = 0

    def g(x):
        nonlocal seen
        cfg["k"] += 1
        seen += 1
        return x * 2

    f = jitorch.compile(g)
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        for _ in range(12):
            _close(f(jitorch.ones(2)), torch.ones(2) * 2)
    assert cfg == {"k": 12} and seen == 12 and not log
    assert len(f.entries) == 1


def test_function_without_side_effects_stays_one_whole_graph():
    def g(x):
        return (x * 2).exp() + 1

    f = jitorch.compile(g)
    for _ in range(3):
        _close(f(jitorch.ones(4)), (torch.ones(4) * 2).exp() + 1)
    (entry,) = f.entries
    assert entry.side_effects is None and entry.replay is None
    assert f.segment_kernels(entry) == [["mul", "exp", "add"]]
    report = jitorch.compiler.explain(g)(jitorch.ones(4))
    assert (report.graph_count, report.graph_break_count, report.replay_reasons) == (1, 0, [])


def test_explain_says_why_a_function_runs_in_replay_mode():
    log = []

    def h(x):
        log.append(1)
        return (x * 2).exp()

    report = jitorch.compiler.explain(h)(jitorch.ones(4))
    assert report.replay_reasons and "closure log (list)" in report.replay_reasons[0]
    assert report.kernels == [["mul", "exp"]] and report.graph_break_count == 0
    assert "Replay mode: Python side effects" in str(report)


def test_fullgraph_allows_side_effects_and_replays_them():
    log = []
    f = jitorch.compile(lambda x: log.append(x) or x.sin(), fullgraph=True)
    for i in range(3):
        _close(f(jitorch.ones(2) * i), (torch.ones(2) * i).sin())
    assert [t.tolist() for t in log] == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    assert len(f.entries) == 1  # no recompile per call


def test_reduce_overhead_with_side_effects_warns_once_and_replays_them():
    log = []

    def h(x):
        log.append(x.shape[0])
        return x * 2 + 1

    f = jitorch.compile(h, mode="reduce-overhead")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        outs = [f(jitorch.ones(2) * i) for i in range(4)]
    for i, out in enumerate(outs):
        _close(out, torch.ones(2) * i * 2 + 1)
    assert log == [2, 2, 2, 2] and f.graph is None
    assert len(seen) == 1 and "changes Python state" in str(seen[0].message)

    plain = jitorch.compile(lambda x: x * 2 + 1, mode="reduce-overhead")
    for _ in range(3):
        plain(jitorch.ones(2))
    assert plain.graph is not None and plain.fallback_reason is None  # still captured


def test_training_gradients_through_an_appended_tensor_match_torch():
    m, ref = _feature_model(jitorch), _feature_model(torch)
    f = jitorch.compile(m)
    for step in range(3):
        x = RNG.standard_normal((4, 3)).astype(np.float32)
        up = RNG.standard_normal((4, 3)).astype(np.float32)
        up2 = RNG.standard_normal((4, 3)).astype(np.float32)
        out = f(jitorch.tensor(x))
        (out * jitorch.tensor(up)).sum().add((m.feats[-1] * jitorch.tensor(up2)).sum()).backward()
        r = ref(torch.tensor(x))
        ((r * torch.tensor(up)).sum() + (ref.feats[-1] * torch.tensor(up2)).sum()).backward()
        assert len(m.feats) == len(ref.feats) == step + 1
        _close(m.feats[-1], ref.feats[-1])
        _close(m.lin.weight.grad, ref.lin.weight.grad, atol=1e-5)
        _close(m.lin.bias.grad, ref.lin.bias.grad, atol=1e-5)
    (entry,) = f._compiled_call.train_entries
    assert entry.side_effects is not None and entry.replay is not None and entry.replay.bailed is None


def test_a_list_the_code_may_append_to_is_still_guarded_by_its_short_entries():
    class S(jitorch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scales, self.log = [2.0], []

        def forward(self, x, record=False):
            if record:
                self.log.append(x)
            return x * self.scales[0]

    m = S()
    f = jitorch.compile(m)
    _close(f(jitorch.ones(2)), torch.ones(2) * 2)
    m.scales[0] = 3.0  # read as a constant by the graph: must retrace
    _close(f(jitorch.ones(2)), torch.ones(2) * 3)
    assert all(e.side_effects is None for e in f._compiled_call.entries)


def test_python_state_snapshot_finds_and_restores_changes():
    class Cfg:
        pass

    cfg, store = Cfg(), {"a": [1]}
    cfg.k = 1

    def fn(x):
        return cfg, store

    state = PythonState(fn, None)
    cfg.k += 1
    store["a"].append(2)
    store["b"] = 0
    assert sorted(state.changes()) == ["closure cfg.k", "closure store (dict)", "closure store['a'] (list)"]
    state.restore()
    assert cfg.k == 1 and store == {"a": [1]} and state.changes() == []
