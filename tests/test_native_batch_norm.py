"""Training-mode batch norm and its backward as native kernels (jitorch/cpu/_lower_batch_norm.py), in CPU graph
replay and in compiled training: outputs, running statistics and gradients equal torch's over several steps, for 2-,
3- and 4-d inputs, with and without the affine parameters, in float32 and float64, and for a non-contiguous input."""
import numpy as np
import pytest
import torch

import jitorch
from jitorch.cpu import CPUGraph, graph

SHAPES = [(16, 5), (6, 4, 9), (4, 3, 6, 5)]


def _models(shape, affine, dtype, seed):
    c = shape[1]
    kind = {2: "1d", 3: "1d", 4: "2d"}[len(shape)]
    jbn = getattr(jitorch.nn, f"BatchNorm{kind}")(c, affine=affine, dtype=getattr(jitorch, np.dtype(dtype).name))
    tbn = getattr(torch.nn, f"BatchNorm{kind}")(c, affine=affine, dtype=getattr(torch, np.dtype(dtype).name))
    if affine:
        rng = np.random.default_rng(seed)
        w, b = rng.uniform(0.5, 1.5, c).astype(dtype), rng.standard_normal(c).astype(dtype)
        with jitorch.no_grad(), torch.no_grad():
            jbn.weight.copy_(jitorch.tensor(w))
            jbn.bias.copy_(jitorch.tensor(b))
            tbn.weight.copy_(torch.tensor(w))
            tbn.bias.copy_(torch.tensor(b))
    return jbn, tbn


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)


def _check(jbn, tbn, got, want, jx, tx, dtype):
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), **_tol(dtype))
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), **_tol(dtype))
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(getattr(jbn, name).numpy(), getattr(tbn, name).numpy(), **_tol(dtype))
    if jbn.affine:
        np.testing.assert_allclose(jbn.weight.grad.numpy(), tbn.weight.grad.numpy(), **_tol(dtype))
        np.testing.assert_allclose(jbn.bias.grad.numpy(), tbn.bias.grad.numpy(), **_tol(dtype))


def _input(rng, shape, dtype, transposed):
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    # A transposed copy read back through a transposing view: the same values with non-contiguous strides.
    return np.ascontiguousarray(x.swapaxes(0, -1)).swapaxes(0, -1) if transposed else x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_cpu_graph_batch_norm_matches_torch(shape, affine, dtype):
    rng = np.random.default_rng(len(shape))
    jbn, tbn = _models(shape, affine, dtype, 1)
    x = jitorch.tensor(_input(rng, shape, dtype, False), requires_grad=True)
    gup = jitorch.tensor(rng.standard_normal(shape).astype(dtype))
    g = CPUGraph()
    with graph(g):
        out = jbn(x)
        (out * gup).sum().backward()
    fallbacks = " ".join(step for step, _ in g.native_report()["fallbacks"])
    assert "native_batch_norm" not in fallbacks, fallbacks
    # The capture ran the step once: the torch twin does too.
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    (tbn(tx) * torch.tensor(gup.numpy())).sum().backward()
    for _ in range(3):
        xd, gd = _input(rng, shape, dtype, False), rng.standard_normal(shape).astype(dtype)
        with jitorch.no_grad():
            x.copy_(jitorch.tensor(xd))
            gup.copy_(jitorch.tensor(gd))
        g.replay()
        tx = torch.tensor(xd, requires_grad=True)
        if affine:
            tbn.weight.grad, tbn.bias.grad = None, None
        want = tbn(tx)
        (want * torch.tensor(gd)).sum().backward()
        _check(jbn, tbn, out, want, x, tx, dtype)


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_compiled_batch_norm_trains_like_torch(shape, affine, transposed):
    dtype = np.float32
    rng = np.random.default_rng(20 + len(shape))
    jbn, tbn = _models(shape, affine, dtype, 2)
    compiled = jitorch.compile(lambda x, g: (jbn(x) * g).sum())
    for _ in range(4):
        xd, gd = _input(rng, shape, dtype, transposed), rng.standard_normal(shape).astype(dtype)
        jx, tx = jitorch.tensor(xd, requires_grad=True), torch.tensor(xd, requires_grad=True)
        loss = compiled(jx, jitorch.tensor(gd))
        loss.backward()
        want = tbn(tx)
        (want * torch.tensor(gd)).sum().backward()
        np.testing.assert_allclose(loss.item(), float((want * torch.tensor(gd)).sum().detach()), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), **_tol(dtype))
        for name in ("running_mean", "running_var"):
            np.testing.assert_allclose(getattr(jbn, name).numpy(), getattr(tbn, name).numpy(), **_tol(dtype))
        if affine:
            np.testing.assert_allclose(jbn.weight.grad.numpy(), tbn.weight.grad.numpy(), **_tol(dtype))
            np.testing.assert_allclose(jbn.bias.grad.numpy(), tbn.bias.grad.numpy(), **_tol(dtype))
            jbn.weight.grad, jbn.bias.grad, tbn.weight.grad, tbn.bias.grad = None, None, None, None
    plan = compiled.train_entries[0].plan
    steps = plan.fwd.native.report()["python_steps"] + plan.bwd.native.report()["python_steps"]
    assert not any(name.startswith("native_batch_norm") for name, _ in steps), steps

