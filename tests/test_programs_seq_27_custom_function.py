"""Custom autograd Functions as research code writes them, against torch: integer outputs (argmax, indices) never
require grad; ``@once_differentiable`` backwards used under ``create_graph`` pass gradients through but raise
torch's error when differentiated again."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch


def _top1(lib):
    class Top1(lib.autograd.Function):
        """The max value (differentiable) and its index (not)."""

        @staticmethod
        def forward(ctx, x):
            values, index = x.max(dim=-1)
            ctx.save_for_backward(index)
            ctx.shape = x.shape
            return values, index, (x > 0).any(-1)

        @staticmethod
        def backward(ctx, g_values, g_index, g_any):
            (index,) = ctx.saved_tensors
            grad = g_values.new_zeros(ctx.shape)
            return grad.scatter(-1, index.unsqueeze(-1), g_values.unsqueeze(-1))
    return Top1


@pytest.mark.parametrize("lib", [jitorch, torch], ids=["jitorch", "torch"])
def test_integer_and_bool_outputs_do_not_require_grad(lib):
    x = lib.from_numpy(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)).requires_grad_()
    values, index, positive = _top1(lib).apply(x)
    assert values.requires_grad and values.grad_fn is not None
    assert not index.requires_grad and index.grad_fn is None and index.dtype == lib.int64
    assert not positive.requires_grad and positive.dtype == lib.bool
    (values * lib.arange(3.0)).sum().backward()
    expected = np.zeros((3, 4), dtype=np.float32)
    expected[np.arange(3), index.numpy()] = [0.0, 1.0, 2.0]
    np.testing.assert_array_equal(x.grad.numpy(), expected)


def test_integer_output_alone_matches_torch():
    for lib in (jitorch, torch):
        class ArgMax(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.argmax()

            @staticmethod
            def backward(ctx, g):
                return None
        out = ArgMax.apply(lib.ones(2, requires_grad=True))
        assert not out.requires_grad and out.grad_fn is None
        with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
            out.float().sum().backward()


def _scaled(lib):
    class Scaled(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x * w

        @staticmethod
        @lib.autograd.function.once_differentiable
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            return g * w, (g * x).sum(0)
    return Scaled


def _inputs(lib):
    rng = np.random.default_rng(1)
    x = lib.from_numpy(rng.standard_normal((4, 3)).astype(np.float32)).requires_grad_()
    w = lib.from_numpy(rng.standard_normal(3).astype(np.float32)).requires_grad_()
    return x, w


def test_once_differentiable_raises_when_differentiated_twice_like_torch():
    for lib in (jitorch, torch):
        x, w = _inputs(lib)
        gx, gw = lib.autograd.grad(_scaled(lib).apply(x, w).pow(2).sum(), (x, w), create_graph=True)
        assert gx.requires_grad and gw.requires_grad
        with pytest.raises(RuntimeError, match="trying to differentiate twice a function that was marked with "
                                               "@once_differentiable"):
            gx.sum().backward()


def test_once_differentiable_first_order_values_match_torch():
    got, want = [], []
    for lib, out in ((jitorch, got), (torch, want)):
        x, w = _inputs(lib)
        for create_graph in (False, True):
            grads = lib.autograd.grad((_scaled(lib).apply(x, w) ** 3).sum(), (x, w), create_graph=create_graph)
            out.extend(g.detach().numpy() for g in grads)
        y = _scaled(lib).apply(x, w)
        y.sum().backward()  # the incoming gradient needs no graph: no error node, plain leaves' grads
        out.extend([x.grad.numpy(), w.grad.numpy()])
        assert x.grad.grad_fn is None
    for g, t in zip(got, want):
        np.testing.assert_allclose(g, t, rtol=1e-6)


@pytest.mark.parametrize("lib", [jitorch, torch], ids=["jitorch", "torch"])
def test_increment_version_makes_saved_tensors_stale(lib):
    x = lib.ones(3, requires_grad=True)
    y = x.clone()
    z = y.exp()  # saves its result
    before = z._version
    lib.autograd.graph.increment_version(z)
    assert z._version == before + 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    a, b = lib.zeros(2), lib.zeros(2)
    view = a[:1]
    lib.autograd.graph.increment_version([view, b])
    assert (a._version, b._version) == (1, 1)  # a view shares its base's counter
