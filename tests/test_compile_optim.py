"""``jitorch.compile(opt.step)`` and calls that write arrays behind the dispatcher: never a graph that skips them."""
import numpy as np
import pytest
import torch

import jitorch
from jitorch.optim._fused import CompiledOptimizerStep


def _train(lib, cls, kw, compiled, steps=5):
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    xs = [rng.standard_normal((6, 4)).astype(np.float32) for _ in range(steps)]
    gs = [rng.standard_normal((6, 3)).astype(np.float32) for _ in range(steps)]
    lin = lib.nn.Linear(4, 3)
    with lib.no_grad():
        lin.weight.copy_(lib.tensor(w))
        lin.bias.copy_(lib.tensor(b))
    opt = getattr(lib.optim, cls)(lin.parameters(), **kw)
    step = lib.compile(opt.step) if compiled else opt.step
    for x, g in zip(xs, gs):
        opt.zero_grad()
        lin(lib.tensor(x)).backward(lib.tensor(g))
        step()
    return lin.weight.detach().numpy(), lin.bias.detach().numpy(), opt


@pytest.mark.parametrize("cls,kw", [("Adam", dict(lr=0.05, amsgrad=True)), ("AdamW", dict(lr=0.05)),
                                    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
                                    ("RMSprop", dict(lr=0.01))])
def test_compiled_optimizer_step_matches_torch(cls, kw):
    w, b, opt = _train(jitorch, cls, kw, compiled=True)
    rw, rb, _ = _train(torch, cls, kw, compiled=False)
    np.testing.assert_allclose(w, rw, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, rb, rtol=1e-5, atol=1e-6)
    assert all(g.get("fused") is None for g in opt.param_groups)  # the group's own setting is restored


def test_compile_of_step_uses_fused_kernels():
    lin = jitorch.nn.Linear(2, 2)
    opt = jitorch.optim.Adam(lin.parameters())
    step = jitorch.compile(opt.step)
    assert isinstance(step, CompiledOptimizerStep) and step.optimizer is opt
    seen = []
    opt.register_step_pre_hook(lambda o, a, k: seen.append(o.param_groups[0]["fused"]))
    lin(jitorch.ones(1, 2)).sum().backward()
    step()
    assert seen == [True]


def test_hidden_array_write_runs_eagerly():
    """A function that updates arrays directly (no op) must not become an empty graph that skips the write."""
    t = jitorch.zeros(3)

    def bump(x):
        t._data += x._data
        t._bump_version()
        return x * 2

    f = jitorch.compile(bump)
    for _ in range(3):
        out = f(jitorch.ones(3))
    np.testing.assert_array_equal(t.numpy(), np.full(3, 3.0, np.float32))
    np.testing.assert_array_equal(out.numpy(), np.full(3, 2.0, np.float32))
    assert "written outside the traced ops" in f.entries[0].break_reason
