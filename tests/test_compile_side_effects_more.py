"""jitorch.compile repeats Python side effects made through the call's arguments, nested containers and class
attributes, and compiles caches filled on the first call as one whole graph (test_compile_side_effects: the basics)."""

import numpy as np
import torch

import jitorch
from jitorch._compile.side_effects import PythonState
from test_compile_side_effects import _close, _feature_model, _linear

RNG = np.random.default_rng(1)


def _accumulate(x, cache):
    k = x * 2
    cache["k"] = k if "k" not in cache else cache["k"] + k
    return cache["k"].sum()


def test_a_dict_argument_the_call_writes_tensors_into_accumulates_every_call():
    f = jitorch.compile(_accumulate)
    mine, theirs, eager = {}, {}, {}
    x = RNG.standard_normal(3).astype(np.float32)
    for _ in range(6):
        got = f(jitorch.tensor(x), mine)
        want = _accumulate(torch.tensor(x), theirs)
        _close(got, want, atol=1e-5)
        _close(_accumulate(jitorch.tensor(x), eager), want, atol=1e-5)
        _close(mine["k"], theirs["k"], atol=1e-5)
    assert list(mine) == ["k"]


def test_object_list_and_dict_arguments_mutated_every_call():
    class State:
        pass

    def step(x, st, d):
        h = x * 2
        st.last = h
        st.hs.append(h)
        d["n"] += 1
        return h.sum()

    f = jitorch.compile(step)
    st, ref, d, dref = State(), State(), {"n": 0}, {"n": 0}
    st.hs, ref.hs = [], []
    for i in range(5):
        x = RNG.standard_normal(3).astype(np.float32)
        _close(f(jitorch.tensor(x), st, d), step(torch.tensor(x), ref, dref), atol=1e-5)
        assert len(st.hs) == len(ref.hs) == i + 1 and d == dref == {"n": i + 1}
        _close(st.last, ref.last)
        for got, want in zip(st.hs, ref.hs):
            _close(got, want)


def test_a_batch_dict_argument_holding_tensors_gets_the_calls_appends():
    def step(batch):
        batch["seen"].append(batch["x"].sum())
        return batch["x"] * 3

    f = jitorch.compile(step)
    mine, theirs = {"x": jitorch.ones(2), "seen": []}, {"x": torch.ones(2), "seen": []}
    for i in range(4):
        x = RNG.standard_normal(2).astype(np.float32)
        mine["x"], theirs["x"] = jitorch.tensor(x), torch.tensor(x)
        _close(f(mine), step(theirs))
        assert len(mine["seen"]) == len(theirs["seen"]) == i + 1
        _close(mine["seen"][-1], theirs["seen"][-1], atol=1e-5)


def _stats_model(lib):
    class Counted(lib.nn.Module):
        calls = 0

        def __init__(self):
            super().__init__()
            self.stats, self.lin = {"feat": []}, _linear(lib)

        def forward(self, x):
            h = self.lin(x)
            self.stats["feat"].append(h)
            type(self).calls += 1
            return h.relu()
    return Counted()


def test_nested_container_and_class_attribute_change_every_call():
    m, ref = _stats_model(jitorch), _stats_model(torch)
    f = jitorch.compile(m)
    with jitorch.no_grad(), torch.no_grad():
        for step in range(30):
            x = RNG.standard_normal((2, 3)).astype(np.float32)
            _close(f(jitorch.tensor(x)), ref(torch.tensor(x)), atol=1e-5)
    assert len(m.stats["feat"]) == len(ref.stats["feat"]) == 30
    assert type(m).calls == type(ref).calls == 30
    _close(m.stats["feat"][-1], ref.stats["feat"][-1], atol=1e-5)


def test_python_state_watches_arguments_nested_containers_and_classes():
    class Reg:
        seen = 0

    cfg = {"a": {"b": [1]}}
    buf = bytearray(b"ab")

    def fn(x, extra):
        Reg.seen += 1
        return cfg, buf, extra

    extra = [{"n": 0}]
    state = PythonState(fn, None, (None, extra), {})
    Reg.seen += 1
    cfg["a"]["b"].append(2)
    buf.append(1)
    extra[0]["n"] = 1
    assert sorted(state.changes()) == ["argument 1[0] (dict)", "class Reg.seen", "closure buf (set)",
                                       "closure cfg['a']['b'] (list)"]
    state.restore()
    assert Reg.seen == 0 and cfg == {"a": {"b": [1]}} and buf == bytearray(b"ab") and extra == [{"n": 0}]
    assert state.changes() == []


def _lazy_mask_model(lib):
    class L(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.mask = _linear(lib), None

        def forward(self, x):
            if self.mask is None:  # a cache filled on the first call (rotary tables, causal masks)
                self.mask = lib.arange(3, dtype=lib.float32) - 1
            return (self.lin(x) * self.mask).relu()
    return L()


def test_a_cache_filled_on_the_first_call_ends_in_one_whole_graph():
    m, ref = _lazy_mask_model(jitorch), _lazy_mask_model(torch)
    f = jitorch.compile(m)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    for step in range(6):
        if step == 3:  # invalidated, refilled by the next call
            m.mask = ref.mask = None
        if step == 5:  # replaced by another tensor: the whole graph's constant is guarded
            m.mask, ref.mask = jitorch.tensor([2.0, 3.0, 4.0]), torch.tensor([2.0, 3.0, 4.0])
        gy = RNG.standard_normal((2, 3)).astype(np.float32)
        xj, xt = jitorch.tensor(x * (step + 1), requires_grad=True), torch.tensor(x * (step + 1), requires_grad=True)
        out, expected = f(xj), ref(xt)
        _close(out, expected)
        out.backward(jitorch.tensor(gy))
        expected.backward(torch.tensor(gy))
        _close(xj.grad, xt.grad, atol=1e-5)
        _close(m.lin.weight.grad, ref.lin.weight.grad, atol=1e-5)
        _close(m.mask, ref.mask)
        if step == 1:
            (entry,) = f._compiled_call.train_entries
            assert entry.replay is None and entry.side_effects is None and entry.plan is not None
    assert f._compiled_call.train_entries[0].replay is None


def test_an_equal_tuple_stored_every_call_stays_one_graph():
    class S(jitorch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = _linear(jitorch)

        def forward(self, x):
            self.in_shape = tuple(x.shape)
            return self.lin(x).relu()

    m, ref = S(), _linear(torch)
    f = jitorch.compile(m)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    with jitorch.no_grad(), torch.no_grad():
        for step in range(4):
            _close(f(jitorch.tensor(x * step)), ref(torch.tensor(x * step)).relu())
            assert m.in_shape == (2, 3)
    assert all(e.replay is None and e.side_effects is None for e in f._compiled_call.entries)
    assert len(f._compiled_call.entries) <= 2  # the first call's (attribute added) and the steady one


def test_an_append_on_every_call_stays_in_replay_after_its_second_call():
    m, ref = _feature_model(jitorch), _feature_model(torch)
    f = jitorch.compile(m)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    with jitorch.no_grad(), torch.no_grad():
        for step in range(5):
            _close(f(jitorch.tensor(x * step)), ref(torch.tensor(x * step)))
            assert len(m.feats) == len(ref.feats) == step + 1
    for got, want in zip(m.feats, ref.feats):
        _close(got, want)
    (entry,) = f._compiled_call.entries
    assert entry.side_effects is not None and entry.replay is not None and entry.replay.bailed is None


def test_an_attribute_the_call_adds_leaves_the_others_guarded():
    def model(lib):
        class N(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin, self.scale, self.seen = _linear(lib), 2.0, []

            def forward(self, x):
                self.n_seen = x.shape[0]  # added by the first call
                self.seen.append(x.shape[0])  # every call: the entry stays in replay
                return self.lin(x).relu() * self.scale
        return N()

    m, ref = model(jitorch), model(torch)
    f = jitorch.compile(m)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    with jitorch.no_grad(), torch.no_grad():
        for step in range(6):
            if step == 3:
                m.scale = ref.scale = 3.0
            _close(f(jitorch.tensor(x)), ref(torch.tensor(x)))
    assert m.seen == ref.seen and m.n_seen == ref.n_seen == 2
    entries = f._compiled_call.entries
    assert len(entries) >= 2  # the scale change retraced
    assert all(e.replay is not None and e.replay.bailed is None for e in entries)
    guards = dict(entries[-1].guards)["attributes"]
    assert ("scale", 3.0) in guards[0] and guards[0][-1][0] == "n_seen"


def test_print_and_logging_in_a_compiled_function_and_module_happen_on_every_call(capsys, caplog):
    # torch.compile breaks the graph at print and logging calls and runs them each call; a whole-call graph would
    # print once, while tracing. The tensor work stays compiled (replayed with its Python).
    import logging

    log = logging.getLogger("jitorch.test.print")

    class Net(jitorch.nn.Module):
        def forward(self, x):
            h = (x * 2).exp()
            print("forward", tuple(x.shape), float(h.sum()) > 0)
            log.warning("batch of %d", x.shape[0])
            return h + 1

    def f(x):
        print("f sees", x.shape[0])
        return x.tanh() * 3

    fns = {"function": jitorch.compile(f), "module": jitorch.compile(Net()),
           "reduce-overhead": jitorch.compile(f, mode="reduce-overhead")}
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    for name, fn in fns.items():
        capsys.readouterr()
        caplog.clear()
        for _ in range(4):
            got = fn(jitorch.tensor(x))
        want = (torch.tensor(x) * 2).exp() + 1 if name == "module" else torch.tensor(x).tanh() * 3
        _close(got, want, atol=1e-5)
        lines = capsys.readouterr().out.splitlines()
        assert lines == (["forward (4, 3) True"] if name == "module" else ["f sees 4"]) * 4, name
        assert [r.getMessage() for r in caplog.records] == (["batch of 4"] * 4 if name == "module" else []), name
