"""Compiled batch norm (jitorch/_compile/decompose_batch_norm.py): training-mode batch norm and its backward as
channel reductions and pointwise rows, so the ReLU after it and ReLU's gradient fuse into its kernels. Compiled
training equals eager jitorch and torch over several SGD steps (outputs, running statistics, num_batches_tracked,
gradients for random upstream gradients, parameters), for BatchNorm1d/2d, affine or not, with and without running
statistics, in training and evaluation, and with one channel."""
import numpy as np
import pytest
import torch

import jitorch
from jitorch._compile.backend import CompiledGraph
from jitorch._compile.fusion import FusedGroup
from jitorch._compile.trace import trace
from jitorch._compile.training import compile_training

# (module kind, input shape): BatchNorm1d over (N, C) and (N, C, L), BatchNorm2d over (N, C, H, W); one channel too.
CASES = [("1d", (16, 5)), ("1d", (6, 4, 9)), ("2d", (4, 3, 6, 5)), ("2d", (5, 1, 4, 3)), ("1d", (8, 1))]


def _pair(kind, channels, affine, track, seed, dtype=np.float32, momentum=0.1):
    """(jitorch, torch) ``BatchNorm -> ReLU`` nets with the same (random) affine parameters."""
    nets = []
    for lib in (jitorch, torch):
        bn = getattr(lib.nn, f"BatchNorm{kind}")(channels, affine=affine, track_running_stats=track,
                                                 momentum=momentum, dtype=getattr(lib, np.dtype(dtype).name))
        nets.append(lib.nn.Sequential(bn, lib.nn.ReLU()))
    if affine:
        rng = np.random.default_rng(seed)
        w, b = rng.uniform(0.5, 1.5, channels).astype(dtype), (rng.standard_normal(channels) * 0.5).astype(dtype)
        with jitorch.no_grad(), torch.no_grad():
            for net, lib in zip(nets, (jitorch, torch)):
                net[0].weight.copy_(lib.tensor(w))
                net[0].bias.copy_(lib.tensor(b))
    return nets


def _copy_of(jnet, kind, channels, affine, track, dtype, momentum):
    net = _pair(kind, channels, affine, track, 0, dtype, momentum)[0]
    net.load_state_dict(jnet.state_dict())
    return net


def _tol(dtype):
    return dict(rtol=2e-4, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-11)


def _close(got, want, dtype, what):
    got = got.detach().numpy() if hasattr(got, "detach") else got
    want = want.detach().numpy() if hasattr(want, "detach") else want
    np.testing.assert_allclose(got, want, err_msg=what, **_tol(dtype))


def _train(kind, shape, affine, track, training, dtype=np.float32, momentum=0.1, steps=3):
    """Train eager jitorch, compiled jitorch and torch side by side; compare everything after every step."""
    channels = shape[1]
    jnet, tnet = _pair(kind, channels, affine, track, 7, dtype, momentum)
    cnet = _copy_of(jnet, kind, channels, affine, track, dtype, momentum)
    for net in (jnet, tnet, cnet):
        net.train(training)
    compiled = jitorch.compile(lambda x, g: (cnet(x) * g).sum())
    opts = [lib.optim.SGD(list(net.parameters()), lr=0.1, momentum=0.9)
            for lib, net in ((jitorch, jnet), (torch, tnet), (jitorch, cnet)) if affine]
    rng = np.random.default_rng(len(shape) + 10 * affine + 20 * track)
    for step in range(steps):
        xd = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
        gd = rng.standard_normal(shape).astype(dtype)
        xs = [lib.tensor(xd, requires_grad=True) for lib in (jitorch, torch, jitorch)]
        for opt in opts:
            opt.zero_grad()
        outs = [jnet(xs[0]), tnet(xs[1])]
        for out, g in zip(outs, (jitorch.tensor(gd), torch.tensor(gd))):
            (out * g).sum().backward()
        loss = compiled(xs[2], jitorch.tensor(gd))
        loss.backward()
        _close(loss.item(), float((outs[1] * torch.tensor(gd)).sum().detach()), dtype, f"loss, step {step}")
        for got, name in ((xs[0], "eager"), (xs[2], "compiled")):
            _close(got.grad, xs[1].grad, dtype, f"{name} input gradient, step {step}")
        for (name, p), tp, cp in zip(jnet.named_parameters(), tnet.parameters(), cnet.parameters()):
            _close(p.grad, tp.grad, dtype, f"eager {name} gradient, step {step}")
            _close(cp.grad, tp.grad, dtype, f"compiled {name} gradient, step {step}")
        for (name, b), tb, cb in zip(jnet.named_buffers(), tnet.buffers(), cnet.buffers()):
            if name.endswith("num_batches_tracked"):
                assert int(cb) == int(b) == int(tb), (name, int(cb), int(b), int(tb))
            else:
                _close(b, tb, dtype, f"eager {name}, step {step}")
                _close(cb, tb, dtype, f"compiled {name}, step {step}")
        for opt in opts:
            opt.step()
        for p, tp, cp in zip(jnet.parameters(), tnet.parameters(), cnet.parameters()):
            _close(cp, tp, dtype, f"compiled parameter after step {step}")
            _close(p, tp, dtype, f"eager parameter after step {step}")
    return compiled


@pytest.mark.parametrize("track", [True, False])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("kind, shape", CASES)
def test_compiled_training_batch_norm_relu_matches_eager_and_torch(kind, shape, affine, track):
    _train(kind, shape, affine, track, training=True)


@pytest.mark.parametrize("track", [True, False])  # (without running statistics, evaluation uses the batch's)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("kind, shape", CASES[:3])
def test_compiled_eval_batch_norm_relu_matches_eager_and_torch(kind, shape, affine, track):
    _train(kind, shape, affine, track=track, training=False)


def test_batch_sizes_that_change_between_calls_match_torch():
    jnet, tnet = _pair("2d", 3, True, True, 5)
    compiled = jitorch.compile(lambda x, g: (jnet(x) * g).sum())
    rng = np.random.default_rng(5)
    for shape in ((4, 3, 5, 5), (6, 3, 5, 5), (9, 3, 5, 5), (4, 3, 7, 7)):
        xd, gd = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
        jx, tx = jitorch.tensor(xd, requires_grad=True), torch.tensor(xd, requires_grad=True)
        compiled(jx, jitorch.tensor(gd)).backward()
        (tnet(tx) * torch.tensor(gd)).sum().backward()
        _close(jx.grad, tx.grad, np.float32, f"input gradient at {shape}")
        for (name, p), q in zip(jnet.named_parameters(), tnet.parameters()):
            _close(p.grad, q.grad, np.float32, f"{name} gradient at {shape}")
            p.grad, q.grad = None, None
        for (name, b), tb in zip(jnet.named_buffers(), tnet.buffers()):
            _close(b, tb, np.float32, f"{name} at {shape}")


@pytest.mark.parametrize("kind, shape", [("1d", (6, 4, 9)), ("2d", (4, 3, 6, 5))])
def test_float64_and_cumulative_average_match_torch(kind, shape):
    _train(kind, shape, True, True, training=True, dtype=np.float64)
    _train(kind, shape, True, True, training=True, momentum=None)


def _groups(graph):
    return [u for _, u in graph.steps if isinstance(u, FusedGroup)]


def _full(graph, numel):
    """The kernels over a whole activation (not the per-channel ones)."""
    return [g for g in _groups(graph) if int(np.prod(g.shape)) == numel]


def _bn_relu_plan(affine=True, track=True):
    bn = jitorch.nn.BatchNorm2d(4, affine=affine, track_running_stats=track)
    x = jitorch.randn(8, 4, 6, 5, requires_grad=True)
    return compile_training(lambda x: jitorch.relu(bn(x)), (x,), {}, bn, None)


def _ops(graph):
    return [n.target.op.name for n in graph.gm.graph.nodes if hasattr(n.target, "op")]


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_relu_forward_is_two_kernels(affine):
    plan = _bn_relu_plan(affine)
    assert "native_batch_norm" not in _ops(plan.fwd)
    big = _full(plan.fwd, 8 * 4 * 6 * 5)
    # The statistics: one two-pass kernel over the channels-first view (mean, then the centred squares); the
    # output: one pointwise kernel that applies the ReLU too (before: the batch norm row and a ReLU kernel).
    assert len(big) == 2, [g.ops for g in big]
    stats, out = big
    assert stats.shape == (4, 8, 6, 5) and stats.reduce_axes == 3 and stats.ops.count("sum") == 2
    assert "rsqrt" in stats.ops and "relu" not in stats.ops
    assert out.shape == (8, 4, 6, 5) and out.ops[-1] == "relu" and "sum" not in out.ops
    # The two running statistics' updates are small kernels of their own.
    assert len(_groups(plan.fwd)) == 4


def test_batch_norm_relu_backward_fuses_relu_gradient_twice():
    plan = _bn_relu_plan()
    assert "native_batch_norm_backward" not in _ops(plan.bwd)
    big = _full(plan.bwd, 8 * 4 * 6 * 5)
    assert len(big) == 2, [g.ops for g in big]
    sums, gx = big
    # sum(g) and sum(g * xhat) in one pass over the channels-first layout, ReLU's gradient computed inside it ...
    assert sums.shape == (4, 8, 6, 5) and sums.ops.count("sum") == 2 and "threshold_backward" in sums.ops
    # ... and again inside the input gradient's kernel: the gradient before the batch norm is never written.
    assert gx.shape == (8, 4, 6, 5) and "threshold_backward" in gx.ops and "sum" not in gx.ops
    assert all(int(np.prod(n.meta["val"][0])) == 4 for n in sums.outputs), sums.outputs


def test_without_an_input_gradient_the_backward_is_one_reduction_kernel():
    bn = jitorch.nn.BatchNorm2d(3)
    x = jitorch.randn(4, 3, 5, 5)  # no input gradient: the weight and bias gradients alone
    plan = compile_training(lambda x: jitorch.relu(bn(x)), (x,), {}, bn, None)
    big = _full(plan.bwd, 4 * 3 * 5 * 5)
    assert len(big) == 1 and big[0].ops.count("sum") == 2, [g.ops for g in big]


def test_explain_reports_the_fused_relu():
    bn = jitorch.nn.BatchNorm2d(4)
    report = jitorch.compiler.explain(lambda x: jitorch.relu(bn(x)))(jitorch.randn(8, 4, 5, 5, requires_grad=True))
    assert any(k[-1] == "relu" and "sub" in k for k in report.kernels), report.kernels
    assert sum("threshold_backward" in k for k in report.backward_kernels) == 2, report.backward_kernels


def test_eval_batch_norm_is_one_pass_over_the_activation():
    bn = jitorch.nn.BatchNorm2d(4).eval()
    with jitorch.no_grad():
        bn.running_mean.copy_(jitorch.randn(4))
        bn.running_var.copy_(jitorch.rand(4) + 0.5)
    x = jitorch.randn(8, 4, 6, 5)
    with jitorch.no_grad():
        inference = CompiledGraph(trace(lambda x: jitorch.relu(bn(x)), (x,), {}).gm)
    training = compile_training(lambda x: jitorch.relu(bn(x)), (x.clone().requires_grad_(),), {}, bn, None).fwd
    for graph in (inference, training):
        full = _full(graph, 8 * 4 * 6 * 5)
        # One pointwise kernel over the activation, ReLU included; only C-sized values (rsqrt(var + eps)) before it.
        assert len(full) == 1 and full[0].ops[-1] == "relu" and "sub" in full[0].ops, [g.ops for g in full]
        assert all(int(np.prod(g.shape)) == 4 for g in _groups(graph) if g not in full)


def test_conv_bias_gradient_is_a_fused_channel_sum_and_trains_like_torch():
    rng = np.random.default_rng(3)
    nets = []
    for lib in (jitorch, torch):
        lib.manual_seed(0)
        # (Conv2d(4, 8) runs the direct kernel: its bias gradient is a sum row, not a by-product of windows.)
        nets.append(lib.nn.Sequential(lib.nn.Conv2d(4, 8, 3, padding=1), lib.nn.BatchNorm2d(8), lib.nn.ReLU(),
                                      lib.nn.Conv2d(8, 4, 3, padding=1), lib.nn.ReLU(), lib.nn.MaxPool2d(2)))
    jnet, tnet = nets
    with jitorch.no_grad():
        for p, q in zip(jnet.parameters(), tnet.parameters()):
            p.copy_(jitorch.tensor(q.detach().numpy()))
    compiled = jitorch.compile(lambda x, g: (jnet(x) * g).sum())
    jopt, topt = jitorch.optim.SGD(jnet.parameters(), lr=0.05), torch.optim.SGD(tnet.parameters(), lr=0.05)
    for step in range(3):
        xd = rng.standard_normal((4, 4, 16, 16)).astype(np.float32)
        gd = rng.standard_normal((4, 4, 8, 8)).astype(np.float32)
        jopt.zero_grad()
        topt.zero_grad()
        compiled(jitorch.tensor(xd), jitorch.tensor(gd)).backward()
        (tnet(torch.tensor(xd)) * torch.tensor(gd)).sum().backward()
        for (name, p), q in zip(jnet.named_parameters(), tnet.parameters()):
            _close(p.grad, q.grad, np.float32, f"{name} gradient, step {step}")
        for (name, b), tb in zip(jnet.named_buffers(), tnet.buffers()):
            _close(b, tb, np.float32, f"{name}, step {step}")
        jopt.step()
        topt.step()
    plan = compiled.train_entries[0].plan
    # Every backward sum runs in a kernel (the bias gradients' ``g.sum((0, 2, 3))`` included): no eager sum row.
    eager_rows = [u.target.op.name for k, u in plan.bwd.steps if k is None and hasattr(u.target, "op")]
    assert "sum" not in eager_rows and "native_batch_norm_backward" not in eager_rows, eager_rows
    bias_sums = [g for g in _groups(plan.bwd) if g.ops == ["sum"] and g.shape == (8, 4, 16, 16)]
    assert len(bias_sums) == 1 and bias_sums[0].reduce_axes == 3, [(g.shape, g.ops) for g in _groups(plan.bwd)]
