"""Tensor hooks, node hooks, ``torch.autograd.graph`` nodes and custom Function gradient checks, against
PyTorch 2.13: replacement gradients are validated, AccumulateGrad is a Node with hooks, ``metadata`` exists, and a
Function's backward is refused when it returns gradients torch refuses."""
import numpy as np
import pytest
import torch

import jitorch
from helpers import same_error


@pytest.mark.parametrize("leaf", [True, False])
@pytest.mark.parametrize("bad", ["size", "dtype", "int"])
def test_tensor_hook_may_not_change_size_or_type(leaf, bad):
    def fn(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        t = x if leaf else x * 2
        replacement = {"size": lambda g: lib.ones(3), "dtype": lambda g: g.double(), "int": lambda g: 5}[bad]
        t.register_hook(replacement)
        (t * 3).sum().backward()
    same_error(fn)


def test_node_hooks_may_not_change_size():
    def pre(lib):
        h = lib.ones(2, requires_grad=True) * 1
        h.grad_fn.register_prehook(lambda go: (lib.ones(3),))
        h.sum().backward()

    def post(lib):
        h = lib.ones(2, requires_grad=True) * 1
        h.grad_fn.register_hook(lambda gi, go: (lib.ones(3), None))
        h.sum().backward()
    same_error(pre)
    same_error(post)


def test_post_accumulate_grad_hook_needs_requires_grad():
    same_error(lambda lib: lib.ones(2).register_post_accumulate_grad_hook(lambda p: None))


def test_accumulate_grad_is_a_node_with_hooks():
    records = []
    for lib in (torch, jitorch):
        rec = []
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x * 2
        acc = y.grad_fn.next_functions[0][0]
        assert isinstance(acc, lib.autograd.graph.Node) and acc.variable is x
        acc.register_prehook(lambda go: rec.append(("pre", go[0].tolist())))
        handle = acc.register_hook(lambda gi, go: rec.append(("post", len(gi), go[0].tolist())))
        y.sum().backward()
        handle.remove()
        (x * 3).sum().backward()
        records.append(rec)
    assert records[1] == records[0]


def test_accumulate_grad_hooks_survive_the_node_being_dropped():
    # Gradient-bucketing code keeps the node itself; torch's graph also keeps it alive while the leaf is in use.
    seen = []
    x = jitorch.tensor([1.0, 2.0], requires_grad=True)
    (x * 1).grad_fn.next_functions[0][0].register_hook(lambda gi, go: seen.append(go[0].tolist()))
    (x * 2).sum().backward()
    assert seen == [[2.0, 2.0]]


def test_node_metadata_is_a_persistent_dict():
    for lib in (torch, jitorch):
        y = lib.ones(2, requires_grad=True) * 2
        assert y.grad_fn.metadata == {}
        y.grad_fn.metadata["tag"] = 1
        assert y.grad_fn.metadata == {"tag": 1}


def _fn_class(lib, backward, forward=None):
    class F(lib.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            return forward(ctx, *args) if forward else args[1] * 2
    F.backward = staticmethod(backward)
    return F


@pytest.mark.parametrize("case", ["grad_for_number", "not_a_tensor", "wrong_shape"])
def test_function_backward_results_are_checked(case):
    def fn(lib):
        x = lib.tensor([1.0, 3.0], requires_grad=True)
        backward = {"grad_for_number": lambda ctx, g: (g, g),
                    "not_a_tensor": lambda ctx, g: (None, 3),
                    "wrong_shape": lambda ctx, g: (None, lib.ones(3))}[case]
        F = _fn_class(lib, backward)
        F.apply(2.0, x).sum().backward()
    same_error(fn)


def test_function_broadcast_gradient_is_summed():
    for lib in (torch, jitorch):
        x = lib.tensor([1.0, 3.0], requires_grad=True)
        F = _fn_class(lib, lambda ctx, g: (None, lib.ones(3, 2)))
        F.apply(2.0, x).sum().backward()
        assert x.grad.tolist() == [3.0, 3.0]


def test_function_non_tensor_outputs_get_none_gradients():
    seen = []
    for lib in (torch, jitorch):
        def forward(ctx, k, x):
            return x * 2, 5, None

        def backward(ctx, g, a, b):
            seen.append((a, b))
            return None, g * 2
        y, k, n = _fn_class(lib, backward, forward).apply(2.0, lib.tensor([1.0], requires_grad=True))
        assert (k, n) == (5, None)
        y.sum().backward()
    assert seen == [(None, None), (None, None)]


def test_save_for_backward_refuses_non_tensors():
    def fn(lib):
        def forward(ctx, k, x):
            ctx.save_for_backward(x, None, 3)
            return x * 2
        _fn_class(lib, lambda ctx, g: (None, g), forward).apply(2.0, lib.ones(1, requires_grad=True))
    same_error(fn)


@pytest.mark.parametrize("shape,perm", [((4, 3), (1, 0)), ((2, 3, 4), (2, 0, 1)), ((2, 1, 4), (2, 1, 0))])
def test_grad_of_a_permuted_dense_leaf_has_its_strides(shape, perm):
    strides = []
    for lib in (torch, jitorch):
        x = lib.arange(float(np.prod(shape))).reshape(shape).permute(perm).detach().requires_grad_()
        (x * x).sum().backward()
        sliced = lib.ones(6, 6)[::2, 1:4].detach().requires_grad_()  # not dense: a contiguous .grad
        (sliced * 2).sum().backward()
        strides.append((x.grad.stride(), sliced.grad.stride(), x.grad.tolist()))
    assert strides[1] == strides[0]
