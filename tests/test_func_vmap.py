"""jitorch.func.vmap, jvp, linearize and stack_module_state against torch.func: values, gradients through them,
in_dims/out_dims rules, randomness modes and the errors PyTorch raises."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

RNG = np.random.default_rng(0)


def _both(make):
    """``make(lib)`` run with torch and jitorch; array results compared."""
    want, got = make(torch), make(jitorch)
    _close(got, want)
    return got


def _close(got, want):
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w)
    elif isinstance(want, dict):
        assert got.keys() == want.keys()
        for k in want:
            _close(got[k], want[k])
    else:
        assert tuple(got.shape) == tuple(want.shape), (got.shape, want.shape)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-7)


A = RNG.standard_normal((4, 3, 5))
B = RNG.standard_normal((5, 2))
W = RNG.standard_normal((3,))


@pytest.mark.parametrize("case", ["matmul", "in_dims", "negative", "dict", "out_dims", "tuple_out", "nested",
                                  "kwargs", "unbatched_out", "empty"])
def test_vmap_matches_torch(case):
    def make(m):
        vmap = m.func.vmap
        a, b, w = m.tensor(A), m.tensor(B), m.tensor(W)
        if case == "matmul":
            return vmap(lambda x: x @ b)(a)
        if case == "in_dims":
            return vmap(lambda x, v: (x.t() * v).sum(0), in_dims=(1, None))(a, a[:, 0, 0])
        if case == "negative":
            return vmap(lambda x: x.softmax(0), in_dims=-1)(a)
        if case == "dict":
            return vmap(lambda d, v: d["x"].sum(0) * d["y"] + v, in_dims=({"x": 2, "y": None}, 0))(
                {"x": a, "y": w[0]}, m.ones(5))
        if case == "out_dims":
            return vmap(lambda x: x.cumsum(0), out_dims=-1)(a)
        if case == "tuple_out":
            return vmap(lambda x: (x.max(1).values, {"n": x.norm()}), out_dims=(1, 0))(a)
        if case == "nested":
            return vmap(vmap(lambda row, v: row.dot(v), in_dims=(0, None)), in_dims=(0, None))(a[..., :3], w)
        if case == "kwargs":
            return vmap(lambda x, scale: x * scale)(a, scale=w[:, None])
        if case == "unbatched_out":
            return vmap(lambda x: (x.sum(), m.ones(2)), out_dims=(0, None))(a)
        return vmap(lambda x: x.exp() @ b)(a[:0])
    _both(make)


def test_per_sample_gradients_with_functional_call_match_torch():
    x, y = RNG.standard_normal((6, 3)), RNG.standard_normal((6, 2))

    def make(m):
        net = m.nn.Sequential(m.nn.Linear(3, 4), m.nn.Tanh(), m.nn.Linear(4, 2)).double()
        state = np.random.default_rng(1)
        net.load_state_dict({k: m.tensor(state.standard_normal(tuple(v.shape))) for k, v in net.state_dict().items()})
        params = {k: v.detach() for k, v in net.named_parameters()}

        def loss(p, xi, yi):
            return ((m.func.functional_call(net, p, (xi[None],)) - yi) ** 2).sum()
        return m.func.vmap(m.func.grad(loss), in_dims=(None, 0, 0))(params, m.tensor(x), m.tensor(y))
    _both(make)


def test_gradients_flow_through_vmap():
    def make(m):
        a = m.tensor(A, requires_grad=True)
        out = m.func.vmap(lambda x: (x.sin() @ m.tensor(B)).tanh())(a)
        out.backward(m.tensor(np.linspace(-1, 1, out.numel()).reshape(tuple(out.shape))))
        return out, a.grad
    _both(make)


def test_ensembling_with_stack_module_state_matches_torch():
    x = RNG.standard_normal((5, 3))

    def make(m):
        m.manual_seed(0)
        models = [m.nn.Linear(3, 2).double() for _ in range(4)]
        for i, model in enumerate(models):
            model.load_state_dict({k: m.tensor(np.full(tuple(v.shape), 0.1 * (i + 1)) + np.arange(v.numel()).reshape(
                tuple(v.shape)) * 0.01) for k, v in model.state_dict().items()})
        params, buffers = m.func.stack_module_state(models)
        assert all(p.requires_grad and p.is_leaf for p in params.values())

        def run(p, b, xi):
            return m.func.functional_call(models[0], (p, b), (xi,))
        return m.func.vmap(run, in_dims=(0, 0, None))(params, buffers, m.tensor(x))
    _both(make)


def test_randomness_modes():
    x = jitorch.zeros(4, 3)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        jitorch.func.vmap(lambda v: v + jitorch.randn(3))(x)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        jitorch.func.vmap(lambda v: jitorch.nn.functional.dropout(v + 1, 0.5))(x)
    same = jitorch.func.vmap(lambda v: v + jitorch.randn(3), randomness="same")(x)
    assert all(jitorch.equal(same[0], row) for row in same)
    different = jitorch.func.vmap(lambda v: v + jitorch.randn(3), randomness="different")(x)
    assert not jitorch.equal(different[0], different[1])
    # "same" draws once: the stream after it is where one sample's draw left it.
    jitorch.manual_seed(3)
    jitorch.func.vmap(lambda v: v + jitorch.randn(3), randomness="same")(x)
    after = jitorch.rand(2)
    jitorch.manual_seed(3)
    jitorch.randn(3)
    assert jitorch.equal(after, jitorch.rand(2))
    with pytest.raises(RuntimeError, match="Only allowed values for randomness"):
        jitorch.func.vmap(lambda v: v, randomness="foo")


@pytest.mark.parametrize("call,match", [
    (lambda m: m.func.vmap(lambda x: 3)(m.zeros(2, 3)), "must only return Tensors"),
    (lambda m: m.func.vmap(lambda x: x * 2, out_dims=None)(m.randn(2, 3)), "out_dim is None"),
    (lambda m: m.func.vmap(lambda x, y: x + y)(m.zeros(2, 3), m.zeros(3, 3)), "same size in the mapped dimension"),
    (lambda m: m.func.vmap(lambda x, y: x * y, in_dims=(0, 0))(m.zeros(2), 3.0), "cannot vmap over non-Tensor"),
    (lambda m: m.func.vmap(lambda x: x, in_dims=2)(m.zeros(2, 3)), "expected in_dim to satisfy -2 <= in_dim < 2"),
    (lambda m: m.func.vmap(lambda x, y: x, in_dims=(0,))(m.zeros(2), m.zeros(2)), "not compatible with the structure"),
    (lambda m: m.func.vmap(lambda x: x, in_dims=None)(m.zeros(2)), "in_dims"),
])
def test_vmap_errors_match_torch(call, match):
    for m in (torch, jitorch):
        with pytest.raises(ValueError, match=match):
            call(m)


@pytest.mark.parametrize("case", ["square", "two_inputs", "unused", "tuple_out", "aux"])
def test_jvp_matches_torch(case):
    x, y, t, u = (RNG.standard_normal((3, 4)) for _ in range(4))

    def make(m):
        jvp = m.func.jvp
        X, Y, T, U = (m.tensor(v) for v in (x, y, t, u))
        if case == "square":
            return jvp(lambda a: (a ** 2).sin(), (X,), (T,))
        if case == "two_inputs":
            return jvp(lambda a, b: (a @ b.t()).tanh(), (X, Y), (T, U))
        if case == "unused":
            return jvp(lambda a, b: a.exp(), (X, Y), (T, U))
        if case == "tuple_out":
            return jvp(lambda a: (a.sum(0), a.cumprod(1)), (X,), (T,))
        value, tangent, aux = jvp(lambda a: (a.exp(), a.mean()), (X,), (T,), has_aux=True)
        return value, tangent, aux
    _both(make)


def test_jvp_of_grad_is_a_hessian_vector_product():
    x, v = RNG.standard_normal(5), RNG.standard_normal(5)

    def make(m):
        f = lambda a: (a.sin() * a).sum()  # noqa: E731
        return m.func.jvp(m.func.grad(f), (m.tensor(x),), (m.tensor(v),))
    _both(make)


def test_linearize_matches_jvp():
    x, t = RNG.standard_normal(4), RNG.standard_normal(4)

    def make(m):
        out, jvp_fn = m.func.linearize(lambda a: a.exp() * a, m.tensor(x))
        return out, jvp_fn(m.tensor(t))
    _both(make)


def test_jvp_refuses_mismatched_tangents_as_torch():
    for m in (torch, jitorch):
        with pytest.raises(RuntimeError, match="Expected primals to be a tuple"):
            m.func.jvp(lambda a: a, m.zeros(2), (m.zeros(2),))
        with pytest.raises(RuntimeError, match="different size than that of the original"):
            m.func.jvp(lambda a: a, (m.zeros(2),), (m.zeros(3),))


@pytest.mark.parametrize("size", [4, 12])
def test_a_compiled_function_maps_and_still_refuses_draws(size):
    # A compiled call saves and puts back the generator's state around its run: that is no draw ('error' mode).
    x = RNG.standard_normal((size, 5)).astype(np.float32)
    got = jitorch.func.vmap(jitorch.compile(lambda a: (a.sin() * 2).sum()))(jitorch.tensor(x))
    want = torch.func.vmap(lambda a: (a.sin() * 2).sum())(torch.tensor(x))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)  # a fused kernel's float32 sum
    with pytest.raises(RuntimeError, match="randomness error mode"):
        jitorch.func.vmap(jitorch.compile(lambda a: a + jitorch.randn(5)))(jitorch.tensor(x))
