"""Autograd basics, checked against PyTorch 2.13 on the same data (passed through NumPy).

Every test builds the same computation twice, once with ``jitorch`` and once with ``torch``, and compares values,
gradients and error messages. jitorch itself never imports torch: torch is only the oracle here.
"""
import numpy as np
import pytest
import torch

import jitorch

RNG = np.random.default_rng(1234)

# torch warns where these tests deliberately do what it warns about (non-leaf .grad, backward with create_graph).
pytestmark = [
    pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning"),
    pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning"),
]


def _pair(shape, dtype=np.float64, requires_grad=True, low=-1.0, high=1.0):
    """The same random values as a jitorch and a torch tensor (both leaves)."""
    data = RNG.uniform(low, high, size=shape).astype(dtype)
    return (jitorch.tensor(data.copy(), requires_grad=requires_grad),
            torch.tensor(data.copy(), requires_grad=requires_grad))


def _np(t):
    """Host values of a jitorch or torch tensor as a NumPy array."""
    return np.asarray(t.detach().numpy())


def _close(a, b, rtol=1e-6, atol=1e-8):
    np.testing.assert_allclose(_np(a), _np(b), rtol=rtol, atol=atol)


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


# -- grad modes ------------------------------------------------------------------------------------------------------

def test_no_grad_context_and_nesting():
    for lib in (jitorch, torch):
        x = lib.ones(2, requires_grad=True)
        with lib.no_grad():
            assert not lib.is_grad_enabled()
            y = x * 2
            with lib.enable_grad():
                assert lib.is_grad_enabled()
                z = x * 2
        assert lib.is_grad_enabled()
        assert not y.requires_grad and y.grad_fn is None
        assert z.requires_grad and z.grad_fn is not None


def test_grad_mode_restored_after_exception():
    for lib in (jitorch, torch):
        with pytest.raises(ValueError):
            with lib.no_grad():
                raise ValueError("boom")
        assert lib.is_grad_enabled()


def test_set_grad_enabled_as_function_and_context():
    for lib in (jitorch, torch):
        x = lib.ones(2, requires_grad=True)
        with lib.set_grad_enabled(False):
            assert not (x * 2).requires_grad
        assert lib.is_grad_enabled()
        lib.set_grad_enabled(False)  # a plain call switches the mode at once
        try:
            assert not lib.is_grad_enabled()
        finally:
            lib.set_grad_enabled(True)
        assert (x * 2).requires_grad


@pytest.mark.parametrize("make", ["no_grad", "no_grad_bare", "set_grad_enabled", "inference_mode"])
def test_grad_mode_decorators(make):
    for lib in (jitorch, torch):
        deco = {
            "no_grad": lambda: lib.no_grad(),
            "no_grad_bare": lambda: lib.no_grad,
            "set_grad_enabled": lambda: lib.set_grad_enabled(False),
            "inference_mode": lambda: lib.inference_mode(),
        }[make]()

        @deco
        def double(t):
            return t * 2, lib.is_grad_enabled()

        assert lib.is_grad_enabled()  # decorating must not change the mode outside calls
        x = lib.ones(2, requires_grad=True)
        y, enabled = double(x)
        assert not enabled and not y.requires_grad
        assert lib.is_grad_enabled()
        assert double.__name__ == "double"


def test_enable_grad_decorator_inside_no_grad():
    for lib in (jitorch, torch):
        @lib.enable_grad()
        def double(t):
            return t * 2

        x = lib.ones(2, requires_grad=True)
        with lib.no_grad():
            y = double(x)
            assert not lib.is_grad_enabled()
        assert y.requires_grad


def test_grad_mode_decorator_on_generator():
    # The mode applies while the generator body runs, and not in the caller between ``next`` calls.
    for lib in (jitorch, torch):
        @lib.no_grad()
        def gen(t):
            while True:
                received = yield t * 2, lib.is_grad_enabled()
                t = t if received is None else received

        x = lib.ones(2, requires_grad=True)
        g = gen(x)
        seen = [next(g), g.send(x * 3)]
        assert [(y.requires_grad, enabled) for y, enabled in seen] == [(False, False), (False, False)]
        assert lib.is_grad_enabled()
        assert _np(seen[1][0]).tolist() == [6.0, 6.0]
        g.close()


def test_grad_mode_decorated_generator_can_be_exhausted():
    for lib in (jitorch, torch):
        @lib.no_grad()
        def gen(t):
            for _ in range(2):
                yield t * 2
            return "done"

        x = lib.ones(2, requires_grad=True)
        assert [y.requires_grad for y in gen(x)] == [False, False]
        g = gen(x)
        next(g), next(g)
        with pytest.raises(StopIteration) as info:
            next(g)
        assert info.value.value == "done"
        assert list(lib.no_grad()(lambda: (yield from ()))()) == []


def test_inference_mode_flags():
    for lib in (jitorch, torch):
        x = lib.ones(2, requires_grad=True)
        with lib.inference_mode():
            assert lib.is_inference_mode_enabled()
            assert not lib.is_grad_enabled()
            y = x * 2
        assert not lib.is_inference_mode_enabled()
        assert not y.requires_grad
        with lib.inference_mode(False):
            assert lib.is_grad_enabled()
            assert (x * 2).requires_grad


# -- detach, requires_grad, .data -------------------------------------------------------------------------------------

def test_detach_shares_values_and_version_but_not_history():
    for lib in (jitorch, torch):
        x = lib.ones(3, requires_grad=True)
        y = x * 2
        d = y.detach()
        assert not d.requires_grad and d.grad_fn is None and d.is_leaf
        v = y._version
        d.add_(1)
        assert y._version == v + 1  # detach() shares the version counter
        assert _np(y).tolist() == [3.0, 3.0, 3.0]  # and the memory


def test_detach_in_place():
    for lib in (jitorch, torch):
        x = lib.ones(3, requires_grad=True)
        y = x * 2
        assert y.detach_() is y
        assert not y.requires_grad and y.grad_fn is None and y.is_leaf


def test_detach_in_place_on_view_raises():
    for lib in (jitorch, torch):
        x = lib.ones(3, requires_grad=True)
        v = (x * 1).view(3)
        with pytest.raises(RuntimeError, match="Can't detach views in-place"):
            v.detach_()


def test_requires_grad_in_place_and_setter():
    for lib in (jitorch, torch):
        x = lib.ones(2)
        assert x.requires_grad_() is x and x.requires_grad
        x.requires_grad = False
        assert not x.requires_grad
        x.requires_grad = True
        (x * 3).sum().backward()
        assert _np(x.grad).tolist() == [3.0, 3.0]


def test_integer_tensor_cannot_require_grad():
    for lib in (jitorch, torch):
        with pytest.raises(RuntimeError, match="(?i)only Tensors of floating point"):
            lib.tensor([1, 2]).requires_grad_()
        with pytest.raises(RuntimeError, match="(?i)only Tensors of floating point"):
            lib.tensor([1, 2], requires_grad=True)


def test_setting_requires_grad_false_on_non_leaf_raises():
    for lib in (jitorch, torch):
        y = lib.ones(2, requires_grad=True) * 2
        with pytest.raises(RuntimeError, match="you can only change requires_grad flags of leaf variables"):
            y.requires_grad = False
        y.requires_grad_(True)  # a no-op on a tensor that already requires grad


def test_data_has_no_history_and_own_version_counter():
    for lib in (jitorch, torch):
        x = lib.ones(3, requires_grad=True)
        y = x * 2
        d = y.data
        assert not d.requires_grad and d.grad_fn is None
        v = y._version
        d.mul_(5)  # writes reach y's memory but do not bump y's version: .data hides the change from autograd
        assert y._version == v
        assert _np(y).tolist() == [10.0, 10.0, 10.0]


def test_data_setter_replaces_values_keeps_identity():
    for lib in (jitorch, torch):
        x = lib.ones(2, requires_grad=True)
        x.data = lib.tensor([5.0, 6.0])
        assert x.requires_grad and x.is_leaf
        (x * x).sum().backward()
        assert _np(x.grad).tolist() == [10.0, 12.0]


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
