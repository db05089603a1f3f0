"""jitorch.compile with autograd: which tensors get gradients (tensors that require grad reached by name: globals,
closure cells, dict entries, rebound every step; a tensor passed twice or also a parameter), and the calls that fall
back to eager or raise as eager autograd does (double backward, random or in-place forwards, inputs changed in place
before the backward). Models trained compiled against eager are in test_compile_training.py."""
import numpy as np
import pytest

import jitorch
import jitorch.nn.functional as F
from jitorch import nn


def _close(a, b):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)


_W1 = jitorch.tensor(np.random.default_rng(8).standard_normal((6, 8)).astype(np.float32) * 0.4, requires_grad=True)


def _global_mlp(x, b1, w2):
    """Reads the global ``_W1`` and the closure-free arguments: a tutorial's hand-made parameters."""
    return F.cross_entropy(jitorch.tanh(x @ _W1 + b1) @ w2, jitorch.tensor([0, 1, 2, 3, 0]))


def test_free_tensors_that_require_grad_are_compiled_graph_inputs():
    """Tensors that require grad reached by name (a global, closure cells) are lifted into the training graph and
    get gradients, with no graph break, as a module's parameters: hand-written SGD over them trains like eager."""
    global _W1
    rng = np.random.default_rng(9)
    b1 = jitorch.zeros(8, requires_grad=True)
    u = jitorch.tensor(rng.standard_normal((8, 4)).astype(np.float32) * 0.4, requires_grad=True)
    w2 = u * 1.0  # not a leaf: its gradient flows on into ``u``
    compiled = jitorch.compile(lambda x: (_global_mlp(x, b1, w2), _global_mlp(x, b1, w2).detach()))
    report = jitorch.compiler.explain(lambda x: _global_mlp(x, b1, w2))(jitorch.randn(5, 6))
    assert (report.graph_count, report.graph_break_count) == (1, 0), report
    twins = [t.detach().clone().requires_grad_() for t in (_W1, b1, u)]
    for _ in range(3):
        x = jitorch.tensor(rng.standard_normal((5, 6)).astype(np.float32))
        loss, logged = compiled(x)
        assert loss.requires_grad and not logged.requires_grad and logged is not loss
        loss.backward()
        tw1, tb1, tu = twins
        want = F.cross_entropy(jitorch.tanh(x @ tw1 + tb1) @ (tu * 1.0), jitorch.tensor([0, 1, 2, 3, 0]))
        want.backward()
        _close(loss.detach(), want.detach())
        with jitorch.no_grad():
            for p, q in zip((_W1, b1, u), twins):
                _close(p.grad, q.grad)
                p -= 0.5 * p.grad
                q -= 0.5 * q.grad
                p.grad, q.grad = None, None
        w2 = u * 1.0  # rebound to a new tensor: the guard on the lifted tensors' identities retraces
    assert compiled.train_entries[0].plan is not None
    # A new global: compiled anew, and the gradient is the new tensor's.
    _W1 = jitorch.tensor(rng.standard_normal((6, 8)).astype(np.float32), requires_grad=True)
    x = jitorch.tensor(rng.standard_normal((5, 6)).astype(np.float32))
    compiled(x)[0].backward()
    twin = _W1.detach().clone().requires_grad_()
    F.cross_entropy(jitorch.tanh(x @ twin + b1.detach()) @ w2.detach(), jitorch.tensor([0, 1, 2, 3, 0])).backward()
    _close(_W1.grad, twin.grad)


_REBOUND = None


def _rebound_loss(x, y):
    return ((x @ _REBOUND - y) ** 2).mean()


def test_a_global_rebound_every_step_keeps_one_training_entry_and_stays_correct():
    # ``w = (w - lr * w.grad).requires_grad_()``: a new tensor each step, looked up by name on every call, guarded by
    # layout in training. Inference graphs hold it as a constant, so there its identity still decides.
    global _REBOUND
    rng = np.random.default_rng(10)
    _REBOUND = jitorch.tensor(rng.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
    twin = _REBOUND.detach().clone().requires_grad_()
    x, y = (jitorch.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((6, 4), (6, 3)))
    compiled = jitorch.compile(_rebound_loss)
    for _ in range(10):
        loss = compiled(x, y)
        loss.backward()
        want = ((x @ twin - y) ** 2).mean()
        want.backward()
        _close(loss.detach(), want.detach())
        _close(_REBOUND.grad, twin.grad)
        with jitorch.no_grad():
            _REBOUND = (_REBOUND - 0.1 * _REBOUND.grad).requires_grad_()
            twin = (twin - 0.1 * twin.grad).requires_grad_()
    assert len(compiled.train_entries) == 1 and compiled.train_entries[0].plan is not None
    with jitorch.no_grad():
        for _ in range(2):
            _close(compiled(x, y), _rebound_loss(x, y))
            _REBOUND = _REBOUND * 0.5  # a new constant for the inference graph: retraced, never stale
    _REBOUND = jitorch.tensor(rng.standard_normal((4, 5)).astype(np.float32), requires_grad=True)
    y5 = jitorch.tensor(rng.standard_normal((6, 5)).astype(np.float32))
    compiled(x, y5).backward()  # another layout: a second training entry
    twin = _REBOUND.detach().clone().requires_grad_()
    ((x @ twin - y5) ** 2).mean().backward()
    _close(_REBOUND.grad, twin.grad)
    assert len(compiled.train_entries) == 2


_PARAMS = {}


def test_a_tensor_in_a_global_dict_rebound_every_step_trains_the_new_one():
    rng = np.random.default_rng(13)
    x = jitorch.tensor(rng.standard_normal((3, 4)).astype(np.float32))
    start = rng.standard_normal((4, 4)).astype(np.float32)
    compiled = jitorch.compile(lambda x: ((x @ _PARAMS["w"]).tanh() ** 2).sum())
    runs = []
    for fn in (lambda x: ((x @ _PARAMS["w"]).tanh() ** 2).sum(), compiled):
        _PARAMS["w"] = jitorch.tensor(start, requires_grad=True)
        losses = []
        for _ in range(3):
            loss = fn(x)
            loss.backward()
            losses.append(loss.item())
            w = _PARAMS["w"]
            _PARAMS["w"] = (w - 0.5 * w.grad).detach().requires_grad_()
        runs.append(losses)
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-5)
    assert len(compiled.train_entries) == 1


def test_double_backward_falls_back_to_eager():
    # create_graph=True: the compiled backward builds no graph, so that backward reruns the function eagerly.
    f = jitorch.compile(lambda x: (x ** 3).sum())
    x = jitorch.tensor([1.0, 2.0], requires_grad=True)
    (g,) = jitorch.autograd.grad(f(x), x, create_graph=True)
    _close(g, 3 * x.detach() ** 2)
    g.sum().backward()
    _close(x.grad, 6 * x.detach())
    assert f.train_entries[0].run is not None


def test_random_and_inplace_forward_fall_back_to_eager():
    # (rand, randn and randint are random rows and compile; randperm has no row.)
    noisy = jitorch.compile(lambda x: (x * jitorch.randperm(3)).sum())
    x = jitorch.ones(3, requires_grad=True)
    noisy(x).backward()
    assert "random" in noisy.train_entries[0].break_reason and x.grad is not None
    inplace = jitorch.compile(lambda x: x.mul_(2).sum())
    base = jitorch.ones(3, requires_grad=True)
    inplace(base * 1).backward()
    assert "in-place" in inplace.train_entries[0].break_reason
    _close(base.grad, jitorch.full((3,), 2.0))


def test_modifying_an_input_in_place_before_backward_raises():
    # The compiled backward reads saved values: an in-place change in between must raise, as eager autograd does.
    @jitorch.compile
    def f(x, y):
        return (x * y).tanh().sum()

    x = jitorch.randn(5, requires_grad=True)
    y = jitorch.randn(5)
    loss = f(x, y)
    with jitorch.no_grad():
        y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize("case", ["same_tensor_twice", "tensor_and_its_view", "tensor_and_its_transpose",
                                  "parameter_as_an_argument", "twice_then_distinct"])
def test_a_tensor_passed_twice_gets_its_gradient_once_as_torch(case):
    """The joint graph differentiates each distinct tensor once: a tensor bound to two placeholders gave each
    position its whole gradient, and both were accumulated (twice torch's)."""
    import torch

    rng = np.random.default_rng(7)
    w0, x0, y0 = (rng.standard_normal((3, 3)).astype(np.float32) for _ in range(3))
    up = rng.standard_normal((3, 3)).astype(np.float32)

    def run(lib, compiled):
        w, x, y = (lib.tensor(a, requires_grad=True) for a in (w0, x0, y0))

        def fn(a, b):
            return (a @ w) * b
        f = jitorch.compile(fn) if compiled else fn
        args = {"same_tensor_twice": (x, x), "tensor_and_its_view": (x, x[0]),
                "tensor_and_its_transpose": (x, x.t()), "parameter_as_an_argument": (w, x),
                "twice_then_distinct": (x, y)}[case]
        if case == "twice_then_distinct":  # a specialization for (x, x) must not serve (x, y)
            f(x, x).backward(lib.tensor(up))
            x.grad = None
        f(*args).backward(lib.tensor(up))
        return [None if t.grad is None else t.grad.numpy() for t in (w, x, y)]

    for got, eager, want in zip(run(jitorch, True), run(jitorch, False), run(torch, False)):
        assert (got is None) == (eager is None) == (want is None)
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(eager, want, rtol=1e-5, atol=1e-5)


def test_a_module_parameter_also_passed_as_an_argument_gets_one_gradient():
    jitorch.manual_seed(0)
    lin = nn.Linear(3, 3)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, v):
            return self.lin(v) * v.sum()

    m = M()
    up = jitorch.randn(3, 3)
    jitorch.compile(m)(lin.weight).backward(up)
    compiled = lin.weight.grad.clone()
    lin.weight.grad = None
    m(lin.weight).backward(up)
    _close(compiled, lin.weight.grad)


def test_double_backward_of_a_tensor_passed_twice():
    x = jitorch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    f = jitorch.compile(lambda a, b: (a * b * b).sum())
    (g,) = jitorch.autograd.grad(f(x, x), [x], create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), 3 * x.detach().numpy() ** 2, rtol=1e-6)
    (gg,) = jitorch.autograd.grad(g.sum(), [x])
    np.testing.assert_allclose(gg.numpy(), 6 * x.detach().numpy(), rtol=1e-6)
