"""The nn.Lazy* layers against PyTorch 2.13: construction (repr), materialization on the first call (shapes, the
class they become, input channels from dim 1 or unbatched dim 0), then with torch's weights copied in: outputs,
gradients and running statistics over training steps; an optimizer built before or after the first call trains."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from nn_oracle import check_module, copy_weights, torch_single_thread  # noqa: F401

import jitorch

CASES = [
    ("LazyConv1d", (4, 3), dict(padding=1), (2, 3, 7)), ("LazyConv1d", (4, 3), {}, (3, 7)),
    ("LazyConv2d", (6, 3), dict(groups=2, bias=False), (2, 4, 6, 5)),
    ("LazyConv3d", (2, 2), dict(stride=2), (1, 3, 4, 4, 4)),
    ("LazyConvTranspose1d", (4, 3), dict(stride=2, output_padding=1), (2, 3, 5)),
    ("LazyConvTranspose2d", (4, 3), dict(groups=2), (2, 6, 4, 4)),
    ("LazyConvTranspose3d", (2, 2), {}, (1, 3, 3, 3, 3)),
    ("LazyBatchNorm1d", (), {}, (5, 4)), ("LazyBatchNorm1d", (), dict(momentum=None), (5, 4, 3)),
    ("LazyBatchNorm2d", (), dict(affine=False), (3, 4, 2, 2)), ("LazyBatchNorm3d", (), {}, (2, 3, 2, 2, 2)),
    ("LazyInstanceNorm1d", (), {}, (2, 4, 5)), ("LazyInstanceNorm2d", (), dict(affine=False), (2, 3, 4, 4)),
    ("LazyInstanceNorm3d", (), dict(track_running_stats=False), (2, 3, 2, 3, 2)),
]


@pytest.mark.parametrize("name,args,kwargs,shape", CASES, ids=lambda c: str(c))
def test_lazy_layers_materialize_and_train_like_torch(name, args, kwargs, shape):
    rng = np.random.default_rng(0)
    jm, tm = getattr(jitorch.nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    assert repr(jm) == repr(tm)
    assert jm.has_uninitialized_params() and tm.has_uninitialized_params()
    x = rng.standard_normal(shape).astype(np.float32)
    jm(jitorch.tensor(x))
    tm(torch.tensor(x))
    assert type(jm).__name__ == type(tm).__name__ == name[4:]
    assert repr(jm) == repr(tm)
    assert {n: tuple(p.shape) for n, p in jm.state_dict().items()} == {
        n: tuple(p.shape) for n, p in tm.state_dict().items()}
    copy_weights(jm, tm)
    for step in range(3):
        for m in (jm, tm):
            m.zero_grad()
        check_module(jm, tm, [rng.standard_normal(shape).astype(np.float32)], copy=False, seed=step)
        for (n, b), tb in zip(jm.named_buffers(), tm.buffers()):
            np.testing.assert_allclose(b.numpy(), tb.numpy(), rtol=1e-5, atol=1e-6, err_msg=n)
    check_module(jm, tm, [rng.standard_normal(shape).astype(np.float32)], copy=False, train=False)


@pytest.mark.parametrize("before", [True, False])
def test_an_optimizer_updates_a_lazy_model(before):
    nn = jitorch.nn  # no bias right before a batch norm: it would get no gradient
    model = nn.Sequential(nn.LazyBatchNorm1d(), nn.LazyConv1d(3, 2), nn.Tanh(), nn.Flatten(), nn.LazyLinear(1))
    x, y = jitorch.randn(4, 2, 5), jitorch.randn(4, 1)
    opt = jitorch.optim.SGD(model.parameters(), lr=0.1) if before else None
    model(x)
    opt = opt or jitorch.optim.SGD(model.parameters(), lr=0.1)
    assert [type(m).__name__ for m in model] == ["BatchNorm1d", "Conv1d", "Tanh", "Flatten", "Linear"]
    start = [p.detach().clone() for p in model.parameters()]
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(not np.allclose(p.detach().numpy(), s.numpy()) for p, s in zip(model.parameters(), start))
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("call", [
    lambda nn, lib: nn.LazyConv2d(4, 3)(lib.ones(2, 3, 4)[None, None]),  # 5-D input to a 2-D convolution
    lambda nn, lib: nn.LazyConv2d(4, 3, groups=2)(lib.ones(1, 3, 5, 5)),  # 3 channels, 2 groups
])
def test_lazy_materialization_errors_match_torch(call):
    with pytest.raises(Exception) as th:
        call(torch.nn, torch)
    with pytest.raises(th.type):
        call(jitorch.nn, jitorch)
