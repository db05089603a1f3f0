"""Plain values a compiled function reads by name (globals, closure cells, attributes of objects held there) are
guarded by value: rebinding one retraces instead of reusing the value the first trace baked in. Python-level random
numbers run the function eagerly. Each case checks the compiled result against the same code run eagerly."""
import random
import warnings

import numpy as np
import pytest

import jitorch
from jitorch import nn

SCALE = 2.0
ACT = jitorch.relu


def scaled(x):
    return x * SCALE


def activated(x):
    return ACT(x) + 1


def _check(compiled, eager, *args):
    np.testing.assert_allclose(compiled(*args).detach().numpy(), eager(*args).detach().numpy(), rtol=1e-6)


def test_a_rebound_global_number_retraces(monkeypatch):
    f = jitorch.compile(scaled)
    x = jitorch.randn(5)
    _check(f, scaled, x)
    monkeypatch.setitem(globals(), "SCALE", 3.0)
    _check(f, scaled, x)
    assert len(f.entries) == 2
    monkeypatch.setitem(globals(), "SCALE", 2.0)
    _check(f, scaled, x)
    assert len(f.entries) == 2  # the first entry serves again


def test_a_rebound_global_number_retraces_a_training_graph(monkeypatch):
    f = jitorch.compile(scaled)
    for value in (2.0, 3.0, -1.5):
        monkeypatch.setitem(globals(), "SCALE", value)
        w = jitorch.randn(4, requires_grad=True)
        up = jitorch.randn(4)
        f(w).backward(up)
        np.testing.assert_allclose(w.grad.numpy(), value * up.numpy(), rtol=1e-6)


def test_a_rebound_global_function_retraces(monkeypatch):
    f = jitorch.compile(activated)
    x = jitorch.randn(6)
    _check(f, activated, x)
    monkeypatch.setitem(globals(), "ACT", jitorch.sigmoid)
    _check(f, activated, x)


def test_closure_cells_dict_entries_and_object_attributes_are_read_every_call():
    class Cfg:
        pass

    cfg, table = Cfg(), {"shift": 1.0}
    cfg.temperature = 1.0
    temp = 1.0

    def f(x):
        return x / cfg.temperature * temp + table["shift"]

    compiled = jitorch.compile(f)
    x = jitorch.randn(3, 4)
    for t, c, s in [(1.0, 1.0, 1.0), (4.0, 1.0, 1.0), (4.0, 0.5, 1.0), (4.0, 0.5, -2.0)]:
        cfg.temperature, temp, table["shift"] = t, c, s
        _check(compiled, f, x)


def test_a_compiled_module_reads_its_forwards_globals_and_plain_objects():
    class Settings:
        scale = None

    settings = Settings()
    settings.scale = 0.5

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.cfg = settings

        def forward(self, x):
            return self.lin(x) * self.cfg.scale * SCALE

    block = Block()
    compiled = jitorch.compile(block)
    x = jitorch.randn(2, 4)
    for value in (0.5, 3.0):
        settings.scale = value
        with jitorch.no_grad():
            _check(compiled, block, x)


def test_the_recompile_warning_names_the_changing_global(monkeypatch):
    f = jitorch.compile(scaled)
    x = jitorch.randn(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(jitorch.compiler.config.recompile_limit + 2):
            monkeypatch.setitem(globals(), "SCALE", float(i))
            _check(f, scaled, x)
    messages = [str(w.message) for w in caught if "recompile_limit" in str(w.message)]
    assert len(messages) == 1 and "global SCALE" in messages[0], messages


@pytest.mark.parametrize("source", ["module", "function", "numpy"])
def test_python_random_numbers_run_eagerly(source):
    if source == "module":
        def f(x):
            return x * random.uniform(0.5, 1.5)
    elif source == "function":
        draw = random.random

        def f(x):
            return x * draw()
    else:
        def f(x):
            return x * float(np.random.rand())

    compiled = jitorch.compile(f)
    x = jitorch.ones(3)
    seen = {round(compiled(x).tolist()[0], 6) for _ in range(10)}
    assert len(seen) == 10
    report = jitorch.compiler.explain(f)(x)
    assert any("random numbers" in r for r in report.break_reasons) or "random" in str(report), str(report)
    with pytest.raises(RuntimeError, match="random numbers"):
        jitorch.compile(f, fullgraph=True)(x)


def test_reduce_overhead_captures_again_when_a_global_changes(monkeypatch):
    f = jitorch.compile(scaled, mode="reduce-overhead")
    x = jitorch.randn(8)
    for value in (2.0, 2.0, 2.0, 5.0, 5.0, -1.0):
        monkeypatch.setitem(globals(), "SCALE", value)
        np.testing.assert_allclose(f(x).numpy(), value * x.numpy(), rtol=1e-6)
    assert f.recaptures == 2


class _Tables(nn.Module):
    """Reads an array of a list of NumPy arrays as a graph constant, and the list's length."""

    def __init__(self, n):
        super().__init__()
        self.tables = [np.arange(3, dtype=np.float32) + i for i in range(n)]

    def forward(self, x):
        return x * x.new_tensor(self.tables[1]) + len(self.tables)


@pytest.mark.parametrize("n", [4, 200])
def test_an_array_of_a_list_baked_into_the_graph_and_rebound_retraces(n):
    m = _Tables(n)
    f, x = jitorch.compile(m), jitorch.ones(3)
    _check(f, m, x)
    m.tables[1] = np.array([5.0, 6.0, 7.0], np.float32)
    _check(f, m, x)
    m.tables.append(np.zeros(3, np.float32))
    _check(f, m, x)
    m.tables = list(m.tables[:3])
    _check(f, m, x)


def test_an_array_of_a_short_list_changed_in_place_retraces():
    m = _Tables(4)
    f, x = jitorch.compile(m), jitorch.ones(3)
    _check(f, m, x)
    m.tables[1][0] = 9.0
    _check(f, m, x)
    np.testing.assert_allclose(f(x).numpy(), [13.0, 6.0, 7.0])


def test_a_long_list_of_arrays_read_only_for_its_length_keeps_one_graph():
    m = _Tables(200)
    f, x = jitorch.compile(m), jitorch.ones(3)
    for _ in range(3):
        _check(f, m, x)
    assert len(f._compiled_call.entries) == 1
