"""Rprop's step on NumPy arrays (no dispatch) against torch.optim.Rprop, step for step: parameters and state for
float32/float64/complex parameters, maximize, sign flips and zero gradients."""
import numpy as np
import pytest
import torch

import jitorch


def _grads(shape, dtype, steps, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        g = rng.standard_normal(shape)
        if dtype.startswith("complex"):
            g = g + 1j * rng.standard_normal(shape)
        g.flat[::7] = 0  # zero gradients: the factor is 1
        out.append(g.astype(dtype))
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("kw", [{}, dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2)), dict(maximize=True)])
def test_rprop_steps_match_torch(dtype, kw):
    shapes = [(5, 4), (7,), ()]
    init = [np.asarray(np.random.default_rng(10 + i).standard_normal(s)).astype(dtype) for i, s in enumerate(shapes)]
    grads = [_grads(s, dtype, 6, 20 + i) for i, s in enumerate(shapes)]
    jp = [jitorch.nn.Parameter(jitorch.tensor(a)) for a in init]
    tp = [torch.nn.Parameter(torch.tensor(a)) for a in init]
    jo, to = jitorch.optim.Rprop(jp, **kw), torch.optim.Rprop(tp, **kw)
    for step in range(6):
        for p, q, g in zip(jp, tp, grads):
            p.grad, q.grad = jitorch.tensor(g[step]), torch.tensor(g[step])
        jo.step()
        to.step()
        for p, q in zip(jp, tp):
            assert p.dtype.is_complex == q.dtype.is_complex
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-6, atol=1e-7)
            for name in ("prev", "step_size"):
                np.testing.assert_allclose(jo.state[p][name].numpy(), to.state[q][name].numpy(), rtol=1e-6, atol=1e-7)
            assert float(jo.state[p]["step"]) == float(to.state[q]["step"])


def test_rprop_version_counter_moves_and_flipped_sign_waits():
    p = jitorch.nn.Parameter(jitorch.ones(3))
    opt = jitorch.optim.Rprop([p])
    p.grad = jitorch.tensor([1.0, -1.0, 0.0])
    before = p._version
    opt.step()
    assert p._version > before
    np.testing.assert_allclose(p.detach().numpy(), [1 - 0.01, 1 + 0.01, 1.0], rtol=1e-6)
    p.grad = jitorch.tensor([-1.0, -1.0, 2.0])  # the first coordinate flips: its step shrinks and it does not move
    opt.step()
    np.testing.assert_allclose(p.detach().numpy(), [1 - 0.01, 1 + 0.01 + 0.012, 1.0 - 0.01], rtol=1e-6)
    np.testing.assert_allclose(opt.state[p]["step_size"].numpy(), [0.005, 0.012, 0.01], rtol=1e-6)
    np.testing.assert_allclose(opt.state[p]["prev"].numpy(), [0.0, -1.0, 2.0])
