"""CPU graphs (issue 6): capture and replay semantics against eager jitorch.

Every test zeroes the captured outputs before each replay, so a replay that writes nothing cannot pass.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch import _dispatch
from jitorch.cpu import CPUGraph, graph, make_graphed_callables
from training_helpers import assert_replay_follows_seed, small_mlp, zero


def _step(x, w, b):
    return jitorch.tanh(x @ w + b).sum(dim=1, keepdim=True) * 0.5 + x.exp().mean()


def test_replay_matches_eager_over_new_inputs():
    gen = np.random.default_rng(0)
    x, w, b = (jitorch.tensor(gen.standard_normal(s).astype(np.float32)) for s in ((4, 8), (8, 8), (8,)))
    g = CPUGraph()
    with graph(g):
        out = _step(x, w, b)
    for _ in range(4):
        new = jitorch.tensor(gen.standard_normal((4, 8)).astype(np.float32))
        x.copy_(new)
        zero(out)
        g.replay()
        np.testing.assert_allclose(out._data, _step(new, w, b)._data, rtol=1e-6, atol=1e-6)


def test_mixed_dtypes_and_scalars_promote_as_eager():
    i = jitorch.tensor([1, 2, 3])
    f = jitorch.tensor([0.5, 0.25, 2.0], dtype=jitorch.float64)
    g = CPUGraph()
    with graph(g):
        out = (i * f + 1.5) / 2 > i.float()
        mixed = i + 2.5
    i.copy_(jitorch.tensor([7, 0, -3]))
    zero(out, mixed)
    g.replay()
    assert out.tolist() == ((i * f + 1.5) / 2 > i.float()).tolist()
    assert mixed.tolist() == (i + 2.5).tolist() and mixed.dtype == jitorch.float32


def test_outputs_are_overwritten_by_the_next_replay():
    x = jitorch.tensor([1.0, 2.0])
    g = CPUGraph()
    with graph(g):
        y = x * 10
    x.fill_(3.0)
    g.replay()
    kept = y.clone()
    x.fill_(5.0)
    zero(y)
    g.replay()
    assert y.tolist() == [50.0, 50.0] and kept.tolist() == [30.0, 30.0]


def test_python_side_effects_happen_once_at_capture():
    calls = []
    x = jitorch.ones(2)
    g = CPUGraph()
    with graph(g):
        calls.append("ran")
        y = x + 1
    for _ in range(3):
        zero(y)
        g.replay()
    assert calls == ["ran"] and y.tolist() == [2.0, 2.0]


def test_inplace_ops_mutate_static_inputs_on_each_replay():
    counter = jitorch.zeros(2)
    g = CPUGraph()
    with graph(g):
        counter.add_(1.0)
        snapshot = counter * 1
    for expected in (2.0, 3.0, 4.0):
        zero(snapshot)
        g.replay()
        assert counter.tolist() == [expected] * 2 and snapshot.tolist() == [expected] * 2


def test_tensors_created_inside_restart_from_their_initial_value():
    x = jitorch.tensor([1.0, 2.0])
    g = CPUGraph()
    with graph(g):
        acc = jitorch.zeros(2)
        acc.add_(x)
        acc.mul_(2)
    for values in ([1.0, 1.0], [3.0, -1.0]):
        x.copy_(jitorch.tensor(values))
        zero(acc)
        g.replay()
        assert acc.tolist() == [2 * v for v in values]


def test_views_of_static_inputs_follow_them():
    xs = jitorch.zeros(3, 2)
    g = CPUGraph()
    with graph(g):
        outs = [xs[t] * (t + 1) for t in range(3)]
    xs.copy_(jitorch.arange(6.0).reshape(3, 2))
    zero(*outs)
    g.replay()
    assert [o.tolist() for o in outs] == [[0.0, 1.0], [4.0, 6.0], [12.0, 15.0]]


@pytest.mark.parametrize("sample", [
    lambda: jitorch.rand(3), lambda: jitorch.randn(2, 2), lambda: jitorch.randint(0, 1000, (4,)),
    lambda: jitorch.normal(1.0, 2.0, (3,)), lambda: jitorch.empty(3).uniform_(-1, 1),
    lambda: jitorch.empty(3).normal_(), lambda: jitorch.randn(3, dtype=jitorch.float64) * 2,
])
def test_random_ops_draw_new_numbers_on_every_replay(sample):
    g = CPUGraph()
    with graph(g):
        out = sample()
    seen = [out.clone()]
    for _ in range(3):
        zero(out)
        g.replay()
        assert not any(bool((out == s).all()) for s in seen)
        seen.append(out.clone())


def test_random_replay_follows_the_generator_state():
    g = CPUGraph()
    with graph(g):
        out = jitorch.randn(4)
    assert_replay_follows_seed(g, out, 7)
    gen = jitorch.Generator().manual_seed(3)
    g2 = CPUGraph()
    with graph(g2):
        own = jitorch.rand(4, generator=gen)
    gen.manual_seed(3)
    zero(own)
    g2.replay()
    assert own.tolist() == jitorch.rand(4, generator=gen.manual_seed(3)).tolist()


@pytest.mark.parametrize("forbidden", [
    lambda t: t.item(), lambda t: t.tolist(), lambda t: t.numpy(), lambda t: bool(t), lambda t: print(t),
    lambda t: float(t), lambda t: repr(t),
])
def test_forbidden_ops_raise_and_end_the_capture(forbidden):
    x = jitorch.ones(1)
    g = CPUGraph()
    with pytest.raises(RuntimeError, match="operation not permitted when the CPU graph is capturing"):
        with graph(g):
            y = x + 1
            forbidden(y)
    assert not _dispatch.MODES
    assert repr(x) == "tensor([1.])" and x.item() == 1.0  # the patches are gone
    with pytest.raises(RuntimeError, match="nothing captured"):
        g.replay()
    with graph(g):  # the graph is usable again
        z = x * 4
    zero(z)
    g.replay()
    assert z.tolist() == [4.0]


def test_unsupported_sampler_raises_and_ends_the_capture():
    p = jitorch.full((3,), 0.5)
    with pytest.raises(RuntimeError, match="not supported yet"):
        with graph(CPUGraph()):
            jitorch.poisson(p)
    assert not _dispatch.MODES


def test_bernoulli_of_computed_probabilities_replays_in_order_with_later_draws():
    # bernoulli(probs) reruns in its place; the rand after it must not draw ahead of it.
    x = jitorch.zeros(6)
    g = CPUGraph()
    with graph(g):
        sample = jitorch.bernoulli((x + 0.5).clamp(0, 1)) + jitorch.rand(6)
    report = g.native_report()
    assert [reason for _, reason in report["fallbacks"]] == [
        "a random draw from computed values (it reruns in its place)",
        "a random draw after one that reruns in its place"]
    for seed in (3, 4):
        x.copy_(jitorch.linspace(-0.5, 0.5, 6))
        jitorch.manual_seed(seed)
        zero(sample)
        g.replay()
        jitorch.manual_seed(seed)
        expected = jitorch.bernoulli((x + 0.5).clamp(0, 1)) + jitorch.rand(6)
        assert sample.tolist() == expected.tolist()


def _train_step(lib, net, opt, x, y, accumulate=False):
    if not accumulate:
        opt.zero_grad(set_to_none=True)
    loss = lib.nn.functional.mse_loss(net(x), y)
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize("accumulate", [False, True])
def test_training_step_replay_equals_eager_for_ten_steps(accumulate):
    gen = np.random.default_rng(5)
    weights = [(gen.standard_normal(s) * 0.3).astype(np.float32) for s in ((16, 8), (16,), (4, 16), (4,))]
    data = [(gen.standard_normal((32, 8)).astype(np.float32), gen.standard_normal((32, 4)).astype(np.float32))
            for _ in range(12)]
    # The eager twin is the reference (eager training itself is tested against torch in the optim and nn suites).
    jnet, tnet = small_mlp(jitorch, weights), small_mlp(jitorch, weights)
    jopt = jitorch.optim.SGD(jnet.parameters(), lr=0.05, momentum=0.9)
    topt = jitorch.optim.SGD(tnet.parameters(), lr=0.05, momentum=0.9)
    # Warm-up outside the capture (momentum buffers are created on the first step), as with CUDA graphs.
    for net, opt in ((jnet, jopt), (tnet, topt)):
        _train_step(jitorch, net, opt, jitorch.tensor(data[0][0]), jitorch.tensor(data[0][1]))
    sx, sy = jitorch.tensor(data[1][0]), jitorch.tensor(data[1][1])
    g = CPUGraph()
    with graph(g):
        loss = _train_step(jitorch, jnet, jopt, sx, sy, accumulate)
    _train_step(jitorch, tnet, topt, jitorch.tensor(data[1][0]), jitorch.tensor(data[1][1]), accumulate)
    assert g.native, g.native_report()  # forward, backward and update: one native call
    for x, y in data[2:]:
        sx.copy_(jitorch.tensor(x))
        sy.copy_(jitorch.tensor(y))
        zero(loss)
        g.replay()
        want = _train_step(jitorch, tnet, topt, jitorch.tensor(x), jitorch.tensor(y), accumulate)
        np.testing.assert_allclose(loss._data, want._data, rtol=1e-5)
        for p, q in zip(jnet.parameters(), tnet.parameters()):
            np.testing.assert_allclose(p._data, q._data, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(p.grad._data, q.grad._data, rtol=1e-5, atol=1e-6)


def test_optimizer_with_a_python_step_count_refuses_capture():
    w = jitorch.ones(3, requires_grad=True)
    opt = jitorch.optim.Adam([w], lr=0.1)
    (w * 2).sum().backward()
    opt.step()
    with pytest.raises(RuntimeError, match="step count"):
        with graph(CPUGraph()):
            (w * 2).sum().backward()
            opt.step()
    assert not _dispatch.MODES


def test_capture_begin_end_reset_and_debug_dump(tmp_path):
    x = jitorch.ones(3)
    g = CPUGraph()
    g.capture_begin()
    y = (x + 1).exp()
    g.capture_end()
    assert len(g) == 2 and "add" in g.debug_dump() and "exp" in g.debug_dump(tmp_path / "dump.txt")
    assert (tmp_path / "dump.txt").read_text() == g.debug_dump()
    assert g.pool() is not None
    with pytest.raises(RuntimeError, match="reset"):
        g.capture_begin()
    zero(y)
    g.replay()
    np.testing.assert_allclose(y._data, np.exp(2.0) * np.ones(3), rtol=1e-6)
    g.reset()
    with pytest.raises(RuntimeError, match="nothing captured"):
        g.replay()


def _rnn(h, xs, w, u, b, steps):
    for t in range(steps):
        h = jitorch.tanh(h @ w + xs[t] @ u + b)
    return h


def test_rnn_cell_loop_replay_equals_eager():
    gen = np.random.default_rng(1)

    def randn(*shape, scale=1.0):
        return jitorch.tensor((gen.standard_normal(shape) * scale).astype(np.float32))
    w, u, b = randn(64, 64, scale=0.1), randn(64, 64, scale=0.1), randn(1, 64, scale=0.1)
    h0, xs = randn(1, 64), randn(20, 1, 64)
    g = CPUGraph()
    with graph(g):
        h = _rnn(h0, xs, w, u, b, 20)
    for _ in range(3):
        new_h0, new_xs = randn(1, 64), randn(20, 1, 64)
        h0.copy_(new_h0)
        xs.copy_(new_xs)
        zero(h)
        g.replay()
        np.testing.assert_allclose(h._data, _rnn(new_h0, new_xs, w, u, b, 20)._data, rtol=1e-5, atol=1e-6)


def test_make_graphed_callables_replays_and_checks_inputs():
    w = jitorch.full((3, 3), 0.5)
    calls = []

    def f(x, scale):
        calls.append(1)
        return jitorch.relu(x @ w) * scale, x.sum()
    graphed = make_graphed_callables(f, (jitorch.zeros(2, 3), 2.0), num_warmup_iters=2)
    assert len(calls) == 3  # two warm-ups and the capture
    for values in ([[1.0, 2.0, 3.0], [-4.0, 0.0, 1.0]], [[0.0, 0.0, 1.0], [1.0, 1.0, 1.0]]):
        x = jitorch.tensor(values)
        out, total = graphed.static_out
        zero(out, total)
        got, got_total = graphed(x, 2.0)
        want, want_total = f(x, 2.0)
        assert got.tolist() == want.tolist() and got_total.item() == want_total.item()
    with pytest.raises(RuntimeError, match="shape"):
        graphed(jitorch.zeros(3, 3), 2.0)
    with pytest.raises(RuntimeError, match="dtype"):
        graphed(jitorch.zeros(2, 3, dtype=jitorch.float64), 2.0)
    with pytest.raises(RuntimeError, match="contiguous"):
        graphed(jitorch.zeros(3, 2).t(), 2.0)
    with pytest.raises(RuntimeError, match="baked"):
        graphed(jitorch.zeros(2, 3), 3.0)
    pair = make_graphed_callables((lambda a: a + 1, lambda a: a * 3), ((jitorch.zeros(2),), (jitorch.zeros(2),)))
    assert pair[0](jitorch.ones(2)).tolist() == [2.0, 2.0] and pair[1](jitorch.ones(2)).tolist() == [3.0, 3.0]


@pytest.mark.parametrize("channels, size, stride", [(1, 5, 1), (16, 10, 2)])  # K-major and channels-last windows
def test_cpu_graph_convolution_keeps_its_windows_for_the_weight_gradient(channels, size, stride):
    """In a capture, conv2d keeps its window matrix for the weight gradient as eager does; each replay refills it,
    so the gradients of every replay are that replay's (torch computes them from scratch). Five output columns: too
    few for the direct kernels' register chunks (which make no window matrix), so the GEMM path runs."""
    rng = np.random.default_rng(channels)
    jconv = jitorch.nn.Conv2d(channels, 8, 3, padding=1, stride=stride)
    tconv = torch.nn.Conv2d(channels, 8, 3, padding=1, stride=stride)
    out = (size - 1) // stride + 1
    with torch.no_grad():
        tconv.weight.copy_(torch.tensor(jconv.weight.detach().numpy()))
        tconv.bias.copy_(torch.tensor(jconv.bias.detach().numpy()))
    shape = (4, channels, size, size)
    x = jitorch.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
    gup = jitorch.tensor(rng.standard_normal((4, 8, out, out)).astype(np.float32))
    g = CPUGraph()
    with graph(g):
        (jconv(x) * gup).sum().backward()
    ops = {r.op.name for r in g._records if r.op is not None}
    assert "convolution_weight_cols" in ops and "convolution_weight" not in ops, ops
    for _ in range(3):
        xd, gd = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(gup.shape).astype(np.float32)
        with jitorch.no_grad():
            x.copy_(jitorch.tensor(xd))
            gup.copy_(jitorch.tensor(gd))
        g.replay()
        tx = torch.tensor(xd, requires_grad=True)
        tconv.weight.grad = tconv.bias.grad = None
        (tconv(tx) * torch.tensor(gd)).sum().backward()
        for got, want in ((x.grad, tx.grad), (jconv.weight.grad, tconv.weight.grad),
                          (jconv.bias.grad, tconv.bias.grad)):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("replace", ["resize_", "data"])
def test_an_input_given_new_memory_invalidates_the_capture(replace):
    from jitorch.cpu.graphs import CaptureInvalidated
    x = jitorch.arange(8, dtype=jitorch.float32)
    g = CPUGraph()
    with graph(g):
        z = x * 10
    x.copy_(jitorch.ones(8))  # new values in the same memory: what replay is for
    g.replay()
    assert z.tolist() == [10.0] * 8
    if replace == "resize_":
        x.resize_(16)
    else:
        x.data = jitorch.full((8,), 7.0)
    with pytest.raises(CaptureInvalidated, match="holds other memory than at capture"):
        g.replay()


@pytest.mark.parametrize("alias", ["detach", "data", "detach before the forward"])
def test_an_update_through_an_alias_of_a_parameter_is_not_undone_before_the_next_replay(alias):
    # ``w.detach()`` and ``w.data`` wrap w's memory without an op; they are not tensors made inside the capture,
    # whose initial value each replay restores: the update must compound over replays as in eager mode.
    rng = np.random.default_rng(3)
    w0, xs = rng.standard_normal(6).astype(np.float32), rng.standard_normal((5, 6)).astype(np.float32)
    results = {}
    for lib in (torch, jitorch):
        w, x = lib.nn.Parameter(lib.tensor(w0)), lib.zeros(6)

        def step():
            if alias == "detach before the forward":
                w.detach().mul_(0.9)  # weight decay first
            w.grad = None
            (w * x).sin().sum().backward()
            target = w.data if alias == "data" else w.detach()
            target.add_(w.grad, alpha=-0.1)

        out = []
        x.copy_(lib.tensor(xs[0]))
        step()
        g = None
        for i in range(1, 5):
            x.copy_(lib.tensor(xs[i]))
            if lib is torch:
                step()
            elif g is None:
                g = CPUGraph()
                with graph(g):
                    step()
            else:
                g.replay()
            out.append(w.detach().numpy().copy())
        results[lib.__name__] = np.array(out)
    np.testing.assert_allclose(results["jitorch"], results["torch"], rtol=1e-5, atol=1e-6)
