"""jitorch.compile under autograd with graph breaks: each segment compiled with its own backward, equal to eager."""
import copy

import numpy as np
import pytest
import torch

import jitorch
from jitorch import nn

STAGE = "_SegmentStageBackward"  # the grad_fn of a value a compiled segment produced


def _close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a.tolist()), np.asarray(b.tolist()), rtol=rtol, atol=atol)


def _leaves(arrays):
    return [jitorch.tensor(a, requires_grad=True) for a in arrays], [torch.tensor(a, requires_grad=True)
                                                                      for a in arrays]


def _check_calls(fn, datas, rng, torch_fn=None):
    """Call the compiled ``fn`` on each input set of ``datas`` and compare values and input gradients (for a random
    upstream gradient) with eager jitorch and torch; returns the compiled function and each call's grad_fn name."""
    cf, names = jitorch.compile(fn), []
    for arrays in datas:
        (js, ts), (es, _) = _leaves(arrays), _leaves(arrays)
        out, ref, tout = cf(*js), fn(*es), (torch_fn or fn)(*ts)
        g = rng.standard_normal(tuple(out.shape)).astype(np.float32)
        out.backward(jitorch.tensor(g))
        ref.backward(jitorch.tensor(g))
        tout.backward(torch.tensor(g))
        _close(out, ref)
        _close(out, tout.detach(), rtol=1e-4, atol=1e-5)
        for j, e, t in zip(js, es, ts):
            _close(j.grad, e.grad)
            _close(j.grad, t.grad, rtol=1e-4, atol=1e-5)
        names.append(type(out.grad_fn).__name__)
    return cf, names


def _inputs(rng, shapes, n):
    return [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(n)]


def scale_by_count(x, w):
    h = (x @ w).tanh()
    k = (h > 0).sum().item()  # an int: calls with the same count reuse that branch
    return (h * (1 + k)).exp() + x.sum()


def test_item_break_gradients_equal_eager_and_torch_over_new_inputs():
    rng = np.random.default_rng(0)
    first, second = _inputs(rng, [(2, 3), (3, 2)], 2)
    datas = [first, second, first] + _inputs(rng, [(2, 3), (3, 2)], 3) + [second, first]
    cf, names = _check_calls(scale_by_count, datas, rng)
    (entry,) = cf.train_entries
    assert entry.run is not None and entry.replay is not None and entry.replay.bailed is None
    assert "Tensor.item()" in entry.break_reason
    # A call whose count was seen before runs compiled segments: its output comes from a segment's Function.
    assert names[2] == names[-2] == names[-1] == STAGE
    # Fused on both sides of the break, forward and backward.
    assert ["tanh"] in cf.segment_kernels(entry) and ["mul", "exp", "add"] in cf.segment_kernels(entry)
    assert ["tanh_backward"] in entry.backward_kernel_ops


def _scaled_forward(self, x):
    h = self.lin(x).tanh()
    k = (h > 0).sum().item()
    return (h * (1 + k)).sin()


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    forward = _scaled_forward


class TorchScaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    forward = _scaled_forward


def test_item_break_parameter_gradients_equal_eager_and_torch():
    model, ref = Scaled(), TorchScaled()
    with torch.no_grad():
        for p, q in zip(model.parameters(), ref.parameters()):
            q.copy_(torch.tensor(p.detach().numpy()))
    compiled, rng = jitorch.compile(model), np.random.default_rng(8)
    first, second = _inputs(rng, [(4, 3)], 2)
    names = []
    for (a,) in [first, second, first, second, first] + _inputs(rng, [(4, 3)], 2):
        g = rng.standard_normal((4, 2)).astype(np.float32)
        model.zero_grad()
        x = jitorch.tensor(a, requires_grad=True)
        out = compiled(x)
        out.backward(jitorch.tensor(g))
        got = [x.grad] + [p.grad for p in model.parameters()]
        model.zero_grad()
        x = jitorch.tensor(a, requires_grad=True)
        model(x).backward(jitorch.tensor(g))
        tx = torch.tensor(a, requires_grad=True)
        ref.zero_grad()
        ref(tx).backward(torch.tensor(g))
        eager, want = [x.grad] + [p.grad for p in model.parameters()], [tx.grad] + [p.grad for p in ref.parameters()]
        for c, e, t in zip(got, eager, want):
            _close(c, e)
            _close(c, t, rtol=1e-4, atol=1e-5)
        names.append(type(out.grad_fn).__name__)
    assert names[2] == names[4] == STAGE  # inputs seen before: compiled segments


def branchy(x, w):
    h = x @ w
    if h.sum() > 0:
        return (h * 2).sigmoid() * x.sum()
    return h.tanh() - w.mean()


def test_data_dependent_if_takes_both_branches_with_compiled_backward():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    w = np.abs(rng.standard_normal((4, 2))).astype(np.float32)
    pos, neg = [np.abs(x), w], [-np.abs(x), w]
    cf, names = _check_calls(branchy, [pos, neg, pos, neg, neg, pos], rng)
    assert cf._branches == 1 and names[2:] == [STAGE] * 4
    (entry,) = cf.train_entries
    kernels, backward = cf.segment_kernels(entry), entry.backward_kernel_ops
    assert ["mul", "sigmoid", "mul"] in kernels and ["tanh", "sub"] in kernels  # each side's segment is fused
    assert backward and any("tanh_backward" in k for k in backward)


def _mlp_forward(self, x):
    h = self.l1(x).relu()
    if h.mean() > 0.3:  # a graph break in the middle of the forward
        h = h * 2
    return self.l2(h).log_softmax(-1)


class BreakMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(6, 8), nn.Linear(8, 3)

    forward = _mlp_forward


class TorchBreakMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(6, 8), torch.nn.Linear(8, 3)

    forward = _mlp_forward


def test_module_with_a_break_trains_like_eager_and_torch_with_sgd():
    jitorch.manual_seed(0)
    model, ref = BreakMLP(), TorchBreakMLP()
    eager = copy.deepcopy(model)
    with torch.no_grad():
        for p, q in zip(model.parameters(), ref.parameters()):
            q.copy_(torch.tensor(p.detach().numpy()))
    compiled = jitorch.compile(model)
    opts = [jitorch.optim.SGD(model.parameters(), lr=0.1), jitorch.optim.SGD(eager.parameters(), lr=0.1),
            torch.optim.SGD(ref.parameters(), lr=0.1)]
    rng = np.random.default_rng(2)
    for step in range(6):
        x = rng.standard_normal((5, 6)).astype(np.float32) * (0.1 if step % 2 else 4.0)  # both sides of the if
        g = rng.standard_normal((5, 3)).astype(np.float32)
        for opt in opts:
            opt.zero_grad()
        out = compiled(jitorch.tensor(x))
        out.backward(jitorch.tensor(g))
        eager(jitorch.tensor(x)).backward(jitorch.tensor(g))
        ref(torch.tensor(x)).backward(torch.tensor(g))
        for opt in opts:
            opt.step()
        for p, e, t in zip(model.parameters(), eager.parameters(), ref.parameters()):
            _close(p, e)
            _close(p, t.detach(), rtol=1e-4, atol=1e-5)
    call = compiled._compiled_call
    (entry,) = call.train_entries
    assert entry.replay.bailed is None and call._branches == 1 and type(out.grad_fn).__name__ == STAGE


def test_explain_reports_the_break_and_the_compiled_segments_of_a_training_call():
    model = BreakMLP()
    report = jitorch.compiler.explain(model)(jitorch.randn(4, 6))
    assert report.graph_break_count == 1 and "h.mean() > 0.3" in report.break_reasons[0]
    assert report.graph_count == 2
    assert ["relu"] in report.kernels and ["log_softmax"] in report.kernels
    assert ["threshold_backward"] in report.backward_kernels
    assert ["log_softmax_backward_data"] in report.backward_kernels


def constant_part(x):
    c = jitorch.arange(4.0).exp() if isinstance(x, jitorch.Tensor) else torch.arange(4.0).exp()
    if c.sum() > 1:  # a segment none of whose inputs requires grad
        return x * c
    return x


def picks(x):
    i = x.argmax()  # an integer output next to outputs that require grad
    y = x.exp()
    mask = y > 1.0
    v = int(i)  # a break with y (requires grad), mask and i (do not) alive
    return y * v + y[v] + mask * y


def test_segments_without_grad_inputs_and_outputs_that_do_not_need_grad():
    rng = np.random.default_rng(3)
    cf, names = _check_calls(constant_part, _inputs(rng, [(4,)], 1) * 3, rng)
    assert names[1:] == [STAGE, STAGE]
    data = _inputs(rng, [(4,)], 2)
    cf, names = _check_calls(picks, data * 3, rng)
    assert names[2:] == [STAGE] * 4 and cf.train_entries[0].replay.bailed is None


def test_double_backward_through_a_call_with_a_break():
    def f(x, w):
        y = (x * w).sin()
        if y.sum() > -100:
            return (y ** 2).sum()
        return y.sum()

    cf = jitorch.compile(f)
    rng = np.random.default_rng(4)
    for arrays in _inputs(rng, [(4,), (4,)], 3):
        (x, w), (tx, tw) = _leaves(arrays)
        (gx,) = jitorch.autograd.grad(cf(x, w), x, create_graph=True)
        (tgx,) = torch.autograd.grad(f(tx, tw), tx, create_graph=True)
        _close(gx, tgx.detach(), rtol=1e-5)
        g = rng.standard_normal(4).astype(np.float32)
        gx.backward(jitorch.tensor(g))
        tgx.backward(torch.tensor(g))
        _close(x.grad, tx.grad, rtol=1e-4, atol=1e-5)
        _close(w.grad, tw.grad, rtol=1e-4, atol=1e-5)
    assert cf.train_entries[0].replay.bailed is None


def test_hooks_retain_grad_and_grad_of_an_intermediate_see_the_whole_gradient():
    def f(x, lib, seen):
        y = x.exp()
        z = y * 3  # z is computed from y in the same segment: y's gradient includes z's part
        y.register_hook(lambda g: seen.append(g.clone()))
        y.retain_grad()
        if z.sum() > 0:
            return z * y, y
        return z - y, y

    def g(x):
        h = x.tanh()
        z = (h * h).exp()
        if x.sum() > -100:
            return h, z
        return h, z

    cf, cg = jitorch.compile(lambda x, s: f(x, jitorch, s)), jitorch.compile(g)
    rng = np.random.default_rng(5)
    for (a,) in _inputs(rng, [(4,)], 3):
        (x,), (tx,) = _leaves([a])
        seen, tseen = [], []
        (out, y), (tout, ty) = cf(x, seen), f(tx, torch, tseen)
        up = rng.standard_normal(4).astype(np.float32)
        out.backward(jitorch.tensor(up))
        tout.backward(torch.tensor(up))
        _close(x.grad, tx.grad, rtol=1e-5)
        _close(y.grad, ty.grad, rtol=1e-5)
        _close(seen[0], tseen[0], rtol=1e-5)
        (h, z), (th, tz) = cg(x), g(tx)
        (gh,) = jitorch.autograd.grad(z, h, jitorch.tensor(up))
        (tgh,) = torch.autograd.grad(tz, th, torch.tensor(up))
        _close(gh, tgh, rtol=1e-5)
    assert type(h.grad_fn).__name__ == type(z.grad_fn).__name__ == STAGE


def test_detach_no_grad_and_in_place_inside_the_function():
    def detached(x):
        y = x.exp()
        m = y.detach().mean()
        return y * m if m > 1 else y - m

    def no_grad_part(x, lib):
        y = x * 3
        with lib.no_grad():
            z = y * 2
        return y * z if z.sum() > 0 else y + z

    def in_place(x):
        y = x * 2
        y.relu_()  # an in-place op under autograd: the rest of the call runs eagerly
        return y * 3 if y.sum() > 1 else y.exp()

    def new_leaf(x):
        y = x.exp()
        z = y.detach().requires_grad_()  # a new leaf sharing y's values
        w = z * y
        return w * 2 if w.sum() > -100 else w

    rng = np.random.default_rng(6)
    data = _inputs(rng, [(5,)], 2) * 2
    _, names = _check_calls(detached, data, rng)
    assert names[2:] == [STAGE] * 2
    cf, names = _check_calls(lambda x: no_grad_part(x, jitorch), data, rng, lambda x: no_grad_part(x, torch))
    assert names[2:] == [STAGE] * 2
    cf, _ = _check_calls(in_place, data, rng)
    assert "in-place relu_()" in cf.train_entries[0].replay.bailed
    cf, _ = _check_calls(new_leaf, data, rng)
    assert "requires_grad changed" in cf.train_entries[0].replay.bailed


def test_views_of_returned_values_follow_in_place_writes_like_eager():
    def f(x):
        y = x * 2
        v = y.view(2, 2)
        if v.sum() > -100:
            return y, v
        return y, v

    cf = jitorch.compile(f)
    for i in range(3):
        a = np.arange(4, dtype=np.float32) + i
        (x,), (tx,) = _leaves([a])
        (y, v), (ty, tv) = cf(x), f(tx)
        y.mul_(3)
        ty.mul_(3)
        (v * v).sum().backward()
        (tv * tv).sum().backward()
        _close(v, tv.detach())
        _close(x.grad, tx.grad)


def test_in_place_write_to_a_saved_input_before_backward_raises():
    @jitorch.compile
    def f(x, y):
        z = x * y
        return z.tanh() if z.sum() > -100 else z

    for _ in range(3):
        x, y = jitorch.randn(3, requires_grad=True), jitorch.randn(3)
        out = f(x, y)
        with jitorch.no_grad():
            y.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()
    assert f.train_entries[0].replay.bailed is None


def test_fullgraph_still_raises_at_the_first_break_under_autograd():
    f = jitorch.compile(lambda x: x * 2 if x.sum() > 0 else x, fullgraph=True)
    with pytest.raises(RuntimeError, match="fullgraph=True"):
        f(jitorch.ones(2, requires_grad=True))


def test_outputs_without_gradient_leave_inputs_only_they_reach_without_grad():
    def f(x, y, w):
        aux = y.exp() * w  # alive at the break, never used by the loss: y gets no gradient, as in eager
        out = (x * w).tanh()
        if out.sum() > -100:
            return out * 2, aux
        return out, aux

    cf = jitorch.compile(f)
    rng = np.random.default_rng(7)
    for arrays in _inputs(rng, [(3,), (3,), (3,)], 3):
        arrays[1][0] = 100.0  # exp overflows: an unused output's backward (0 * inf) must not reach w
        (x, y, w), (tx, ty, tw) = _leaves(arrays)
        (out, _), (tout, _) = cf(x, y, w), f(tx, ty, tw)
        g = rng.standard_normal(3).astype(np.float32)
        out.backward(jitorch.tensor(g))
        tout.backward(torch.tensor(g))
        assert y.grad is None and ty.grad is None and np.isfinite(w.grad.numpy()).all()
        _close(x.grad, tx.grad, rtol=1e-5)
        _close(w.grad, tw.grad, rtol=1e-5)
    assert type(out.grad_fn).__name__ == STAGE
