"""torch.func transforms against torch: results stay differentiable by the autograd outside the transforms (closed-over
parameters, inputs that require grad), vmap's out_dims structures and range, and the errors torch raises."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

RNG = np.random.default_rng(0)
X = RNG.standard_normal((5, 2))
W1, B1, W2 = RNG.standard_normal((4, 2)), RNG.standard_normal(4), RNG.standard_normal((1, 4))


def _close(got, want):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w)
    else:
        assert tuple(got.shape) == tuple(want.shape) and got.requires_grad == want.requires_grad
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-9, atol=1e-10)


def _both(make):
    _close(make(jitorch), make(torch))


def _net(m):
    net = m.nn.Sequential(m.nn.Linear(2, 4), m.nn.Tanh(), m.nn.Linear(4, 1, bias=False)).double()
    net.load_state_dict({"0.weight": m.tensor(W1), "0.bias": m.tensor(B1), "2.weight": m.tensor(W2)})
    return net


@pytest.mark.parametrize("how", ["grad", "jacrev", "jacfwd", "hessian", "jvp", "vjp"])
def test_derivatives_of_a_net_train_its_closed_over_parameters(how):
    # A PINN-style loss: derivatives of the net in its input, backpropagated into the net's parameters.
    def make(m):
        net, x = _net(m), m.tensor(X)
        f = lambda v: net(v).squeeze()  # noqa: E731
        if how == "jvp":
            d = m.func.jvp(net, (x,), (m.ones_like(x),))[1]
        elif how == "vjp":
            d = m.func.vjp(net, x)[1](m.ones(5, 1, dtype=m.float64))[0]
        else:
            d = m.func.vmap(getattr(m.func, how)(f))(x)
        (d ** 2).sum().backward()
        return [d] + [p.grad for p in net.parameters()]
    _both(make)


def test_grad_of_an_input_that_requires_grad_is_differentiable():
    # MAML's inner step: the adapted weights stay a function of the initial ones.
    def make(m):
        x, w = m.tensor(X), m.tensor(np.ones((2, 1)), requires_grad=True)
        g, value = m.func.grad_and_value(lambda q: ((x @ q) ** 2).mean())(w)
        ((x @ (w - 0.1 * g) - 1) ** 2).mean().backward()
        return g, value, w.grad
    _both(make)


def test_results_are_detached_without_outside_tensors_or_under_no_grad():
    def make(m):
        x = m.tensor(X, requires_grad=True)
        out = [m.func.grad(lambda q: (q ** 3).sum())(x.detach()),
               *m.func.jvp(lambda q: q.sin(), (x.detach(),), (m.ones_like(x),))]
        with m.no_grad():
            out.append(m.func.grad(lambda q: (q ** 3).sum())(x))
            value, vjp_fn = m.func.vjp(lambda q: q ** 3, x)
            out += [value, vjp_fn(m.ones_like(x))[0]]
        return out
    _both(make)


def test_jvp_and_vjp_with_cotangents_that_require_grad():
    def make(m):
        x, v = m.tensor(X), m.tensor(X[::-1].copy(), requires_grad=True)
        tangent = m.func.jvp(lambda q: q ** 3, (x,), (v,))[1]
        (cotangent,) = m.func.vjp(lambda q: q.exp(), x)[1](v)
        (tangent * cotangent).sum().backward()
        return tangent, cotangent, v.grad
    _both(make)


def test_jvp_gives_integer_outputs_zero_tangents():
    def make(m):
        x = m.tensor(X)
        return m.func.jvp(lambda q: (q * 2, q.argmax()), (x,), (m.ones_like(x),))
    _both(make)


@pytest.mark.parametrize("out_dims", [(0, (1, 0)), (1, 0), ((0,),), -1])
def test_vmap_out_dims_structures(out_dims):
    a = RNG.standard_normal((4, 3, 5))

    def make(m):
        fn = (lambda x: x.sin()) if out_dims == ((0,),) else (lambda x: (x, (x * 2, x.sum(0))))
        out = m.func.vmap(fn, out_dims=out_dims[0] if out_dims == ((0,),) else out_dims)(m.tensor(a))
        return out if isinstance(out, tuple) else [out]
    got, want = make(jitorch), make(torch)
    flat = lambda t: [t[0], *t[1]] if len(t) == 2 else list(t)  # noqa: E731
    _close(flat(got), flat(want))


@pytest.mark.parametrize("call,kind,match", [
    (lambda m: m.func.vmap(m.sin, out_dims=2)(m.zeros(4, 5)), IndexError, r"range of \[-2, 1\], but got 2"),
    (lambda m: m.func.vmap(m.sin, out_dims="a")(m.zeros(4, 5)), ValueError, "`out_dims` must be an int, None"),
    (lambda m: m.func.vmap(m.sin, out_dims=(0, 1))(m.zeros(4, 5)), ValueError, "out_dims is not compatible"),
    (lambda m: m.func.vmap(m.add, in_dims=(0, "a"))(m.zeros(4), m.zeros(4)), ValueError,
     "in_dim must be either an integer dimension or None"),
    (lambda m: m.func.vmap(lambda: m.ones(2))(), ValueError, "got no inputs"),
    (lambda m: m.func.vmap(m.add, in_dims=(None, None))(m.zeros(4), m.zeros(4)), ValueError,
     "Expected at least one Tensor to vmap over"),
    (lambda m: m.func.vmap(__import__("functools").partial(m.add, alpha=2), in_dims=3)(m.zeros(4), m.zeros(4)),
     ValueError, r"vmap\(functools.partial\(add, ...\), in_dims=3"),
    (lambda m: m.func.grad(lambda q: q.sum(), has_aux=True)(m.zeros(3)), RuntimeError,
     r"should be a tuple: \(output, aux\) if has_aux is True"),
    (lambda m: m.func.vjp(lambda q: q.sum(), m.zeros(3), has_aux=True), RuntimeError,
     r"should be a tuple: \(output, aux\) if has_aux is True"),
    (lambda m: m.func.jvp(lambda q: q.sin(), (m.zeros(3),), (m.zeros(3),), has_aux=True), RuntimeError,
     r"should be a tuple: \(output, aux\) if has_aux is True"),
    (lambda m: m.func.grad(lambda q: q * 2)(m.zeros(3)), RuntimeError, "got tensor with 1 dims. Maybe you wanted"),
    (lambda m: m.func.grad(lambda q: 3.0)(m.zeros(3)), RuntimeError, "to return a Tensor, got <class 'float'>"),
    (lambda m: m.func.vjp(lambda q: (q, q), m.zeros(3))[1](m.zeros(3)), RuntimeError,
     r"cotangents: \*, primal output: \(\*, \*\)"),
    (lambda m: m.func.grad(lambda a, b: (a * b).sum(), argnums=[0, 1])(m.ones(2), m.ones(2)), RuntimeError,
     r"argnums must be int or Tuple\[int, ...\], got: <class 'list'>"),
    (lambda m: m.func.grad(lambda a, b: (a * b).sum(), argnums=(0, -2))(m.ones(2), m.ones(2)), RuntimeError,
     "argnums elements must be unique"),
    (lambda m: m.func.grad(lambda a, b: (a * b).sum(), argnums=())(m.ones(2), m.ones(2)), RuntimeError,
     "argnums must be non-empty"),
    (lambda m: m.func.grad(lambda a: a.sum(), argnums=1)(m.ones(2)), RuntimeError,
     "Got argnum=1, but only 1 positional inputs"),
    (lambda m: m.func.vjp(lambda a, s: a * s, m.ones(2), 2.0), ValueError,
     "Thing passed to transform API must be Tensor, got <class 'float'>"),
    (lambda m: m.func.jacrev(m.sin, chunk_size=0)(m.ones(2)), ValueError, "`chunk_size` should be greater than 0"),
    (lambda m: m.func.jacfwd(m.sin, randomness="foo")(m.ones(2)), RuntimeError, "Only allowed values for randomness"),
    (lambda m: m.func.jacrev(lambda a: 3.0)(m.ones(2)), RuntimeError,
     "expected f\\(\\*primals\\) to return only tensors, got unsupported type <class 'float'>"),
])
def test_errors_match_torch(call, kind, match):
    for m in (torch, jitorch):
        with pytest.raises(kind, match=match):
            call(m)


def test_grad_of_an_output_no_input_reaches_is_zero():
    _both(lambda m: [m.func.grad(lambda q: (q > 0).sum())(m.tensor(X)),
                     m.func.grad(lambda q: m.tensor(1.0, dtype=m.float64))(m.tensor(X))])


def test_functionalize_and_replace_all_batch_norm_modules():
    def make(m):
        x = m.tensor(X)
        out = m.func.functionalize(lambda q: q.mul_(2).sin())(x)
        bn = m.func.replace_all_batch_norm_modules_(m.nn.Sequential(m.nn.BatchNorm1d(2)).double())[0]
        assert bn.running_mean is None and bn.running_var is None and not bn.track_running_stats
        return out, x, m.func.vmap(bn)(m.tensor(X).reshape(5, 1, 2).expand(5, 3, 2) * m.tensor([1.0, 2.0, 4.0],
                                                                                         dtype=m.float64)[:, None])
    _both(make)


def test_forward_ad_dual_tensors():
    p, tg, y = RNG.standard_normal((3, 3)), RNG.standard_normal((3, 3)), RNG.standard_normal((3, 3))

    def make(m):
        fwad = m.autograd.forward_ad
        primal, tangent = m.tensor(p), m.tensor(tg)
        with pytest.raises(RuntimeError, match="no level exists"):
            fwad.make_dual(primal, tangent)
        with fwad.dual_level():
            with pytest.raises(RuntimeError, match="different size than that of the original"):
                fwad.make_dual(primal, tangent[:2])
            dual = fwad.make_dual(primal, tangent)
            assert fwad.unpack_dual(dual).tangent is tangent
            out = (dual @ m.tensor(y)).tanh() + m.tensor(y) ** 2
            unpacked = fwad.unpack_dual(out)
            assert fwad.unpack_dual(m.tensor(y)).tangent is None
        assert fwad.unpack_dual(out).tangent is None
        return unpacked.primal, unpacked.tangent, fwad.unpack_dual(out).primal
    _both(make)


def test_forward_ad_through_a_module_keeps_reverse_mode():
    def make(m):
        fwad, net = m.autograd.forward_ad, _net(m)
        params = dict(net.named_parameters())
        with fwad.dual_level():
            duals = {k: fwad.make_dual(v, m.ones_like(v) * 0.5) for k, v in params.items()}
            out = m.func.functional_call(net, duals, (m.tensor(X),))
            tangent = fwad.unpack_dual(out).tangent
        out.sum().backward()
        return [tangent.detach(), out] + [v.grad for v in params.values()]
    _both(make)
