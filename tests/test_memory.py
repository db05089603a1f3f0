"""Autograd graphs must be freed by reference counting alone: no reference cycles.

The garbage collector is disabled in every test, so an object that is still alive after its last outside reference
is dropped is kept alive by a cycle (or a leak). Graphs are built inside helper functions that return only weak
references, so no local variable of the test keeps anything alive. The same builders run with torch, whose tensors
are freed the same way (torch's nodes cannot be weakly referenced, so only its tensors are checked).
"""
import gc
import weakref

import pytest
import torch

import jitorch

LIBS = (jitorch, torch)


@pytest.fixture(autouse=True)
def refcount_only():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _refs(*objs):
    """Weak references to tensors, their arrays (jitorch) and nodes (jitorch), skipping what cannot be referenced."""
    refs = []
    for obj in objs:
        if obj is None:
            continue
        try:
            refs.append(weakref.ref(obj))
        except TypeError:  # torch's autograd nodes are not weak-referenceable
            continue
        if isinstance(obj, jitorch.Tensor):
            refs.append(weakref.ref(obj._data))
            refs.extend(_refs(obj.grad_fn))
    return refs


def _alive(refs):
    return [r() for r in refs if r() is not None]


def _assert_all_freed(refs):
    alive = _alive(refs)
    assert not alive, f"{len(alive)} objects outlived their last reference: {[type(a).__name__ for a in alive]}"


# -- graph builders: each returns (leaf, weak references to everything that should die with the graph) -------------

def _chain_without_saved_outputs(lib, backward, retain_graph=False):
    """mul (saves inputs), sin (saves input), add (saves nothing), sum."""
    x = lib.ones(4, requires_grad=True)
    y = x * 2
    z = y * y
    w = z.sin() + y
    loss = w.sum()
    refs = _refs(y, z, w, loss)
    if backward:
        loss.backward(retain_graph=retain_graph)
    return x, refs


def _chain_with_saved_outputs(lib, backward, retain_graph=False):
    """exp, tanh and sigmoid save their outputs for backward."""
    x = lib.ones(4, requires_grad=True)
    y = x.exp()
    z = y.tanh()
    w = lib.sigmoid(z) * 3
    loss = w.sum()
    refs = _refs(y, z, w, loss)
    if backward:
        loss.backward(retain_graph=retain_graph)
    return x, refs


def _make_exp_function(lib):
    class Exp(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)  # saves its own output
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y

    return Exp


def _function_saving_output(lib, backward):
    x = lib.ones(4, requires_grad=True)
    y = _make_exp_function(lib).apply(x * 1)
    loss = (y * 2).sum()
    refs = _refs(y, loss)
    if backward:
        loss.backward()
    return x, refs


# -- after backward ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("lib", LIBS, ids=["jitorch", "torch"])
@pytest.mark.parametrize("build", [_chain_without_saved_outputs, _chain_with_saved_outputs])
def test_graph_freed_after_backward(lib, build):
    x, refs = build(lib, backward=True)
    _assert_all_freed(refs)
    assert x.grad is not None


@pytest.mark.parametrize("lib", LIBS, ids=["jitorch", "torch"])
def test_function_saving_its_output_freed_after_backward(lib):
    x, refs = _function_saving_output(lib, backward=True)
    _assert_all_freed(refs)
    assert x.grad is not None


def test_saved_tensors_released_by_backward_while_graph_is_referenced():
    # After backward the loss (and so the nodes) may stay alive; the tensors the nodes saved must not.
    for lib in LIBS:
        x = lib.ones(3, requires_grad=True)
        y = x * 2
        loss = (y * y).sum()  # MulBackward0 saves y
        ref = weakref.ref(y)
        del y
        assert ref() is not None  # saved for backward
        loss.backward()
        assert ref() is None
        assert loss.grad_fn is not None


def test_leaf_freed_after_backward():
    for lib in LIBS:
        x = lib.ones(3, requires_grad=True)
        (x * x).sum().backward()
        refs = _refs(x, x.grad)
        del x
        _assert_all_freed(refs)


# -- without backward --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("lib", LIBS, ids=["jitorch", "torch"])
def test_graph_without_saved_outputs_freed_without_backward(lib):
    _, refs = _chain_without_saved_outputs(lib, backward=False)
    _assert_all_freed(refs)


SAVED_OUTPUT_CYCLE = ("bug: a saved output keeps the output tensor itself (Node.save_output stores o._root(), which is "
                      "o for a non-view: jitorch/autograd/graph.py:72; Function: jitorch/autograd/function.py:176), "
                      "so output -> grad_fn -> saved output is a reference cycle until backward releases it")


@pytest.mark.parametrize("lib", [
    pytest.param(jitorch, id="jitorch"),
    pytest.param(torch, id="torch"),
])
def test_graph_with_saved_outputs_freed_without_backward(lib):
    _, refs = _chain_with_saved_outputs(lib, backward=False)
    _assert_all_freed(refs)


@pytest.mark.parametrize("lib", [
    pytest.param(jitorch, id="jitorch"),
    pytest.param(torch, id="torch"),
])
def test_graph_with_saved_outputs_freed_after_retain_graph(lib):
    _, refs = _chain_with_saved_outputs(lib, backward=True, retain_graph=True)
    _assert_all_freed(refs)


@pytest.mark.parametrize("lib", [
    pytest.param(jitorch, id="jitorch"),
    pytest.param(torch, id="torch"),
])
def test_function_saving_its_output_freed_without_backward(lib):
    _, refs = _function_saving_output(lib, backward=False)
    _assert_all_freed(refs)


@pytest.mark.parametrize("lib", [
    pytest.param(jitorch, id="jitorch"),
    pytest.param(torch, id="torch"),
])
def test_saved_output_tensor_object_not_kept_by_its_node(lib):
    # torch keeps the values of a saved output, not the Python tensor: dropping it frees the object at once.
    x = lib.ones(3, requires_grad=True)
    y = x.exp()
    loss = y.sum()
    ref = weakref.ref(y)
    del y
    assert ref() is None
    loss.backward()


@pytest.mark.parametrize("lib", LIBS, ids=["jitorch", "torch"])
def test_graph_without_saved_outputs_freed_after_retain_graph(lib):
    _, refs = _chain_without_saved_outputs(lib, backward=True, retain_graph=True)
    _assert_all_freed(refs)


# -- other graph shapes ------------------------------------------------------------------------------------------------

def _retained_grad_graph(lib):
    x = lib.ones(3, requires_grad=True)
    h = x * 2
    h.retain_grad()
    h.register_hook(lambda g: g * 1)
    loss = (h * h).sum()
    loss.backward()
    return _refs(h, h.grad, loss)


def _create_graph_grad(lib):
    x = lib.ones(3, requires_grad=True)
    y = (x * x * x).sum()
    (g,) = lib.autograd.grad(y, x, create_graph=True)
    (g2,) = lib.autograd.grad(g.sum(), x)
    return _refs(y, g, g2)


def _in_place_through_view(lib):
    x = lib.ones(4, requires_grad=True)
    y = x * 1
    v = y.narrow(0, 1, 2)
    v.mul_(x.narrow(0, 0, 2))
    loss = (y * y).sum()
    refs = _refs(y, v, loss)
    loss.backward()
    return refs


def _in_place_through_view_no_backward(lib):
    x = lib.ones(4, requires_grad=True)
    y = x * 1
    v = y.narrow(0, 1, 2)
    v.mul_(x.narrow(0, 0, 2))
    return _refs(y, v, (y * y).sum())


def _multi_output_node(lib):
    x = lib.arange(6.0).reshape(2, 3).requires_grad_()
    values, indices = x.max(dim=1)
    loss = (values * 2).sum()
    refs = _refs(values, indices, loss)
    loss.backward()
    return refs


def _no_grad_ops(lib):
    x = lib.ones(3, requires_grad=True)
    with lib.no_grad():
        y = (x * 2).exp()
    return _refs(y, y * 3)


@pytest.mark.parametrize("lib", LIBS, ids=["jitorch", "torch"])
@pytest.mark.parametrize("build", [_retained_grad_graph, _create_graph_grad, _in_place_through_view,
                                   _in_place_through_view_no_backward, _multi_output_node, _no_grad_ops])
def test_other_graphs_freed(lib, build):
    _assert_all_freed(build(lib))


def test_many_iterations_do_not_accumulate_objects():
    # A training-loop shape: the number of live tracked objects must not grow with the number of steps.
    w = jitorch.ones(8, requires_grad=True)

    def step():
        loss = ((w * 2).sin() * w + 1).sum()
        loss.backward()
        w.grad = None

    step()
    before = len(gc.get_objects())
    for _ in range(50):
        step()
    assert len(gc.get_objects()) - before < 10
