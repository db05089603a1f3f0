"""Graph nodes (``grad_fn`` names, ``next_functions``, leaves) and tensor/node hooks, ``retain_grad`` and the
``.grad`` setter, checked against PyTorch 2.13.
"""
import pytest
import torch

import jitorch

from autograd_helpers import _close, _np, _pair


# torch warns where these tests deliberately do what it warns about (non-leaf .grad, backward with create_graph).
pytestmark = [
    pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning"),
    pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning"),
]


# -- graph structure ------------------------------------------------------------------------------------------------

def test_grad_fn_names_and_next_functions():
    for lib in (jitorch, torch):
        a = lib.ones(2, requires_grad=True)
        b = lib.ones(2, requires_grad=True)
        c = lib.ones(2)  # does not require grad
        s = a * b + c
        assert type(s.grad_fn).__name__ == "AddBackward0" and s.grad_fn.name() == "AddBackward0"
        (mul, mul_nr), (none, none_nr) = s.grad_fn.next_functions
        assert (none, none_nr) == (None, 0)
        assert mul.name() == "MulBackward0" and mul_nr == 0
        (acc_a, nr_a), (acc_b, nr_b) = mul.next_functions
        assert type(acc_a).__name__ == "AccumulateGrad" and nr_a == 0 and nr_b == 0
        assert acc_a.variable is a and acc_b.variable is b
        assert acc_a.next_functions == ()
        assert (a * 2).grad_fn.next_functions[1] == (None, 0)  # a Python scalar has no edge


NAMED = {
    "1 - x": lambda lib, x: 1 - x, "rsub": lambda lib, x: lib.rsub(x, 1), "x ** x": lambda lib, x: x ** x,
    "2 ** x": lambda lib, x: 2 ** x, "sum(0)": lambda lib, x: x.sum(0), "sum()": lambda lib, x: x.sum(),
    "masked_fill": lambda lib, x: x.masked_fill(x > 2, 0.0), "bmm": lambda lib, x: lib.bmm(x[None], x[None]),
    "repeat": lambda lib, x: x.repeat(2, 1), "mean(0)": lambda lib, x: x.mean(0),
}


@pytest.mark.parametrize("case", sorted(NAMED))
def test_grad_fn_names_of_overloads_and_composites_are_torchs(case):
    # Code that walks a graph by node names (a visualiser, a test) sees torch's: the overload's number, and the
    # op torch records rather than the primitive jitorch computes it with.
    got, want = (type(NAMED[case](lib, lib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)).grad_fn).__name__
                 for lib in (jitorch, torch))
    assert got == want


def test_accumulate_grad_node_is_one_object_per_leaf():
    for lib in (jitorch, torch):
        a = lib.ones(2, requires_grad=True)
        fns = (a * a).grad_fn.next_functions
        assert fns[0][0] is fns[1][0]


def test_is_leaf():
    for lib in (jitorch, torch):
        a = lib.ones(2, requires_grad=True)
        assert a.is_leaf and lib.ones(2).is_leaf
        assert not (a * 2).is_leaf
        with lib.no_grad():
            assert (a * 2).is_leaf
        assert (a * 2).detach().is_leaf


def test_multi_output_node_output_nr():
    for lib in (jitorch, torch):
        x = lib.arange(6.0).reshape(2, 3).requires_grad_()
        mx, idx = x.max(dim=1)
        assert mx.grad_fn is not None and idx.grad_fn is None and not idx.requires_grad
        (mx * 2).sum().backward()
        assert _np(x.grad).tolist() == [[0, 0, 2], [0, 0, 2]]


# -- hooks -----------------------------------------------------------------------------------------------------------

def test_register_hook_on_leaf_modifies_grad_and_is_removable():
    for lib in (jitorch, torch):
        x = lib.ones(2, requires_grad=True)
        seen = []

        def hook(g):
            seen.append(_np(g).tolist())
            return g * 10

        handle = x.register_hook(hook)
        (x * 3).sum().backward()
        assert seen == [[3.0, 3.0]]
        assert _np(x.grad).tolist() == [30.0, 30.0]
        handle.remove()
        x.grad = None
        (x * 3).sum().backward()
        assert _np(x.grad).tolist() == [3.0, 3.0] and len(seen) == 1


def test_register_hook_on_non_leaf_changes_upstream_grad():
    for lib in (jitorch, torch):
        x = lib.ones(2, requires_grad=True)
        h = x * 2
        seen = []
        h.register_hook(lambda g: seen.append(_np(g).tolist()))  # returning None keeps the grad
        h.register_hook(lambda g: g + 1)
        (h * 3).sum().backward()
        assert seen == [[3.0, 3.0]]
        assert _np(x.grad).tolist() == [8.0, 8.0]  # (3 + 1) * 2
        assert h.grad is None  # hooks do not retain the grad


def test_register_hook_on_tensor_without_grad_raises():
    for lib in (jitorch, torch):
        with pytest.raises(RuntimeError, match="doesn't require gradient"):
            lib.ones(2).register_hook(lambda g: g)


def test_retain_grad():
    xj, xt = _pair((3,))
    results = []
    for x in (xj, xt):
        h = x.exp()
        h.retain_grad()
        assert h.retains_grad and not x.retains_grad
        (h * h).sum().backward(retain_graph=True)
        (h * h).sum().backward()  # the retained grad accumulates like a leaf's
        results.append(h.grad)
    _close(*results)


def test_retain_grad_sees_hook_modified_grad_registered_before():
    # torch: a hook registered before retain_grad() changes what is retained.
    for lib in (jitorch, torch):
        x = lib.ones(2, requires_grad=True)
        h = x * 2
        h.register_hook(lambda g: g * 5)
        h.retain_grad()
        h.sum().backward()
        assert _np(h.grad).tolist() == [5.0, 5.0]


def test_retain_grad_sees_hook_registered_after():
    for lib in (jitorch, torch):
        x = lib.ones(2, requires_grad=True)
        h = x * 2
        h.retain_grad()
        h.register_hook(lambda g: g * 5)
        h.sum().backward()
        assert _np(h.grad).tolist() == [5.0, 5.0]
        assert _np(x.grad).tolist() == [10.0, 10.0]


def test_node_hook_and_prehook():
    for lib in (jitorch, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x * 3
        calls = []

        def prehook(grad_outputs):
            calls.append("pre")
            return (grad_outputs[0] * 2,)

        def hook(grad_inputs, grad_outputs):
            calls.append("post")
            assert _np(grad_outputs[0]).tolist() == [2.0, 2.0]  # after the prehook's change
            return (grad_inputs[0] + 1,) + tuple(grad_inputs[1:])

        y.grad_fn.register_prehook(prehook)
        handle = y.grad_fn.register_hook(hook)
        y.sum().backward(retain_graph=True)
        assert calls == ["pre", "post"]
        assert _np(x.grad).tolist() == [7.0, 7.0]
        handle.remove()
        x.grad = None
        y.sum().backward()
        assert calls == ["pre", "post", "pre"]
        assert _np(x.grad).tolist() == [6.0, 6.0]


def test_post_accumulate_grad_hook():
    for lib in (jitorch, torch):
        x = lib.ones(2, requires_grad=True)
        seen = []

        def hook(t):
            assert t is x
            seen.append(_np(t.grad).tolist())

        x.register_post_accumulate_grad_hook(hook)
        (x * 2).sum().backward()
        (x * 2).sum().backward()
        assert seen == [[2.0, 2.0], [4.0, 4.0]]
        with pytest.raises(RuntimeError, match="post accumulate grad hooks cannot be registered on non-leaf"):
            (x * 2).register_post_accumulate_grad_hook(hook)


def test_grad_setter_validates():
    for lib in (jitorch, torch):
        x = lib.ones(2, requires_grad=True)
        # The wording differs (torch: "attempting to assign a gradient of size"); both name the size mismatch.
        with pytest.raises(RuntimeError, match="size"):
            x.grad = lib.ones(3)
        with pytest.raises(RuntimeError, match="dtype|type"):
            x.grad = lib.ones(2, dtype=lib.float64)
        x.grad = lib.ones(2)
        del x.grad
        assert x.grad is None
