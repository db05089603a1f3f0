"""The per-call guard paths read what a compiled call depends on through caches (a module tree walked without
generators, attribute names looked up once per set of names, the code's names read without walking the code again).
Each case changes what a cache could hide and checks the compiled result against the same code run eagerly."""
import numpy as np
import pytest

import jitorch
from jitorch import nn
from jitorch._compile.guards import module_tree
from jitorch._compile.reached import NamedObjects

A = nn.Linear(3, 2)
B = nn.Linear(3, 2)


def through_a(x):
    return A(x)


def through_b(x):
    return B(x) * 2


HELPER = through_a


def step(x):
    return (HELPER(x) ** 2).sum()


def _grads(model):
    return [p.grad.numpy().copy() for p in model.parameters()]


def test_module_tree_orders_and_dedupes_as_the_module_iterators():
    shared = nn.Linear(4, 4)
    tied = nn.Linear(4, 4)
    tied.weight = shared.weight
    model = nn.Sequential(shared, nn.BatchNorm1d(4), tied, shared, nn.Sequential(nn.ReLU(), tied))
    model.register_buffer("none_buffer", None)
    model.add_module("absent", None)
    mods, params, buffers = module_tree(model)
    assert mods == list(model.modules())
    assert [id(p) for p in params] == [id(p) for p in model.parameters()]
    assert [id(b) for b in buffers] == [id(b) for b in model.buffers()]


def test_a_rebound_helper_is_followed_to_the_module_it_reaches(monkeypatch):
    compiled = jitorch.compile(step)
    x = jitorch.randn(4, 3)
    for helper, model, other in ((through_a, A, B), (through_b, B, A), (through_a, A, B)):
        monkeypatch.setitem(globals(), "HELPER", helper)
        for p in (*A.parameters(), *B.parameters()):
            p.grad = None
        loss = compiled(x)
        loss.backward()
        got = _grads(model)
        assert all(p.grad is None for p in other.parameters()), "the other helper's module got gradients"
        model.zero_grad()
        expected = step(x)
        expected.backward()
        np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-6)
        for g, e in zip(got, _grads(model)):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7)


def test_named_objects_read_the_current_values_and_notice_a_new_global(monkeypatch):
    reader = NamedObjects(step)
    assert through_a in reader.read() and A in reader.read()
    monkeypatch.setitem(globals(), "HELPER", through_b)
    now = reader.read()
    assert through_b in now and B in now and A not in now


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) * getattr(self, "scale", 1.0)


@pytest.mark.parametrize("change", ["add", "replace", "delete-and-add"])
def test_a_module_attribute_added_or_changed_after_compiling_retraces(change):
    model = Scaled()
    compiled = jitorch.compile(model)
    x = jitorch.randn(2, 3)
    with jitorch.no_grad():
        compiled(x)
        if change == "add":
            model.scale = 3.0
        elif change == "replace":
            model.scale = 2.0
            compiled(x)
            model.scale = 5.0
        else:
            model.other = 1
            compiled(x)
            del model.other
            model.scale = 4.0  # same number of attributes as before, another name
        np.testing.assert_allclose(compiled(x).numpy(), model(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_module_hooks_run_on_every_call_and_their_results_count(mode):
    # A trace would run a hook once and bake its result in: with hooks the call runs eagerly, whenever they came.
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    compiled = jitorch.compile(model, mode=mode)
    x = jitorch.randn(2, 3)
    with jitorch.no_grad():
        for _ in range(3):
            compiled(x)
        seen = []
        first = model[0].register_forward_hook(lambda mod, args, out: seen.append(out.shape))
        zero = model[1].register_forward_hook(lambda mod, args, out: out * 0)
        for _ in range(2):
            assert float(compiled(x).abs().sum()) == 0.0
        assert len(seen) == 2
        first.remove(), zero.remove()
        np.testing.assert_allclose(compiled(x).numpy(), model(x).numpy(), rtol=1e-6)
        assert float(compiled(x).abs().sum()) > 0


def test_global_forward_hooks_run_on_every_compiled_call():
    from jitorch.nn.modules.module import register_module_forward_hook

    model = nn.Linear(3, 2)
    compiled = jitorch.compile(model)
    x = jitorch.randn(4, 3)
    calls = []
    handle = register_module_forward_hook(lambda mod, args, out: calls.append(type(mod).__name__))
    try:
        for _ in range(3):
            compiled(x)
    finally:
        handle.remove()
    assert calls == ["Linear", "OptimizedModule"] * 3  # as torch.compile's: the wrapper is a Module too
