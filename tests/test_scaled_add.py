"""``add``/``sub`` with ``alpha`` on float32/float64 as ATen computes them (one fused multiply-add, bit for bit),
eager, in place, compiled and captured, their gradients, and SGD's update built on them, against torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import assert_same, check_error, check_op, optimizer_steps

DTYPES = [np.float32, np.float64]


def _pair(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alpha", [0.1, -0.37, 3, 2.5e-3])
@pytest.mark.parametrize("name", ["add", "sub"])
def test_bits_equal_torch(name, alpha, dtype):
    a, b = _pair((301, 333), dtype)
    got = getattr(jitorch, name)(jitorch.from_numpy(a), jitorch.from_numpy(b), alpha=alpha)
    want = getattr(torch, name)(torch.from_numpy(a), torch.from_numpy(b), alpha=alpha)
    assert_same(got, want)  # exact: ~9% of float32 elements differ where the product is rounded first
    naive = a + b * dtype(alpha if name == "add" else -alpha)
    assert np.sum(naive != want.numpy()) > 100


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("name", ["add", "sub"])
def test_layouts_and_gradients(name, layout):
    a, b = _pair((40, 30), np.float32, 1)
    check_op(lambda x, y: getattr(x, name)(y, alpha=0.3), lambda x, y: getattr(x, name)(y, alpha=0.3), [a, b],
             atol=0, rtol=0, layout=layout)


def test_broadcast_mixed_dtypes_and_numbers():
    a, b = _pair((16, 50), np.float32, 2)
    check_op(lambda x, y: jitorch.add(x, y, alpha=-1.5), lambda x, y: torch.add(x, y, alpha=-1.5),
             [a, b[0]], atol=0, rtol=0, grad_atol=1e-5, grad_rtol=1e-6)  # (y's gradient: a sum over 16 rows,
    # in another order than torch's, as for any broadcast gradient)
    check_op(lambda x, y: jitorch.sub(x, y, alpha=0.7), lambda x, y: torch.sub(x, y, alpha=0.7),
             [a.astype(np.float64), b.astype(np.float16)], atol=0, rtol=0, grad=False)
    check_op(lambda x, y: jitorch.add(x, y, alpha=2), lambda x, y: torch.add(x, y, alpha=2),
             [a[:, :8], np.arange(8, dtype=np.int64)], atol=0, rtol=0, grad=False)
    # other rules keep the composite: integers, complex
    i = np.arange(12, dtype=np.int64).reshape(3, 4)
    check_op(lambda x, y: jitorch.add(x, y, alpha=3), lambda x, y: torch.add(x, y, alpha=3), [i, i], grad=False)
    z = (a + 1j * b).astype(np.complex64)
    check_op(lambda x, y: jitorch.sub(x, y, alpha=0.5j), lambda x, y: torch.sub(x, y, alpha=0.5j), [z, z],
             atol=1e-6, rtol=1e-6, grad=False)


def test_grad_fn_names_and_out():
    x = jitorch.ones(3, requires_grad=True)
    assert type(jitorch.add(x, x, alpha=2).grad_fn).__name__ == "AddBackward0"
    assert type(jitorch.sub(x, x, alpha=2).grad_fn).__name__ == "SubBackward0"
    a, b = _pair((5, 7), np.float32, 3)
    out = jitorch.empty(5, 7)
    jitorch.add(jitorch.from_numpy(a), jitorch.from_numpy(b), alpha=0.2, out=out)
    assert_same(out, torch.add(torch.from_numpy(a), torch.from_numpy(b), alpha=0.2))


def test_errors_as_torch():
    f, i = np.ones(3, np.float32), np.ones(3, np.int64)
    check_error(lambda x, y: x.add(y, alpha=1e40), lambda x, y: x.add(y, alpha=1e40), [f, f], match="overflow")
    check_error(lambda x, y: x.add(y, alpha=0.5), lambda x, y: x.add(y, alpha=0.5), [i, i],
                match="alpha must not be a floating point")
    check_error(lambda x, y: x.sub(y, alpha=True), lambda x, y: x.sub(y, alpha=True), [f, f], match="Boolean alpha")
    check_error(lambda x, y: x.add(y, alpha=2.0), lambda x, y: x.add(y, alpha=2.0), [f, np.ones(4, np.float32)])
    check_error(lambda x, y: x.add_(y, alpha=2), lambda x, y: x.add_(y, alpha=2), [i, f], match="can't be cast")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["add_", "sub_"])
def test_in_place(name, dtype):
    a, b = _pair((64, 65), dtype, 4)
    x, t = jitorch.from_numpy(a.copy()), torch.from_numpy(a.copy())
    version = x._version
    assert getattr(x, name)(jitorch.from_numpy(b), alpha=-1e-3) is x
    getattr(t, name)(torch.from_numpy(b), alpha=-1e-3)
    assert_same(x, t)
    assert x._version == version + 1
    getattr(x, name)(x, alpha=0.5)  # other is self
    getattr(t, name)(t, alpha=0.5)
    assert_same(x, t)
    # in a graph: the in-place node's gradient
    leaf, tleaf = jitorch.tensor(b, requires_grad=True), torch.tensor(b, requires_grad=True)
    y, ty = jitorch.from_numpy(a.copy()) * 1, torch.from_numpy(a.copy()) * 1
    getattr(y, name)(leaf, alpha=0.25).sum().backward()
    getattr(ty, name)(tleaf, alpha=0.25).sum().backward()
    assert_same(leaf.grad, tleaf.grad)


def test_compiled_and_captured_graphs_round_once():
    a, b = _pair((64, 100), np.float32, 5)
    want = (torch.add(torch.from_numpy(a), torch.from_numpy(b), alpha=0.1) * 2
            - torch.sub(torch.from_numpy(b), torch.from_numpy(a), alpha=3))
    for mode in (None, "reduce-overhead"):
        fn = jitorch.compile(lambda x, y: jitorch.add(x, y, alpha=0.1) * 2 - jitorch.sub(y, x, alpha=3), mode=mode)
        for _ in range(3):
            got = fn(jitorch.from_numpy(a), jitorch.from_numpy(b))
        assert_same(got, want)


def _sgd(lib, steps=5, capture=False, **kw):
    rng = np.random.default_rng(6)
    w = lib.nn.Parameter(lib.from_numpy(rng.standard_normal((33, 31)).astype(np.float32)))
    opt = lib.optim.SGD([w], lr=0.05, momentum=0.9, weight_decay=1e-2, **kw)

    optimizer_steps(opt, w, [lib.from_numpy(rng.standard_normal((33, 31)).astype(np.float32)) for _ in range(steps)],
                    capture)
    return w.detach()


@pytest.mark.parametrize("kw", [{}, {"nesterov": True}, {"dampening": 0.1}, {"maximize": True}])
@pytest.mark.parametrize("path", ["default", "fused", "unfused", "foreach", "captured"])
def test_sgd_with_weight_decay_and_momentum_equals_torch_bits(path, kw):
    options = {"fused": {"fused": True}, "unfused": {"fused": False}, "foreach": {"foreach": True}}.get(path, {})
    got = _sgd(jitorch, capture=path == "captured", **options, **kw)
    # torch's CPU default is the single-tensor loop of add(alpha=) steps; fused=True its fused kernel (whose scalar
    # tail rounds the momentum its own way)
    assert_same(got, _sgd(torch, **kw, **({"fused": True} if path == "fused" else {})))


def test_differentiable_update_primitive_rounds_once():
    from jitorch.optim._kernels import TENSOR_OPS

    a, b = _pair((40, 50), np.float32, 7)
    x = jitorch.tensor(a, requires_grad=True)
    got = TENSOR_OPS.add(x * 1, jitorch.from_numpy(b), -0.05)  # (differentiable=True's ``add(p, g, -lr)``)
    assert_same(got, torch.add(torch.from_numpy(a), torch.from_numpy(b), alpha=-0.05))
    assert got.requires_grad


def test_multiply_adds_round_once_where_a_double_detour_rounds_twice():
    # (2**23 + 2896) * (2**23 - 2895) = 2**46 + 4688: each product below is 2**-24 + 4688 * 2**-70, whose sum with 1
    # rounded to double is the float32 midpoint 1 + 2**-24 (ties to 1.0); rounded once it is 1 + 2**-23, as torch's.
    a, b = float(np.float32((2 ** 23 + 2896) * 2.0 ** -23)), float(np.float32((2 ** 23 - 2895) * 2.0 ** -47))
    w, end = float(np.float32((2 ** 23 + 2896) * 2.0 ** -70)), float(2 ** 23 - 2894)
    for lib in (jitorch, torch):
        one = lib.ones(32)
        results = [lib.addcmul(one, lib.full((32,), a), lib.full((32,), b), value=1),
                   lib.lerp(one, lib.full((32,), end), lib.full((32,), w)), lib.lerp(one, lib.full((32,), end), w),
                   lib.add(one, lib.full((32,), a), alpha=b), lib.sub(one, lib.full((32,), -a), alpha=b)]
        for r in results:
            assert np.all(r.numpy() == np.float32(1 + 2 ** -23)), lib.__name__


@pytest.mark.parametrize("dtype", DTYPES)
def test_lerp_addcmul_addcdiv_equal_torch_bits(dtype):
    # ATen's fmadd (float32 and float64), both lerp branches, a tensor and a Scalar weight; strided and broadcast too
    rng = np.random.default_rng(8)
    s, e, t2 = (rng.standard_normal((200, 301)).astype(dtype) for _ in range(3))
    w = rng.uniform(-0.5, 1.5, (200, 301)).astype(dtype)
    for fn in (lambda L, a, b, c: L.lerp(a, b, c), lambda L, a, b, c: L.lerp(a, b, 0.3),
               lambda L, a, b, c: L.lerp(a, b, 0.7), lambda L, a, b, c: L.addcmul(a, b, c, value=0.37),
               lambda L, a, b, c: L.addcdiv(a, b, c.abs() + 0.5, value=-1.3),
               lambda L, a, b, c: L.lerp(a.t(), b.t(), c[0, :200]), lambda L, a, b, c: L.addcmul(a, b[0], c, value=2)):
        got = fn(jitorch, *(jitorch.from_numpy(x) for x in (s, e, w)))
        assert_same(got, fn(torch, *(torch.from_numpy(x) for x in (s, e, w))))
