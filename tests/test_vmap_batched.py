"""``vmap``'s batched path (`jitorch/_vmap_batched.py`) against ``torch.func.vmap`` on the same data: per-sample
gradients, every batching rule (broadcasting, dims, views, products, losses), the per-node fallback, and the cases
that must run sample by sample instead (inputs that require grad, writes into outside tensors) or refuse as torch
does (data-dependent Python). Each case also asserts
which path ran."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch import _vmap_batched

B = 9


@pytest.fixture
def paths(monkeypatch):
    """The results of `run_batched` in this test: 'batched', or 'loop' where it gave up."""
    seen = []
    real = _vmap_batched.run_batched

    def spy(*args):
        out = real(*args)
        seen.append("loop" if out is None else "batched")
        return out
    monkeypatch.setattr("jitorch._vmap.run_batched", spy)
    return seen


def arr(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def both(fn_of_lib, inputs, in_dims=0, out_dims=0, atol=1e-5, rtol=1e-5):
    """vmap(fn) in jitorch and torch on the same arrays; compares every output."""
    outs = []
    for lib in (jitorch, torch):
        args = [lib.tensor(a) if isinstance(a, np.ndarray) else a for a in inputs]
        outs.append(lib.func.vmap(fn_of_lib(lib), in_dims=in_dims, out_dims=out_dims)(*args))
    got, want = jitorch.utils._pytree.tree_flatten(outs[0])[0], torch.utils._pytree.tree_flatten(outs[1])[0]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape) and str(g.dtype) == str(w.dtype).replace("torch.", "jitorch.")
        np.testing.assert_allclose(g.numpy(), w.numpy(), atol=atol, rtol=rtol)


def test_per_sample_gradients_of_an_mlp(paths):
    x, y = arr(B, 5), np.random.default_rng(1).integers(0, 4, B)
    results = []
    for lib in (jitorch, torch):
        lib.manual_seed(0)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 4))
        if lib is jitorch:
            j = jitorch.nn.Sequential(jitorch.nn.Linear(5, 7), jitorch.nn.Tanh(), jitorch.nn.Linear(7, 4))
            j.load_state_dict({k: jitorch.tensor(v.detach().numpy()) for k, v in model.state_dict().items()})
            model = j
        params = {k: v.detach() for k, v in model.named_parameters()}

        def loss(p, xb, yb, model=model, lib=lib):
            logits = lib.func.functional_call(model, p, (xb.unsqueeze(0),))
            return lib.nn.functional.cross_entropy(logits, yb.unsqueeze(0))
        results.append(lib.func.vmap(lib.func.grad(loss), in_dims=(None, 0, 0))(params, lib.tensor(x),
                                                                                lib.tensor(y)))
    for k in results[1]:
        np.testing.assert_allclose(results[0][k].numpy(), results[1][k].numpy(), atol=1e-5, rtol=1e-5)
    assert paths == ["batched"]


@pytest.mark.parametrize("case", [
    lambda lib: lambda a, b: a * b + 1,                       # same shapes
    lambda lib: lambda a, b: (a.unsqueeze(0) - b).relu(),     # a shared operand of higher rank
    lambda lib: lambda a, b: lib.where(a > 0, a, b.sum(0)),
    lambda lib: lambda a, b: a.sum() + b.mean(1).amax() + a.amax(-1, keepdim=True).sum(),
    lambda lib: lambda a, b: (a.max(0).values, a.max(0).indices, a.argmax(1), a.cumsum(1), a.prod(1)),
    lambda lib: lambda a, b: (a.softmax(-1), a.log_softmax(0), lib.logsumexp(b, 1), a.var(1), a.norm(dim=1)),
    lambda lib: lambda a, b: (a.T, a.reshape(-1), a.view(3, 4)[1:, None, ::2], a[..., 1], a.transpose(0, 1).flip(1)),
    lambda lib: lambda a, b: (a.diagonal(1, 0, 1), b[0].diagonal(0, -1, -2), a.unfold(1, 2, 1), a.unfold(0, 2, 1)),
    lambda lib: lambda a, b: (a.expand(2, 3, 4), a[None].expand(5, 3, 4).sum(0), lib.cat([a, b[0, :3]], 1)),
    lambda lib: lambda a, b: (a @ b[0].T, a[0] @ b[1].T, a[0] @ a[1], b @ a.T, b[0] @ a[0], a @ b.mT),
    lambda lib: lambda a, b: (lib.nn.functional.linear(a, b[0, :2], b[1, 0, :2]),
                              lib.nn.functional.layer_norm(a, (4,)), a.tril(), a.triu(1)),
])
def test_rules_against_torch(paths, case):
    both(case, [arr(B, 3, 4), arr(2, 3, 4, seed=1)], in_dims=(0, None))
    assert paths == ["batched"]


def test_products_of_batched_vectors_and_matrices(paths):
    both(lambda lib: lambda v, m, w: (v @ m, m @ v, v @ w, m @ m.T, v @ v),
         [arr(B, 4), arr(B, 4, 4, seed=1), arr(B, 4, seed=2)])
    both(lambda lib: lambda v, m: (v @ m, m @ v), [arr(B, 4), arr(3, 4, 4, seed=1)], in_dims=(0, None))
    both(lambda lib: lambda v, m: (v @ m, m.mT @ v), [arr(4, seed=3), arr(B, 4, 5, seed=1)], in_dims=(None, 0))
    assert paths == ["batched"] * 3


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_and_its_gradient_per_sample(paths, reduction):
    logits, target = arr(B, 3, 5), np.random.default_rng(2).integers(0, 5, (B, 3))
    target[1, :] = -100  # a sample whose every target is ignored: NaN mean loss, zero gradients
    target[2, 0] = -100

    def fn(lib):
        def loss(z, t):
            return lib.nn.functional.cross_entropy(z, t, reduction=reduction, ignore_index=-100)
        return lambda z, t: (loss(z, t), lib.func.grad(lambda z: loss(z, t).sum())(z))
    both(fn, [logits, target])
    assert paths == ["batched"]


def test_in_dims_out_dims_and_dict_inputs(paths):
    both(lambda lib: lambda a, b: (a * b).sum(-1), [arr(3, B), arr(B, 3, seed=1)], in_dims=(1, 0))
    both(lambda lib: lambda a: (a.sin(), a.sum(0)), [arr(4, B)], in_dims=1, out_dims=(1, 0))
    out = jitorch.func.vmap(lambda d: d["w"] * d["b"], in_dims=({"w": 0, "b": None},))(
        {"w": jitorch.ones(B, 2), "b": jitorch.tensor([2.0, 3.0])})
    assert out.tolist() == [[2.0, 3.0]] * B
    assert paths == ["batched"] * 3


def test_an_unbatched_output_is_expanded(paths):
    both(lambda lib: lambda a, b: (a + 1, b * 2), [arr(B, 2), arr(3, seed=1)], in_dims=(0, None))
    assert paths == ["batched"]


def test_a_row_without_a_rule_runs_per_sample(paths, monkeypatch):
    calls = []
    real = _vmap_batched._per_sample
    monkeypatch.setattr(_vmap_batched, "_per_sample", lambda prim, *a: calls.append(prim.op.name) or real(prim, *a))
    both(lambda lib: lambda a: lib.linalg.det(a) * 2, [arr(B, 3, 3)], atol=1e-4)
    assert paths == ["batched"] and "linalg_det" in calls


def test_data_dependent_python_refuses_as_torch(paths):
    # The trace refuses the branch, then the loop's first sample raises torch's error.
    messages = []
    for lib in (jitorch, torch):
        with pytest.raises(RuntimeError) as info:
            lib.func.vmap(lambda a: a * 2 if a.sum() > 0 else a - 1)(lib.tensor(arr(B, 3)))
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "data-dependent control flow" in messages[0]
    assert paths == ["loop"]


def test_inputs_that_require_grad_keep_the_loop_and_their_graph(paths):
    x = jitorch.tensor(arr(B, 3), requires_grad=True)
    jitorch.func.vmap(lambda r: (r * r).sum())(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.detach().numpy(), rtol=1e-6)
    assert paths == ["loop"]


def test_random_ops_still_refuse_in_error_mode(paths):
    with pytest.raises(RuntimeError, match="randomness"):
        jitorch.func.vmap(lambda a: a + jitorch.randn(3))(jitorch.ones(B, 3))
    assert paths == ["loop"]


def test_small_batches_take_the_loop(paths):
    jitorch.func.vmap(lambda a: a * 2)(jitorch.ones(_vmap_batched.MIN_BATCH - 1, 2))
    assert paths == []


def test_errors_are_the_loops(paths):
    with pytest.raises(ValueError, match="must only return Tensors"):
        jitorch.func.vmap(lambda a: 3)(jitorch.ones(B, 2))
    with pytest.raises(RuntimeError):
        jitorch.func.vmap(lambda a: a @ jitorch.ones(5))(jitorch.ones(B, 2))


def _cnn(lib):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(2, 6, 3, padding=1, groups=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.ConvTranspose2d(6, 4, 2, stride=2), nn.Tanh(), nn.AdaptiveMaxPool2d(3), nn.Flatten(),
                         nn.Linear(36, 5))


def test_per_sample_gradients_of_a_cnn(paths, monkeypatch):
    calls = []
    real = _vmap_batched._per_sample
    monkeypatch.setattr(_vmap_batched, "_per_sample", lambda prim, *a: calls.append(prim.op.name) or real(prim, *a))
    x, y = arr(B, 2, 8, 8), np.random.default_rng(1).integers(0, 5, B)
    torch.manual_seed(0)
    reference = _cnn(torch)
    results = []
    for lib in (jitorch, torch):
        model = reference
        if lib is jitorch:
            model = _cnn(jitorch)
            model.load_state_dict({k: jitorch.tensor(v.detach().numpy()) for k, v in reference.state_dict().items()})
        params = {k: v.detach() for k, v in model.named_parameters()}

        def loss(p, xb, yb, model=model, lib=lib):
            return lib.nn.functional.cross_entropy(lib.func.functional_call(model, p, (xb[None],)), yb[None])
        results.append(lib.func.vmap(lib.func.grad(loss), in_dims=(None, 0, 0))(params, lib.tensor(x),
                                                                                lib.tensor(y)))
    for k in results[1]:
        np.testing.assert_allclose(results[0][k].numpy(), results[1][k].numpy(), atol=1e-5, rtol=1e-4)
    assert paths == ["batched"]
    # adaptive max pooling's gradient (index_put) has no rule: it runs per sample; the convolutions and pools do not
    assert not set(calls) & {"convolution", "convolution_transpose", "convolution_weight", "max_pool",
                             "max_pool_scatter", "adaptive_max_pool"}


def test_embedding_lookups_and_their_gradients(paths, monkeypatch):
    calls = []
    real = _vmap_batched._per_sample
    monkeypatch.setattr(_vmap_batched, "_per_sample", lambda prim, *a: calls.append(prim.op.name) or real(prim, *a))
    tokens = np.random.default_rng(3).integers(0, 6, (B, 4))
    both(lambda lib: lambda w, t: (lib.func.grad(lambda w: (lib.nn.functional.embedding(t, w) ** 2).sum())(w),
                                   w[t[:2]], w[t[:1], 1:]), [arr(6, 3), tokens], in_dims=(None, 0))
    both(lambda lib: lambda w, t: w[t] * 2, [arr(B, 6, 3), tokens], in_dims=(0, 0))  # a batched table and indices
    both(lambda lib: lambda w: w[lib.tensor([[0, 2], [1, 1]])], [arr(B, 4, 3)])  # shared indices
    # A mask picks a count of its own in each sample (torch's vmap refuses it): one True per row here, per sample.
    w, m = jitorch.tensor(arr(B, 4)), jitorch.tensor(np.eye(4, dtype=bool)[np.arange(B) % 4])
    assert jitorch.equal(jitorch.func.vmap(lambda w, m: w[m])(w, m), jitorch.stack([r[k] for r, k in zip(w, m)]))
    assert paths == ["batched"] * 4 and calls == ["index"]


def test_in_place_writes_on_the_functions_own_values_stay_batched(paths):
    def fn(lib):
        def f(r):
            h = r * 2 - 1
            h.relu_()  # ReLU(inplace=True)
            h.add_(r)
            return h.sum(0) + h[0]
        return f
    both(fn, [arr(B, 2, 3)])
    assert paths == ["batched"]


def test_writes_through_views_and_outside_tensors_keep_the_loop(paths):
    def through_view(lib):
        def f(r):
            h = r * 2
            v = h.view(-1)  # a batch-wide view can be a copy: the write must reach h, so per sample
            v.add_(1)
            return h
        return f
    both(through_view, [arr(B, 2, 3)])
    counter = jitorch.zeros(1)

    def f(r):
        counter.add_(1)  # the trace refuses this write before making it: only the loop's writes land
        return r * 2
    jitorch.func.vmap(f)(jitorch.ones(B, 2))
    assert counter.item() == 1  # one write, as torch's vmap: the loop's later samples start from the value before
    assert paths == ["loop", "loop"]


def test_a_0d_sample_promotes_as_a_0d_tensor(paths):
    x64, x32 = arr(B, dtype=np.float64), arr(B, 3, seed=1)
    both(lambda lib: lambda a, b: (a * b, lib.maximum(a, b), b.pow(a)), [x64, x32])
    u8 = np.random.default_rng(2).integers(0, 200, (B, 3)).astype(np.uint8)
    i8 = np.random.default_rng(3).integers(-5, 5, B).astype(np.int8)
    both(lambda lib: lambda a, b: a + b, [u8, i8])
    assert paths == ["batched", "batched"]


def test_index_put_values_of_lower_rank_than_the_indexed_part(paths):
    idx = np.random.default_rng(4).integers(0, 20, (B, 6))
    both(lambda lib: lambda t, v: lib.zeros(20).index_put((t,), v, accumulate=True), [idx, arr(B)])
    both(lambda lib: lambda t, v: lib.zeros(20, 3).index_put((t,), v), [idx, arr(B, 3)])
    assert paths == ["batched", "batched"]


def test_values_read_outside_the_op_table_are_not_kept_from_the_first_sample(paths):
    # x.view(int32) wraps a view of the array without an op: the trace cannot see it, the last-sample check does
    both(lambda lib: lambda r: r.view(lib.int32).double() * 1, [arr(B, 3)])
    assert paths == ["loop"]


def test_random_draws_refuse_without_drawing(paths):
    jitorch.manual_seed(0)
    first = jitorch.randn(1).item()
    for size in (4, B):  # the loop and the batched path's trace
        jitorch.manual_seed(0)
        with pytest.raises(RuntimeError, match="randomness"):
            jitorch.func.vmap(lambda r: (r * 1).uniform_() + jitorch.randn(3))(jitorch.ones(size, 3))
        assert jitorch.randn(1).item() == first


def test_a_validation_error_of_any_sample_is_raised(paths):
    var = np.abs(arr(B, 3))
    var[5, 0] = -1.0
    with pytest.raises(ValueError, match="negative"):
        jitorch.func.vmap(lambda x, s: jitorch.nn.functional.gaussian_nll_loss(x, x * 0, s))(
            jitorch.tensor(arr(B, 3)), jitorch.tensor(var))
    assert paths == ["loop"]
