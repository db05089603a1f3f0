"""The native runner of compiled graphs (jitorch/_compile/native_runner.py): equal to torch, used, and safe."""
import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as F
from jitorch import nn
from jitorch._compile import native_runner
from jitorch._compile.backend import CompiledGraph
from jitorch._compile.trace import trace
from jitorch._compile.training import compile_training


def _pair(rng, *shape, requires_grad=False):
    a = rng.standard_normal(shape).astype(np.float32)
    return (jitorch.tensor(a, requires_grad=requires_grad), torch.tensor(a, requires_grad=requires_grad))


def _close(j, t, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(j.detach().numpy(), t.detach().numpy(), rtol=rtol, atol=atol)


def _fallback_ops(runner):
    return sorted({name.rstrip("_0123456789") for name, _ in runner.report()["python_steps"]})


def _mlp(x, y, w1, b1, w2, b2, w3, b3, lib):
    F_ = lib.nn.functional
    h = F_.relu(F_.linear(x, w1, b1))
    h = F_.relu(F_.linear(h, w2, b2))
    return F_.cross_entropy(F_.linear(h, w3, b3), y)


def test_mlp_training_matches_torch_over_steps_with_one_program_per_half():
    rng = np.random.default_rng(0)
    shapes = [(32, 24), (32,), (16, 32), (16,), (5, 16), (5,)]
    params = [_pair(rng, *s, requires_grad=True) for s in shapes]
    jp, tp = [p[0] for p in params], [p[1] for p in params]
    x, tx = _pair(rng, 12, 24)
    labels = rng.integers(0, 5, 12)
    y, ty = jitorch.tensor(labels), torch.tensor(labels)
    compiled = jitorch.compile(lambda x, y, *ps: _mlp(x, y, *ps, jitorch))
    for step in range(4):
        scale = float(rng.uniform(0.5, 2.0))  # a random upstream gradient of the scalar loss
        lj, lt = compiled(x, y, *jp), _mlp(tx, ty, *tp, torch)
        _close(lj, lt)
        lj.backward(jitorch.tensor(scale))
        lt.backward(torch.tensor(scale))
        with jitorch.no_grad(), torch.no_grad():
            for a, b in zip(jp, tp):
                _close(a.grad, b.grad)
                a -= 0.1 * a.grad
                b -= 0.1 * b.grad
                a.grad, b.grad = None, None
    plan = compiled.train_entries[0].plan
    fwd, bwd = plan.fwd.native, plan.bwd.native
    assert fwd is not None and bwd is not None, (plan.fwd.native_reason, plan.bwd.native_reason)
    # Every product, bias add, ReLU, log_softmax and the loss's gather is native: one program per half; even the
    # targets' range check, a count the runner reads after the program (IndexError when it is not 0).
    assert fwd.report()["programs"] == 1 and _fallback_ops(fwd) == [] and len(fwd.checks) == 1
    assert bwd.report()["programs"] == 1 and _fallback_ops(bwd) == []  # nll_loss_backward is decomposed
    assert fwd.report()["broken"] is None and bwd.report()["broken"] is None


class Block(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.d, self.heads = d, heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


def _torch_block(block, x):
    params = {n: torch.tensor(p.detach().numpy()) for n, p in block.named_parameters()}
    d, h = block.d, block.heads
    b, t, _ = x.shape
    ln = torch.nn.functional.layer_norm
    q, k, v = torch.nn.functional.linear(ln(x, (d,), params["ln1.weight"], params["ln1.bias"]),
                                         params["qkv.weight"], params["qkv.bias"]).split(d, dim=-1)
    q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
    att = torch.softmax(q @ k.transpose(-2, -1) / (d // h) ** 0.5, dim=-1)
    x = x + torch.nn.functional.linear((att @ v).transpose(1, 2).reshape(b, t, d), params["proj.weight"],
                                       params["proj.bias"])
    hid = torch.nn.functional.gelu(torch.nn.functional.linear(ln(x, (d,), params["ln2.weight"], params["ln2.bias"]),
                                                              params["fc1.weight"], params["fc1.bias"]),
                                   approximate="tanh")
    return x + torch.nn.functional.linear(hid, params["fc2.weight"], params["fc2.bias"])


def test_transformer_block_input_gradient_matches_torch_with_native_halves():
    rng = np.random.default_rng(1)
    jitorch.manual_seed(0)
    block = Block()
    compiled = jitorch.compile(block)
    for step in range(3):
        x, tx = _pair(rng, 2, 8, 16, requires_grad=True)
        g = rng.standard_normal((2, 8, 16)).astype(np.float32)
        out = compiled(x)
        ref = _torch_block(block, tx)
        _close(out, ref)
        out.backward(jitorch.tensor(g))
        ref.backward(torch.tensor(g))
        _close(x.grad, tx.grad)
    plan = compiled._compiled_call.train_entries[0].plan
    fwd, bwd = plan.fwd.native, plan.bwd.native
    assert fwd is not None and bwd is not None
    # Each half is one program (products, batched products, views, fused kernels; the split's slice writes are copy
    # loops, and the layer norm backwards are decomposed into fused row kernels and sums).
    for half in (fwd, bwd):
        assert half.report()["programs"] == 1 and half.report()["python_steps"] == []


def test_block_weight_gradients_match_eager_over_adam_steps():
    jitorch.manual_seed(3)
    eager, model = Block(), Block()
    model.load_state_dict(eager.state_dict())
    compiled = jitorch.compile(model)
    opt_e, opt_c = jitorch.optim.Adam(eager.parameters(), lr=1e-2), jitorch.optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(2)
    x = jitorch.tensor(rng.standard_normal((2, 8, 16)).astype(np.float32))
    for _ in range(4):
        g = jitorch.tensor(rng.standard_normal((2, 8, 16)).astype(np.float32))
        for m, f, opt in ((eager, eager, opt_e), (model, compiled, opt_c)):
            opt.zero_grad()
            f(x).backward(g)
        for pe, pc in zip(eager.parameters(), model.parameters()):
            _close(pc.grad, pe.grad, rtol=1e-4, atol=1e-5)
        opt_e.step()
        opt_c.step()
    assert compiled._compiled_call.train_entries[0].plan.bwd.native is not None


def _graph(fn, *args):
    return CompiledGraph(trace(fn, args, {}).gm)


def test_unlowerable_row_splits_the_program_and_matches_torch():
    rng = np.random.default_rng(4)
    (x, tx), (w, tw) = _pair(rng, 6, 5), _pair(rng, 5, 5)

    def f(lib, x, w):
        h = (x @ w).tanh()
        return (lib.cumsum(h, 1) @ w).relu() * 2  # cumsum has no native form

    cg = _graph(lambda x, w: f(jitorch, x, w), x, w)
    for _ in range(3):
        out = cg((x, w))
    _close(out, f(torch, tx, tw))
    rep = cg.native.report()
    assert rep["programs"] == 2 and _fallback_ops(cg.native) == ["cumsum"]


def test_other_input_layout_falls_back_to_the_python_runner():
    rng = np.random.default_rng(5)
    (x, tx), (w, tw) = _pair(rng, 4, 3), _pair(rng, 3, 3)
    cg = _graph(lambda x, w: (x @ w).sigmoid() + x.sum(), x, w)
    for _ in range(3):
        cg((x, w))
    assert cg.native is not None
    wt = jitorch.tensor(np.ascontiguousarray(w.numpy().T)).t()  # same values, transposed strides
    assert cg.native((x, wt)) is native_runner.FALLBACK
    _close(cg((x, wt)), (tx @ tw).sigmoid() + tx.sum())


def test_outputs_are_fresh_arrays_each_call():
    rng = np.random.default_rng(6)
    (x, _), (w, tw) = _pair(rng, 4, 4), _pair(rng, 4, 4)
    cg = _graph(lambda x, w: ((x @ w) * 3, (x @ w).exp().view(16)), x, w)
    for _ in range(3):
        cg((x, w))
    a1, b1 = cg((x, w))
    keep = a1.numpy().copy()
    x2 = jitorch.tensor(rng.standard_normal((4, 4)).astype(np.float32))
    a2, b2 = cg((x2, w))
    np.testing.assert_array_equal(a1.numpy(), keep)  # the second call did not write into the first's outputs
    assert not np.shares_memory(a1.numpy(), a2.numpy()) and not np.shares_memory(b1.numpy(), b2.numpy())
    _close(a2, (torch.tensor(x2.numpy()) @ tw) * 3)
    assert cg.native.report()["fresh_outputs"] == 2


def test_saved_values_survive_two_forwards_before_the_backwards():
    rng = np.random.default_rng(7)
    (w, tw) = _pair(rng, 6, 6, requires_grad=True)
    compiled = jitorch.compile(lambda x, w: (x @ w).tanh() @ w)
    for _ in range(3):
        compiled(jitorch.ones(3, 6), w).sum().backward()
    xs = [_pair(rng, 3, 6) for _ in range(2)]
    gs = [rng.standard_normal((3, 6)).astype(np.float32) for _ in range(2)]
    outs = [compiled(x, w) for x, _ in xs]
    w.grad = None
    for out, g in reversed(list(zip(outs, gs))):
        out.backward(jitorch.tensor(g))
    for (_, tx), g in zip(xs, gs):
        ((tx @ tw).tanh() @ tw).backward(torch.tensor(g))
    _close(w.grad, tw.grad)
    assert compiled.train_entries[0].plan.fwd.native is not None


def test_batched_matmul_and_views_are_native():
    rng = np.random.default_rng(8)
    (q, tq), (k, tk) = _pair(rng, 2, 3, 5, 4), _pair(rng, 2, 3, 6, 4)
    cg = _graph(lambda q, k: F.softmax(q @ k.transpose(-2, -1), dim=-1).sum(1), q, k)
    for _ in range(3):
        out = cg((q, k))
    _close(out, torch.softmax(tq @ tk.transpose(-2, -1), dim=-1).sum(1))
    rep = cg.native.report()
    assert rep["python_steps"] == [] and rep["programs"] == 1 and rep["native_calls"] >= 6  # one product per batch


def test_disabled_runner_is_never_planned(monkeypatch):
    monkeypatch.setattr(native_runner, "ENABLED", False)
    x = jitorch.ones(3)
    cg = _graph(lambda x: x * 2, x)
    for _ in range(3):
        cg((x,))
    assert cg.native is None


def test_recompute_plan_schedules_backward_with_recomputed_chain_at_top():
    # The backward recomputes tanh(x @ w.T) * 2 at its top and reads tanh again after a product that consumed it:
    # fusion.partition used to leave 12 units unscheduled here and the plan fell back to saving the values.
    rng = np.random.default_rng(9)
    (x, tx), (w, tw) = _pair(rng, 4, 8, requires_grad=True), _pair(rng, 16, 8, requires_grad=True)
    plan = compile_training(lambda x, w: F.linear(jitorch.tanh(F.linear(x, w)) * 2, w.t()).sum(), (x, w), {},
                            None, None)
    names = [n.target.op.name for n in plan.bwd.gm.graph.nodes if n.op == "call_function" and hasattr(n.target, "op")]
    assert "tanh" in names  # recomputed, not saved
    g = float(rng.uniform(0.5, 2))
    plan((x, w)).backward(jitorch.tensor(g))
    torch.nn.functional.linear(torch.tanh(torch.nn.functional.linear(tx, tw)) * 2, tw.t()).sum().backward(
        torch.tensor(g))
    _close(x.grad, tx.grad)
    _close(w.grad, tw.grad)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pointwise_rows_outside_groups_and_zero_d_values(dtype):
    rng = np.random.default_rng(10)
    a = rng.standard_normal((5, 7)).astype(dtype)
    x, tx = jitorch.tensor(a), torch.tensor(a)
    cg = _graph(lambda x: (x.sum() / 35.0) * x.amax(1), x)
    for _ in range(3):
        out = cg((x,))
    _close(out, (tx.sum() / 35.0) * tx.amax(1))
    assert cg.native is not None


def test_plan_follows_the_thread_count():
    # A plan made at one thread runs large kernels natively (single-threaded); at two threads the program splits them
    # over the native pool (or, where there is none, they go back to the thread-splitting runner), so the plan is
    # remade when the thread count changes.
    from jitorch.codegen import llvm_pool

    from jitorch.runtime.threads import get_num_threads, set_num_threads

    old = get_num_threads()
    x = jitorch.randn(native_runner.PROGRAM_SPLIT_MIN * 2)
    graph = CompiledGraph(trace(lambda t: (t * 2).tanh() + 1, (x,), {}).gm)
    expected = ((x * 2).tanh() + 1).numpy()
    try:
        set_num_threads(1)
        for _ in range(3):
            np.testing.assert_allclose(graph((x,)).numpy(), expected, rtol=1e-6, atol=1e-6)
        assert graph.native is not None and graph._native_threads == 1
        set_num_threads(2)
        for _ in range(3):
            np.testing.assert_allclose(graph((x,)).numpy(), expected, rtol=1e-6, atol=1e-6)
        assert graph._native_threads == 2
        if llvm_pool.available():
            programs = [body for kind, body in graph.native.segments if kind == "native"]
            assert not graph.native.fallbacks and len(programs) == 1
            assert "alloca [" in programs[0].source  # the split call's argument block for the pool
        else:
            assert graph.native is None or any("large kernel" in why for _, why in graph.native.fallbacks)
    finally:
        set_num_threads(old)


def test_random_draws_run_ahead_of_one_program_with_eager_numbers():
    # Dropout's mask sits between two products in program order; it reads no computed value, so it is drawn first
    # and the products, ReLU and the mask's arithmetic stay one program.
    rng = np.random.default_rng(8)
    (x, _), (w1, _), (w2, _) = _pair(rng, 6, 5), _pair(rng, 5, 5), _pair(rng, 5, 3)

    def f(x, w1, w2):
        h = F.dropout(F.relu(x @ w1), 0.3)
        return (h + 0.1 * jitorch.randn(6, 5)) @ w2

    cg = _graph(f, x, w1, w2)
    names = [n.target.__name__ for n in cg.gm.graph.nodes if n.op == "call_function"]
    assert names[:2] == ["bernoulli_mask", "normal_sample"]
    for seed in range(4):  # the runner is planned on the second call, used from the third
        jitorch.manual_seed(seed)
        got = cg((x, w1, w2))
        jitorch.manual_seed(seed)
        _close(got, torch.tensor(f(x, w1, w2).numpy()), rtol=1e-5, atol=1e-6)
    assert cg.native is not None and cg.native.report()["programs"] == 1
    assert _fallback_ops(cg.native) == ["bernoulli_mask", "normal_sample"]
