"""jitorch.func and nn.utils.stateless against torch.func: functional_call, grad, vjp, jacrev/jacfwd, hessian."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], dtype=np.float64)


def _net(m):
    rng = np.random.default_rng(0)
    net = m.nn.Sequential(m.nn.Linear(3, 4), m.nn.Tanh(), m.nn.Linear(4, 2)).double()
    net.load_state_dict({k: m.tensor(rng.standard_normal(tuple(v.shape))) for k, v in net.state_dict().items()})
    return net


def _new_params(m):
    rng = np.random.default_rng(1)
    return {k: m.tensor(rng.standard_normal(tuple(v.shape)), requires_grad=True)
            for k, v in _net(m).named_parameters()}


def _close(a, b):
    if isinstance(b, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y)
    elif isinstance(b, dict):
        assert list(a) == list(b)
        for k in b:
            _close(a[k], b[k])
    else:
        assert tuple(a.shape) == tuple(b.shape) and a.requires_grad == b.requires_grad
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)


def _both(call):
    _close(call(jitorch), call(torch))


@pytest.mark.parametrize("where", ["func", "stateless"])
def test_functional_call_uses_the_given_tensors_and_restores_the_module(where):
    def call(m):
        net, params = _net(m), _new_params(m)
        if where == "func":
            out = m.func.functional_call(net, params, (m.tensor(X),))
        else:
            with pytest.warns(FutureWarning, match="stateless.functional_call` is deprecated"):
                out = m.nn.utils.stateless.functional_call(net, params, (m.tensor(X),))
        out.sum().backward()
        assert all(p.grad is None for p in net.parameters())  # the module's own were not used
        return out, [params[k].grad for k in params], net(m.tensor(X))

    _both(call)


def test_functional_call_partial_dicts_and_buffers():
    def call(m):
        net = m.nn.Sequential(m.nn.Linear(3, 3), m.nn.BatchNorm1d(3)).double()
        net[0].weight.data = m.tensor(np.arange(9.0).reshape(3, 3) / 10)
        net.eval()
        override = ({"0.bias": m.ones(3, dtype=m.float64)}, {"1.running_mean": m.full((3,), 0.5, dtype=m.float64)})
        out = m.func.functional_call(net, override, m.tensor(X))
        return out, net[1].running_mean, net(m.tensor(X)).detach()[:, :0]

    _both(call)


def test_functional_call_ties_shared_weights():
    """A value for one name of a shared weight replaces it under every name (tie_weights, the default)."""
    def call(m):
        net = m.nn.ModuleDict({"a": m.nn.Linear(3, 3, bias=False), "b": m.nn.Linear(3, 3, bias=False)}).double()
        net["b"].weight = net["a"].weight
        w = m.tensor(np.arange(9.0).reshape(3, 3))

        class Both(m.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = net

            def forward(self, x):
                return self.net["a"](x) + self.net["b"](x)

        model = Both()
        return (m.func.functional_call(model, {"net.a.weight": w}, (m.tensor(X),)),
                m.func.functional_call(model, {"net.a.weight": w}, (m.tensor(X),), tie_weights=False).shape)

    mine, theirs = call(jitorch), call(torch)
    _close(mine[0], theirs[0])
    assert tuple(mine[1]) == tuple(theirs[1])


@pytest.mark.parametrize("call", [
    lambda m: m.func.functional_call(m.nn.Linear(2, 2), {"weight": m.ones(2, 2)}, (m.ones(2),), strict=True),
    lambda m: m.func.functional_call(m.nn.Linear(2, 2), ({"weight": m.ones(2, 2)}, {"weight": m.ones(2, 2)}),
                                     (m.ones(2),)),
])
def test_functional_call_errors_like_torch(call):
    with pytest.raises(Exception) as theirs:
        call(torch)
    with pytest.raises(type(theirs.value)) as mine:
        call(jitorch)
    assert str(mine.value) == str(theirs.value)


def test_grad_of_a_loss_over_a_parameter_dict():
    def call(m):
        net = _net(m)

        def loss(params, x):
            return m.func.functional_call(net, params, (x,)).pow(2).mean()

        params = {k: v.detach() for k, v in _new_params(m).items()}
        g = m.func.grad(loss)(params, m.tensor(X))
        gv = m.func.grad_and_value(loss)(params, m.tensor(X))
        return [g[k] for k in g], gv[1]

    _both(call)


def test_grad_argnums_aux_and_nesting():
    def f(m):
        return lambda a, b: ((a.sin() * b).sum(), a.cos())

    def call(m):
        a, b = m.tensor(X[0]), m.tensor(X[1])
        ga, aux = m.func.grad(f(m), argnums=0, has_aux=True)(a, b)
        gab = m.func.grad(lambda a, b: f(m)(a, b)[0], argnums=(0, 1))(a, b)
        second = m.func.grad(lambda q: m.func.grad(lambda r: (r ** 3).sum())(q).sum())(a)
        return ga, aux, gab, second

    _both(call)


def test_vjp_jacrev_jacfwd_hessian():
    def call(m):
        a, b = m.tensor(X[0]), m.tensor(X[1])

        def f(p, q):
            return p.exp() * q.sum() + p ** 2

        out, vjp_fn = m.func.vjp(f, a, b)
        cot = m.tensor([1.0, -1.0, 0.5])
        return (out, vjp_fn(cot), m.func.jacrev(f)(a, b), m.func.jacrev(f, argnums=(0, 1))(a, b),
                m.func.jacfwd(f, argnums=1)(a, b), m.func.hessian(lambda p: (p.sin() * p).sum())(a))

    _both(call)
