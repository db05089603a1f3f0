"""DP-SGD and torch.func, run with ``lib=torch`` and ``lib=jitorch`` from the same weights and data.

Per-sample gradients by ``vmap(grad(loss))`` + ``functional_call`` (batches below and above vmap's batched-path
threshold; models with LayerNorm, Embedding, convolutions, GroupNorm and dropout in eval mode), per-sample clipping to
a max norm, Gaussian noise and the Opacus-style aggregation; ``jacrev``/``jacfwd``/``hessian`` of a small model and
``vmap`` with ``in_dims``/``out_dims`` structures. The noise is drawn by NumPy: jitorch's generators are reproducible
but are not PyTorch's streams (``jitorch._random``), so a seeded ``torch.normal`` cannot be compared across libraries.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree, load_numpy_state, numpy_state, to_numpy


def _model(lib, kind):
    nn = lib.nn
    lib.manual_seed(0)
    if kind == "mlp":
        return nn.Sequential(nn.Linear(10, 16), nn.LayerNorm(16), nn.Tanh(), nn.Dropout(0.3), nn.Linear(16, 3))
    if kind == "embedding":
        class Bag(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb, self.norm, self.fc = nn.Embedding(20, 8, padding_idx=0), nn.LayerNorm(8), nn.Linear(8, 3)

            def forward(self, tokens):
                return self.fc(self.norm(self.emb(tokens)).mean(-2))
        return Bag()
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(4, 4, 3, stride=2), nn.ReLU(), nn.Flatten(), nn.Dropout(0.5), nn.Linear(4, 3))


def _batch(kind, size, seed):
    rng = np.random.default_rng(seed)
    if kind == "mlp":
        x = rng.standard_normal((size, 10)).astype(np.float32)
    elif kind == "embedding":
        x = rng.integers(0, 20, (size, 5))
    else:
        x = rng.standard_normal((size, 1, 8, 8)).astype(np.float32)
    return x, rng.integers(0, 3, size)


def _dp_sgd(lib, kind, size, state, steps=2, max_norm=1.0, sigma=0.5, lr=0.1):
    F, func = lib.nn.functional, lib.func
    model = load_numpy_state(lib, _model(lib, kind), state).eval()
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def loss_fn(params, buffers, x, y):
        out = func.functional_call(model, (params, buffers), (x.unsqueeze(0),))
        return F.cross_entropy(out, y.unsqueeze(0))

    noise = np.random.default_rng(123)
    history = []
    for step in range(steps):
        x, y = (lib.tensor(a) for a in _batch(kind, size, step))
        per_sample = func.vmap(func.grad(loss_fn), in_dims=(None, None, 0, 0))(params, buffers, x, y)
        norms = lib.stack([g.reshape(size, -1).norm(dim=1) for g in per_sample.values()], 1).norm(dim=1)
        factor = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        new = {}
        for k, g in per_sample.items():
            clipped = lib.einsum("i,i...->...", factor, g)
            z = lib.tensor(noise.normal(0, sigma * max_norm, size=tuple(g.shape[1:])).astype(np.float32))
            new[k] = params[k] - lr * (clipped + z) / size
        history.append([per_sample, norms])
        params = new
    return to_numpy(history), to_numpy(params)


@pytest.mark.parametrize("kind", ["mlp", "embedding", "cnn"])
@pytest.mark.parametrize("size", [1, 3, 8, 32, 100])
def test_dp_sgd_per_sample_gradients_match_torch_func(kind, size):
    state = numpy_state(_model(torch, kind))
    assert_close_tree(_dp_sgd(torch, kind, size, state), _dp_sgd(jitorch, kind, size, state), rtol=1e-5, atol=1e-6)


def _small_net(lib):
    lib.manual_seed(0)
    return lib.nn.Sequential(lib.nn.Linear(3, 5), lib.nn.Tanh(), lib.nn.Linear(5, 2))


def _transforms(lib, state, x_np, big_np):
    f = lib.func
    model = load_numpy_state(lib, _small_net(lib), state)
    params = {k: v.detach() for k, v in model.named_parameters()}
    x, big = lib.tensor(x_np), lib.tensor(big_np)
    out = {
        "jacrev_x": f.jacrev(model)(x),
        "jacrev_params": f.jacrev(lambda p: f.functional_call(model, p, (x,)).sum(0))(params),
        "jacfwd_x": f.jacfwd(lambda x: model(x).pow(2).sum(-1))(x),
        "hessian_x": f.hessian(lambda x: model(x).pow(2).sum())(x[0]),
        "hessian_w": f.hessian(lambda w: f.functional_call(model, {**params, "0.weight": w}, (x,)).pow(2).sum())(
            params["0.weight"]),
        "jacrev_argnums": f.jacrev(lambda a, b: (a * b).sin(), argnums=(0, 1))(x, x.T.sum(1)),
        "vmap_jacrev": f.vmap(f.jacrev(model))(x),
        "in_dims_none": f.vmap(lambda a, b, c: a @ b + c, in_dims=(0, None, None))(x, x.T, 1.5),
        "out_dims_tuple": f.vmap(lambda a: (a * 2, a.sum()), in_dims=1, out_dims=(1, 0))(x),
        "nested": f.vmap(f.vmap(lambda a, b: a * b, in_dims=(0, None)), in_dims=(None, 0))(x[0], x),
        "in_dims_dict": f.vmap(lambda d: d["a"] + d["b"].sum(), in_dims=({"a": 0, "b": 1},))({"a": x, "b": x.T}),
        "chunked": f.vmap(model, chunk_size=2)(x),
        "batched_out_dims_1": f.vmap(model, out_dims=1)(big),
        "batched_in_dims_1": f.vmap(model, in_dims=1)(big.T),
        "grad_has_aux": f.grad(lambda x: (model(x).sum(), model(x)), has_aux=True)(x),
        "grad_and_value": f.grad_and_value(lambda x, y: (model(x) * y).sum(), argnums=1)(x, lib.ones(4, 2)),
    }
    return to_numpy(out)


def test_func_transforms_of_a_small_model_match_torch():
    rng = np.random.default_rng(0)
    x, big = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((16, 3)).astype(np.float32)
    state = numpy_state(_small_net(torch))
    assert_close_tree(_transforms(torch, state, x, big), _transforms(jitorch, state, x, big), rtol=1e-5, atol=1e-6)


def _bn_net(lib):
    lib.manual_seed(0)
    return lib.nn.Sequential(lib.nn.Linear(4, 6), lib.nn.BatchNorm1d(6))


@pytest.mark.parametrize("size", [3, 8])
@pytest.mark.parametrize("per_sample_grad", [False, True])
def test_vmap_refuses_batch_norm_training_statistics_that_are_not_mapped(size, per_sample_grad):
    # A train-mode BatchNorm under vmap would fold every sample's statistics into the shared running buffers one
    # after the other; PyTorch's batching rule refuses it (Opacus users must swap BatchNorm for GroupNorm).
    model = _bn_net(jitorch)
    params, buffers = dict(model.named_parameters()), dict(model.named_buffers())
    before = model[1].running_mean.clone()
    f = jitorch.func
    fn = f.vmap(model) if not per_sample_grad else f.vmap(
        f.grad(lambda p, x: f.functional_call(model, (p, buffers), (x,)).sum()), in_dims=(None, 0))
    args = (jitorch.randn(size, 3, 4),) if not per_sample_grad else (params, jitorch.randn(size, 3, 4))
    with pytest.raises(RuntimeError, match="Batch norm got a batched tensor as input while the running_mean"):
        fn(*args)
    assert jitorch.equal(model[1].running_mean, before)


def test_vmap_batch_norm_with_mapped_statistics_and_without_them():
    # Mapped running statistics (an ensemble from stack_module_state) and no running statistics are both allowed.
    def run(lib):
        f = lib.func
        lib.manual_seed(0)
        models = [lib.nn.BatchNorm1d(3) for _ in range(4)]
        params, buffers = f.stack_module_state(models)
        base = lib.nn.BatchNorm1d(3).to("meta")
        x = lib.arange(15.0).reshape(5, 3) ** 1.5
        out = f.vmap(lambda p, b, x: f.functional_call(base, (p, b), (x,)), in_dims=(0, 0, None))(params, buffers, x)
        plain = f.vmap(lib.nn.BatchNorm1d(3, track_running_stats=False))(lib.arange(30.0).reshape(2, 5, 3) ** 1.5)
        return [out, buffers["running_mean"], buffers["running_var"], plain]

    assert_close_tree(run(torch), run(jitorch), rtol=1e-5, atol=1e-5)
