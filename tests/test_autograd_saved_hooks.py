"""``autograd.graph.saved_tensors_hooks`` / ``save_on_cpu`` / ``disable_saved_tensors_hooks`` against torch 2.13:
the gradients, how many times each hook runs for small graphs (built-in rows and custom Functions), nesting, double
backward, checkpoint-style hooks that keep nothing and recompute on unpack, and the errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

X = [1.0, 2.0, 3.0]
W = [0.5, -1.0, 2.0]

BODIES = {
    "mul_exp_sum": lambda L, x, w: (x * w).exp().sum(),
    "sin": lambda L, x, w: x.sin().sum(),
    "tanh": lambda L, x, w: (x * w).tanh().sum(),
    "sigmoid": lambda L, x, w: (x.sigmoid() * w).sum(),
    "div": lambda L, x, w: (x / w).sum(),
    "matmul": lambda L, x, w: (x[None] @ w[:, None]).sum(),
    "mean_of_square": lambda L, x, w: (x * x).mean(),
    "softmax": lambda L, x, w: (L.softmax(x, 0) * w).sum(),
    "log": lambda L, x, w: (x.log() * w).sum(),
}


def _counted(lib, body, create_graph=False):
    log = []

    def pack(t):
        log.append("pack")
        return t

    def unpack(t):
        log.append("unpack")
        return t

    x = lib.tensor(X, requires_grad=True)
    w = lib.tensor(W, requires_grad=True)
    with lib.autograd.graph.saved_tensors_hooks(pack, unpack):
        out = body(lib, x, w)
    packs = len(log)
    grads = lib.autograd.grad(out, (x, w), create_graph=create_graph, allow_unused=True)
    if create_graph:
        grads = lib.autograd.grad(sum(g.sum() for g in grads if g is not None), (x, w), allow_unused=True)
    return packs, len(log) - packs, [None if g is None else g.detach().numpy() for g in grads]


def _assert_same_run(mine, theirs):
    assert mine[:2] == theirs[:2], f"(packs, unpacks): jitorch {mine[:2]} != torch {theirs[:2]}"
    for g, h in zip(mine[2], theirs[2]):
        assert (g is None) == (h is None)
        if h is not None:
            np.testing.assert_allclose(g, h, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", BODIES)
def test_hook_calls_and_gradients_as_torch(name):
    _assert_same_run(_counted(jitorch, BODIES[name]), _counted(torch, BODIES[name]))


@pytest.mark.parametrize("name", ["mul_exp_sum", "tanh", "sigmoid", "div"])
def test_double_backward_through_unpacked_tensors_as_torch(name):
    mine, theirs = _counted(jitorch, BODIES[name], True), _counted(torch, BODIES[name], True)
    for g, h in zip(mine[2], theirs[2]):
        assert (g is None) == (h is None)
        if h is not None:
            np.testing.assert_allclose(g, h, rtol=1e-5, atol=1e-6)


def test_only_the_innermost_hooks_run():
    for lib in (torch, jitorch):
        calls = []

        def hooks(tag):
            return (lambda t: calls.append(f"{tag}-pack") or t), (lambda t: calls.append(f"{tag}-unpack") or t)

        x = lib.tensor(X, requires_grad=True)
        with lib.autograd.graph.saved_tensors_hooks(*hooks("outer")):
            a = x.sin()
            with lib.autograd.graph.saved_tensors_hooks(*hooks("inner")):
                b = a.exp()
            c = b.cos()
        c.sum().backward()
        calls_lib = calls
        if lib is torch:
            expected, grad = calls_lib, x.grad.numpy()
    assert calls_lib == expected == ["outer-pack", "inner-pack", "outer-pack", "outer-unpack", "inner-unpack",
                                     "outer-unpack"]
    np.testing.assert_allclose(x.grad.numpy(), grad, rtol=1e-6)


def _custom_function(lib):
    class Scale(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            out = x * w
            ctx.save_for_backward(x, w, out)
            return out

        @staticmethod
        def backward(ctx, g):
            x, w, out = ctx.saved_tensors
            return g * w, g * x + 0 * out

    return Scale


def test_custom_function_saves_go_through_the_hooks_as_torch():
    _assert_same_run(_counted(jitorch, lambda L, x, w: _custom_function(L).apply(x, w).sum()),
                     _counted(torch, lambda L, x, w: _custom_function(L).apply(x, w).sum()))


def _checkpoint_style(lib):
    """Hooks that keep only a name per saved tensor and recompute it from the leaves on unpack."""
    x = lib.tensor(X, requires_grad=True)
    w = lib.tensor(W, requires_grad=True)
    recipes = {"x": lambda: x, "w": lambda: w, "out": lambda: (x * w).exp()}  # what (x * w).exp() saves
    kept = []

    def pack(t):
        kept.append("x" if t is x else "w" if t is w else "out")
        return kept[-1]

    def unpack(name):
        with lib.no_grad():
            return recipes[name]().detach()

    with lib.autograd.graph.saved_tensors_hooks(pack, unpack):
        out = (x * w).exp().sum()
    out.backward()
    return kept, x.grad.numpy(), w.grad.numpy()


def test_checkpoint_style_hooks_recompute_on_unpack():
    mine, theirs = _checkpoint_style(jitorch), _checkpoint_style(torch)
    assert sorted(mine[0]) == sorted(theirs[0]) == ["out", "w", "x"]
    for g, h in zip(mine[1:], theirs[1:]):
        np.testing.assert_allclose(g, h, rtol=1e-6)


@pytest.mark.parametrize("pin_memory", [False, True])
def test_save_on_cpu_packs_as_torch(pin_memory):
    # pin_memory=True packs a copy, so a later in-place change is not seen; False packs the tensor itself (no version
    # check with hooks: the backward sees the new values).
    results = []
    for lib in (torch, jitorch):
        x = lib.tensor(X, requires_grad=True)
        with lib.autograd.graph.save_on_cpu(pin_memory=pin_memory):
            y = x * 1
            out = (y * y).sum()
        with lib.no_grad():
            y.mul_(10)
        out.backward()
        results.append(x.grad.numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6)


def test_disable_saved_tensors_hooks_refuses_new_hooks():
    for lib in (torch, jitorch):
        graph = lib.autograd.graph
        with graph.disable_saved_tensors_hooks("hooks are off here"):
            with pytest.raises(RuntimeError, match="hooks are off here"):
                with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                    pass
        with graph.saved_tensors_hooks(lambda t: t, lambda t: t):  # allowed again after the block
            pass


def test_a_pack_hook_writing_its_input_is_refused():
    for lib in (torch, jitorch):
        x = lib.tensor(X, requires_grad=True)
        with lib.autograd.graph.saved_tensors_hooks(lambda t: t.detach().add_(1), lambda t: t):
            with pytest.raises(RuntimeError, match="pack hook is modifying its input in place"):
                x.sin()


def test_index_backward_reads_hook_packed_indices():
    """Advanced-indexing rows read their saved indices directly (not through ``ctx.inputs``); packed by hooks,
    those are unpacked too."""
    grads = []
    for lib in (jitorch, torch):
        x = lib.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
        idx = lib.tensor([3, 0, 3])
        with lib.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            y = (x[idx] * lib.tensor([1.0, 2.0, 3.0])).sum()
        y.backward()
        grads.append(np.asarray(x.grad.detach().numpy()))
    np.testing.assert_array_equal(*grads)
