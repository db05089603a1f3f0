"""``torch.autograd.graph.register_multi_grad_hook`` against PyTorch 2.13: when the hook runs (once per backward, after
every tensor that backward reaches), what it receives (None for the tensors not reached, under ``backward``,
``backward(inputs=)`` and ``autograd.grad``), ``mode="any"``, removal and the error for an unknown mode."""
import numpy as np
import pytest
import torch

import jitorch
from helpers import same_error

A, B, C = np.array([1.0, 2.0], np.float32), np.array([3.0], np.float32), np.array([0.5, -1.0], np.float32)


def _grads(grads):
    return [None if g is None else g.tolist() for g in grads]


def _leaves(lib):
    return [lib.tensor(v, requires_grad=True) for v in (A, B, C)]


BACKWARDS = {
    # each: (lib, a, b, c) -> runs one or more backwards
    "all_reached": lambda L, a, b, c: ((a * b).sum() + (c ** 2).sum()).backward(),
    "subset_reached": lambda L, a, b, c: (a * 2).sum().backward(),
    "two_backwards": lambda L, a, b, c: [(a * b).sum().backward(), (c * b).sum().backward()],
    "retained_graph_twice": lambda L, a, b, c: [y.backward(retain_graph=True) or y.backward()
                                                for y in [(a * a * b).sum() + c.sum()]],
    "backward_inputs": lambda L, a, b, c: ((a * b).sum() + c.sum()).backward(inputs=[b, c]),
}


@pytest.mark.parametrize("name", list(BACKWARDS))
def test_mode_all_runs_once_per_backward_with_the_reached_gradients(name):
    results = []
    for lib in (torch, jitorch):
        a, b, c = _leaves(lib)
        seen = []
        lib.autograd.graph.register_multi_grad_hook((a, b, c), lambda grads: seen.append(_grads(grads)))
        BACKWARDS[name](lib, a, b, c)
        results.append(seen)
    assert results[0] == results[1] and results[0]


def test_hooks_of_tensors_a_backward_with_inputs_does_not_reach_do_not_run():
    # (torch runs no hook of a node that neither runs nor has its gradient captured; leaves' hooks run once their
    # gradient is complete, which in jitorch is at the end of the backward.)
    results = []
    for lib in (torch, jitorch):
        a, b, c = _leaves(lib)
        order = []

        def pair():
            h, k = a * 2, b * 3
            h.register_hook(lambda g: order.append("h"))
            k.register_hook(lambda g: order.append("k"))
            return h, k

        b.register_hook(lambda g: order.append("b"))
        h, k = pair()
        (h * k).sum().backward(inputs=[b])
        h, k = pair()
        h.retain_grad()
        (h * k).sum().backward(inputs=[k])
        order.append(h.grad)
        h, k = pair()
        lib.autograd.grad((h * k).sum(), [h])
        h, k = pair()
        lib.autograd.grad((h * k).sum(), [k])
        results.append(order)
    assert results[0] == results[1]


def test_mode_all_inside_autograd_grad_refuses_leaves_as_torch():
    def fn(lib):
        a, b, c = _leaves(lib)
        lib.autograd.graph.register_multi_grad_hook((a, b), print)
        lib.autograd.grad((a * b).sum(), [a])
    same_error(fn)
    results = []
    for lib in (torch, jitorch):
        a, b, c = _leaves(lib)
        h, k = a * 2, b * 3
        seen = []
        lib.autograd.graph.register_multi_grad_hook((h, k), lambda grads: seen.append(_grads(grads)))
        lib.autograd.grad((h * k).sum(), [h])
        results.append(seen)
    assert results[0] == results[1] == [[[9.0, 9.0], None]]


def test_mode_all_over_intermediate_tensors_and_leaves():
    results = []
    for lib in (torch, jitorch):
        a, b, c = _leaves(lib)
        h1, h2 = a * 3, (b + 1).expand(2)
        seen, order = [], []
        h1.register_hook(lambda g: order.append("h1"))
        lib.autograd.graph.register_multi_grad_hook((h1, h2, c), lambda grads: (order.append("multi"),
                                                                                 seen.append(_grads(grads))))
        (h1 * h2).sum().backward()
        (h1.detach() * h2 + c).sum().backward()
        results.append((seen, order, a.grad.tolist(), b.grad.tolist()))
    assert results[0] == results[1]


def test_mode_any_gets_the_first_gradient_once_per_backward_and_remove_stops_it():
    results = []
    for lib in (torch, jitorch):
        a, b, c = _leaves(lib)
        h = a * 4
        k = h * 2
        seen = []
        handle = lib.autograd.graph.register_multi_grad_hook((h, k), lambda g: seen.append(g.tolist()), mode="any")
        (k * 2 + c).sum().backward(retain_graph=True)
        (h * 5).sum().backward(retain_graph=True)
        handle.remove()
        (k * 2 + c).sum().backward()
        results.append(seen)
    assert results[0] == results[1] and len(results[0]) == 2


def test_removed_mode_all_hook_is_not_called_and_unknown_mode_raises():
    for lib in (torch, jitorch):
        a, b, c = _leaves(lib)
        seen = []
        with lib.autograd.graph.register_multi_grad_hook((a, b), seen.append):
            pass
        (a * b).sum().backward()
        assert seen == []
    same_error(lambda lib: lib.autograd.graph.register_multi_grad_hook(_leaves(lib), print, mode="every"))
