"""jitorch.autograd.functional against torch.autograd.functional: values, result nesting and graph flags."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

X = np.array([0.3, -0.7, 1.2])
Y = np.array([[0.5, 2.0], [-1.0, 0.25]])


def _inputs(m, which):
    x, y = m.tensor(X), m.tensor(Y)
    return {"one": x, "two": (x, y)}[which]


FUNCS = {  # name: (function of the library's tensors, which inputs)
    "vector": (lambda m: lambda q: m.stack([q.prod(), q.pow(3).sum(), q.sin().sum()]), "one"),
    "matrix_out": (lambda m: lambda q: q[:, None] * q.exp()[None, :], "one"),
    "scalar": (lambda m: lambda q: (q.sin() * q.exp()).sum(), "one"),
    "two_in": (lambda m: lambda a, b: (a[:2] @ b).tanh(), "two"),
    "two_in_two_out": (lambda m: lambda a, b: (a * 2, (b ** 2).sum() * a.sum()), "two"),
    "unused_input": (lambda m: lambda a, b: a.exp(), "two"),
}
SCALAR_FUNCS = {
    "one": (lambda m: lambda q: (q.sin() * q.exp()).sum() + q.prod(), "one"),
    "two": (lambda m: lambda a, b: (a[:2] @ b @ a[:2]).tanh() + (b ** 3).sum(), "two"),
}


def _compare(mine, theirs):
    assert type(mine).__name__ == type(theirs).__name__ or (isinstance(mine, jitorch.Tensor) and
                                                           isinstance(theirs, torch.Tensor))
    if isinstance(theirs, tuple):
        assert isinstance(mine, tuple) and len(mine) == len(theirs)
        for a, b in zip(mine, theirs):
            _compare(a, b)
        return
    assert tuple(mine.shape) == tuple(theirs.shape)
    assert mine.requires_grad == theirs.requires_grad
    np.testing.assert_allclose(mine.detach().numpy(), theirs.detach().numpy(), rtol=1e-10, atol=1e-12)


def _both(call):
    return call(jitorch), call(torch)


@pytest.mark.parametrize("name", sorted(FUNCS))
@pytest.mark.parametrize("create_graph", [False, True])
def test_jacobian(name, create_graph):
    make, which = FUNCS[name]
    _compare(*_both(lambda m: m.autograd.functional.jacobian(make(m), _inputs(m, which), create_graph=create_graph)))


@pytest.mark.parametrize("name", sorted(SCALAR_FUNCS))
@pytest.mark.parametrize("create_graph", [False, True])
def test_hessian_vhp_hvp(name, create_graph):
    make, which = SCALAR_FUNCS[name]
    _compare(*_both(lambda m: m.autograd.functional.hessian(make(m), _inputs(m, which), create_graph=create_graph)))

    def v(m):
        return m.tensor(X[::-1].copy()) if which == "one" else (m.tensor(X[::-1].copy()), m.tensor(Y.T.copy()))

    for fn in ("vhp", "hvp"):
        _compare(*_both(lambda m: getattr(m.autograd.functional, fn)(make(m), _inputs(m, which), v(m),
                                                                     create_graph=create_graph)))


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_vjp_and_jvp(name):
    make, which = FUNCS[name]

    def out_like(m):
        out = make(m)(*(_inputs(m, which) if which == "two" else (_inputs(m, which),)))
        return tuple(m.ones_like(o) * 0.5 for o in out) if isinstance(out, tuple) else m.ones_like(out) * 0.5

    def in_like(m):
        inp = _inputs(m, which)
        return tuple(m.ones_like(i) * -2 for i in inp) if isinstance(inp, tuple) else m.ones_like(inp) * -2

    _compare(*_both(lambda m: m.autograd.functional.vjp(make(m), _inputs(m, which), out_like(m))))
    _compare(*_both(lambda m: m.autograd.functional.jvp(make(m), _inputs(m, which), in_like(m))))


def test_second_derivative_through_a_created_graph():
    def outer(m):
        x = m.tensor(X, requires_grad=True)
        jac = m.autograd.functional.jacobian(lambda q: q.exp() * q, x, create_graph=True)
        jac.trace().backward()
        return x.grad

    _compare(*_both(outer))


@pytest.mark.parametrize("call", [
    lambda m: m.autograd.functional.jacobian(lambda a, b: a * 2, (m.ones(2), m.ones(2)), strict=True),
    lambda m: m.autograd.functional.vjp(lambda q: q * 2, m.ones(2)),
    lambda m: m.autograd.functional.hessian(lambda q: q * 2, m.ones(2)),
    lambda m: m.autograd.functional.jacobian(lambda q: q, [m.ones(2)]),
])
def test_errors_like_torch(call):
    with pytest.raises(Exception) as theirs:
        call(torch)
    with pytest.raises(type(theirs.value)):
        call(jitorch)


@pytest.mark.parametrize("call,match", [
    (lambda m: m.autograd.functional.vjp(lambda q: q * 2, m.ones(3), m.ones(4)), r"v has invalid size: should be"),
    (lambda m: m.autograd.functional.jvp(lambda a, b: a * b, (m.ones(3), m.ones(3)), (m.ones(3), m.ones(2))),
     r"Entry 1 in v has invalid size"),
    (lambda m: m.autograd.functional.hvp(lambda q: q ** 2, m.ones(3), m.ones(3)), "should contain a single element"),
    (lambda m: m.autograd.functional.hessian(lambda q: q.sum(), m.ones(3), strict=True),
     "jacobian of the user-provided function with respect to input 0 is independent of the input"),
    (lambda m: m.autograd.functional.hvp(lambda q: q.sum(), m.ones(3), m.ones(3), strict=True),
     "jacobian of the user-provided function with respect to input 0 is independent of the input"),
    (lambda m: m.autograd.functional.jacobian(lambda q: q * 2, m.ones(3), strict=True, vectorize=True),
     "`strict=True` and `vectorized=True` are not supported together"),
    (lambda m: m.autograd.functional.jvp(lambda a, b: a * 2, (m.ones(3), m.ones(3)), (m.ones(3), m.ones(3)),
                                         strict=True), "independent of input 1. This is not allowed in strict mode"),
])
def test_error_messages_like_torch(call, match):
    for m in (torch, jitorch):
        with pytest.raises(RuntimeError, match=match):
            call(m)
