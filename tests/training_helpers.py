"""Shared by the compiled-training and capture tests: a compiled module trained next to an eager copy, and a small
MLP with given weights in either library."""
import copy

import numpy as np

import jitorch


def train_like_eager(make, batches, loss=None, seed=0):
    """Compile a deep copy of ``make()`` and train it next to the eager original over ``batches``.

    Each batch is a tuple: the module's loss is ``net(*batch)``, or ``loss(net(batch[0]), *batch[1:])``. Both runs
    draw the same random numbers (the seed is reset per step), and losses, gradients and buffers must agree. Returns
    the compiled module's first training entry.
    """
    jitorch.manual_seed(seed)
    eager = make()
    model = copy.deepcopy(eager)
    compiled = jitorch.compile(model)
    for step, batch in enumerate(batches):
        losses = []
        for net, owner in ((eager, eager), (compiled, model)):
            jitorch.manual_seed(step)
            owner.zero_grad()
            value = net(*batch) if loss is None else loss(net(batch[0]), *batch[1:])
            value.backward()
            losses.append(value.item())
        np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
        for pc, pe in zip(model.parameters(), eager.parameters()):
            np.testing.assert_allclose(pc.grad.numpy(), pe.grad.numpy(), rtol=1e-4, atol=1e-6)
        for bc, be in zip(model.buffers(), eager.buffers()):
            # Running statistics: compiled kernels sum in another order than NumPy's (a few float32 ulp).
            np.testing.assert_allclose(bc.numpy(), be.numpy(), rtol=1e-5, atol=1e-7)
    return compiled._compiled_call.train_entries[0]


def classification_batches(shape, classes, seed, steps=3):
    """``steps`` batches of (float32 inputs of ``shape``, int64 targets below ``classes``)."""
    rng = np.random.default_rng(seed)
    return [(jitorch.tensor(rng.standard_normal(shape).astype(np.float32)),
             jitorch.tensor(rng.integers(0, classes, shape[0]))) for _ in range(steps)]


def small_mlp(lib, weights):
    """Linear(8, 16), Tanh, Linear(16, 4) in ``lib`` (jitorch or torch) with the given weights."""
    net = lib.nn.Sequential(lib.nn.Linear(8, 16), lib.nn.Tanh(), lib.nn.Linear(16, 4))
    with lib.no_grad():
        for p, w in zip(net.parameters(), weights):
            p.copy_(lib.tensor(w))
    return net


def zero(*tensors):
    """Zero captured outputs in place, so a replay that writes nothing cannot pass."""
    for t in tensors:
        t._data[...] = 0


def assert_replay_follows_seed(g, out, seed):
    """Two replays of ``g`` after the same ``manual_seed(seed)`` write the same ``out``."""
    jitorch.manual_seed(seed)
    zero(out)
    g.replay()
    first = out.clone()
    jitorch.manual_seed(seed)
    zero(out)
    g.replay()
    assert out.tolist() == first.tolist()
