"""A whole training step under ``jitorch.compile`` in the default mode: ``loss.backward()`` ends the compiled part
(the forward becomes a compiled training segment; its compiled backward runs from the eager ``backward``), and the
optimizer step after it runs eagerly. Parameters follow torch's over several steps."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch


def _net(lib, weights):
    net = lib.nn.Sequential(lib.nn.Linear(6, 16), lib.nn.GELU(approximate="tanh"), lib.nn.LayerNorm(16),
                            lib.nn.Linear(16, 4))
    with lib.no_grad():
        for p, w in zip(net.parameters(), weights):
            p.copy_(lib.tensor(w))
    return net


@pytest.mark.parametrize("opt_name, kwargs", [("SGD", dict(lr=0.05, momentum=0.9)), ("Adam", dict(lr=0.01))])
def test_a_compiled_training_step_compiles_its_forward_and_trains_like_torch(opt_name, kwargs):
    rng = np.random.default_rng(0)
    shapes = [(16, 6), (16,), (16,), (16,), (4, 16), (4,)]
    weights = [(rng.standard_normal(s) * 0.4).astype(np.float32) for s in shapes]
    net, ref = _net(jitorch, weights), _net(torch, weights)
    opt = getattr(jitorch.optim, opt_name)(net.parameters(), **kwargs)
    ropt = getattr(torch.optim, opt_name)(ref.parameters(), **kwargs)

    def step(lib, model, o, x, y):
        o.zero_grad()
        loss = lib.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        o.step()
        return loss.detach()

    compiled = jitorch.compile(lambda x, y: step(jitorch, net, opt, x, y))
    for _ in range(5):
        xd, yd = rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 4, 8)
        got = compiled(jitorch.tensor(xd), jitorch.tensor(yd))
        want = step(torch, ref, ropt, torch.tensor(xd), torch.tensor(yd))
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
        for p, q in zip(net.parameters(), ref.parameters()):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-6)
    entry = compiled.train_entries[0] if compiled.train_entries else compiled.entries[0]
    assert entry.run is not None and [b.name for b in entry.breaks] == ["backward"]
    report = jitorch.compiler.explain(lambda x, y: step(jitorch, net, opt, x, y))(jitorch.tensor(xd),
                                                                                 jitorch.tensor(yd))
    assert "Graph count: 1" in str(report) and "Tensor.backward() runs autograd" in str(report)
