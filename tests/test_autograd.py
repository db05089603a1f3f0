"""Autograd basics, checked against PyTorch 2.13 on the same data (passed through NumPy).

Every test builds the same computation twice, once with ``jitorch`` and once with ``torch``, and compares values,
gradients and error messages. jitorch itself never imports torch: torch is only the oracle here.
"""
import numpy as np
import pytest
import torch

import jitorch

from autograd_helpers import RNG, _close, _np, _pair

# torch warns where these tests deliberately do what it warns about (non-leaf .grad, backward with create_graph).
pytestmark = [
    pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning"),
    pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning"),
]


def _both(fn, *pairs):
    """Run ``fn(lib, *tensors)`` with jitorch and with torch; returns the two results."""
    return fn(jitorch, *(p[0] for p in pairs)), fn(torch, *(p[1] for p in pairs))


# -- accumulation, broadcasting, retain_graph ---------------------------------------------------------------------

def test_grad_accumulates_across_backward_calls():
    xj, xt = _pair((4,))
    for _ in range(2):
        (xj * xj).sum().backward()
        (xt * xt).sum().backward()
    _close(xj.grad, xt.grad)
    np.testing.assert_allclose(_np(xj.grad), 4 * _np(xj))


def test_grad_is_not_aliased_between_leaves_or_with_user_gradient():
    # ``a + b``'s backward passes the same gradient to both inputs: each leaf must own its .grad.
    aj = jitorch.zeros(3, requires_grad=True)
    bj = jitorch.zeros(3, requires_grad=True)
    g = jitorch.ones(3)
    (aj + bj).backward(g)
    aj.grad.add_(1)
    assert bj.grad.tolist() == [1.0, 1.0, 1.0]
    assert g.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("shape_a,shape_b", [((3, 4), (4,)), ((3, 1), (1, 4)), ((2, 3, 4), (3, 1)), ((3,), ())])
def test_broadcast_gradients_reduce_to_input_shape(shape_a, shape_b):
    a, b = _pair(shape_a), _pair(shape_b)
    outs = _both(lambda lib, x, y: ((x * y + x / (y + 3.0)) - y).sum(), a, b)
    for out in outs:
        out.backward()
    for pj, pt in (a, b):
        assert tuple(pj.grad.shape) == tuple(pt.grad.shape)
        _close(pj.grad, pt.grad)


def test_retain_graph_allows_second_backward():
    xj, xt = _pair((3,))
    for x in (xj, xt):
        y = (x.exp() * x).sum()
        y.backward(retain_graph=True)
        y.backward()
    _close(xj.grad, xt.grad)


def test_second_backward_without_retain_graph_raises():
    xj, xt = _pair((3,))
    for x in (xj, xt):
        y = (x.exp() * x).sum()
        y.backward()
        with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
            y.backward()


def test_backward_with_explicit_gradient():
    xj, xt = _pair((2, 3))
    g = RNG.standard_normal((2, 3))
    xj.tanh().backward(gradient=jitorch.tensor(g))
    xt.tanh().backward(gradient=torch.tensor(g))
    _close(xj.grad, xt.grad)


def test_backward_on_shape_one_tensor():
    # A one-element tensor is a valid implicit-gradient root even when it is not 0-d.
    xj, xt = _pair((1,))
    (xj * 3).backward()
    (xt * 3).backward()
    _close(xj.grad, xt.grad)


def test_backward_of_non_scalar_without_gradient_raises():
    xj, xt = _pair((3,))
    for x in (xj, xt):
        with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
            (x * 2).backward()


def test_backward_of_tensor_without_grad_raises():
    for lib in (jitorch, torch):
        with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
            lib.ones(2).sum().backward()


def test_backward_gradient_shape_mismatch_raises():
    for lib in (jitorch, torch):
        x = lib.ones(3, requires_grad=True)
        with pytest.raises(RuntimeError, match="Mismatch in shape"):
            (x * 2).backward(lib.ones(4))


# -- inputs= and autograd.grad --------------------------------------------------------------------------------------

def test_backward_inputs_restricts_to_given_leaves():
    (aj, at), (bj, bt) = _pair((3,)), _pair((3,))
    (aj * bj).sum().backward(inputs=[aj])
    (at * bt).sum().backward(inputs=[at])
    _close(aj.grad, at.grad)
    assert bj.grad is None and bt.grad is None


def test_backward_inputs_non_leaf_gets_grad():
    xj, xt = _pair((3,))
    results = []
    for x in (xj, xt):
        h = x * 2
        (h.sin()).sum().backward(inputs=[h])
        results.append(h.grad)
        assert x.grad is None
    _close(*results)


def test_backward_inputs_empty_list_raises():
    for lib in (jitorch, torch):
        x = lib.ones(2, requires_grad=True)
        with pytest.raises(RuntimeError, match="cannot be empty"):
            (x * 2).sum().backward(inputs=[])


def test_autograd_grad_returns_without_touching_dot_grad():
    (aj, at), (bj, bt) = _pair((3,)), _pair((3,))
    gj = jitorch.autograd.grad((aj * bj.exp()).sum(), [aj, bj])
    gt = torch.autograd.grad((at * bt.exp()).sum(), [at, bt])
    assert isinstance(gj, tuple) and len(gj) == 2
    for a, b in zip(gj, gt):
        _close(a, b)
    assert aj.grad is None and bj.grad is None


def test_autograd_grad_allow_unused():
    (aj, at), (bj, bt) = _pair((3,)), _pair((3,))
    for lib, a, b in ((jitorch, aj, bj), (torch, at, bt)):
        with pytest.raises(RuntimeError, match="Tensor at index 1 appears to not have been used in the graph"):
            lib.autograd.grad((a * 2).sum(), [a, b])
        ga, gb = lib.autograd.grad((a * 2).sum(), [a, b], allow_unused=True)
        assert gb is None
        assert _np(ga).tolist() == [2.0, 2.0, 2.0]
        ga, gb = lib.autograd.grad((a * 2).sum(), [a, b], materialize_grads=True)
        assert _np(gb).tolist() == [0.0, 0.0, 0.0]


def test_autograd_grad_with_respect_to_non_leaf():
    xj, xt = _pair((3,))
    results = []
    for lib, x in ((jitorch, xj), (torch, xt)):
        h = x.exp()
        (g,) = lib.autograd.grad((h * h).sum(), h)
        results.append(g)
    _close(*results)



def test_grad_with_respect_to_a_non_leaf_leaves_its_history_for_a_later_backward():
    """``grad(y, h)`` captures the gradient flowing into ``h`` without running ``h``'s own node: a later backward
    through ``h`` still works and reaches the leaf, as in torch."""
    xj, xt = _pair((4,))
    grads, leaf = [], []
    for lib, x in ((jitorch, xj), (torch, xt)):
        h = x * 2.0 + x.exp()
        (g,) = lib.autograd.grad((h * h).sum(), h)
        (h.sin()).sum().backward()
        grads.append(g)
        leaf.append(x.grad)
    _close(*grads)
    _close(*leaf)

# -- higher-order gradients ------------------------------------------------------------------------------------------

HIGHER_ORDER_FUNCS = {
    "tanh": lambda lib, x: x.tanh(),
    "sigmoid": lambda lib, x: lib.sigmoid(x),
    "exp": lambda lib, x: x.exp(),
    "cube": lambda lib, x: x ** 3,
    "chain": lambda lib, x: ((x * 1.5 + 1).sin() * x - x / (x * x + 2)).exp(),
    "softmax": lambda lib, x: lib.softmax(x, 0) * lib.arange(x.shape[0], dtype=x.dtype),
}


@pytest.mark.parametrize("name", sorted(HIGHER_ORDER_FUNCS))
def test_double_and_triple_backward(name):
    fn = HIGHER_ORDER_FUNCS[name]
    xj, xt = _pair((5,))
    derivs = []
    for lib, x in ((jitorch, xj), (torch, xt)):
        y = fn(lib, x).sum()
        (g1,) = lib.autograd.grad(y, x, create_graph=True)
        (g2,) = lib.autograd.grad(g1.sum(), x, create_graph=True)
        (g3,) = lib.autograd.grad(g2.sum(), x)
        derivs.append((g1, g2, g3))
    for a, b in zip(*derivs):
        _close(a, b, rtol=1e-5, atol=1e-10)


def test_create_graph_backward_accumulates_differentiable_grad():
    xj, xt = _pair((3,))
    for x in (xj, xt):
        (x ** 3).sum().backward(create_graph=True)
        assert x.grad.requires_grad
        x.grad.sum().backward()
    # x.grad = 3x^2 (from the first pass) + 6x (the second pass accumulates into the same .grad)
    _close(xj.grad, xt.grad)


def test_grad_of_grad_without_create_graph_has_no_history():
    for lib in (jitorch, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        (g,) = lib.autograd.grad((x ** 2).sum(), x)
        assert not g.requires_grad and g.grad_fn is None
