"""Custom ``autograd.Function``s, checked against PyTorch 2.13.

Each Function is defined by a factory ``make(lib)`` so the same source builds a jitorch and a torch version; the checks
then run with both and compare values, gradients and errors.
"""
import numpy as np
import pytest

from autograd_function_helpers import (
    LIBS,
    _close,
    _leaf,
    _np,
    make_cube,
    make_exp,
    make_identity,
    make_scale,
    make_two_outputs,
)


# -- save_for_backward, saved_tensors, needs_input_grad ----------------------------------------------------------------

def test_save_for_backward_of_output():
    results = []
    for lib in LIBS:
        x = _leaf(lib, [0.5, 1.0])
        y = make_exp(lib).apply(x)
        y.sum().backward()
        assert type(y.grad_fn).__name__ == "ExpBackward" and not y.is_leaf
        results.append((y, x.grad))
    for a, b in zip(*results):
        _close(a, b)


def test_saved_tensors_returns_inputs_and_none():
    for lib in LIBS:
        class SaveInputAndNone(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                ctx.save_for_backward(a, None)
                return a * 2

            @staticmethod
            def backward(ctx, g):
                a, nothing = ctx.saved_tensors
                SaveInputAndNone.seen = (a, nothing)
                return g * 2

        a = _leaf(lib, [1.0, 2.0])
        y = SaveInputAndNone.apply(a)
        assert y.grad_fn.saved_tensors[0] is a
        y.sum().backward()
        assert SaveInputAndNone.seen[0] is a and SaveInputAndNone.seen[1] is None


def test_saving_an_intermediate_tensor():
    results = []
    for lib in LIBS:
        class TwiceExp(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                t = x.exp()
                ctx.save_for_backward(t)
                return t * 2

            @staticmethod
            def backward(ctx, g):
                (t,) = ctx.saved_tensors
                return g * 2 * t

        x = _leaf(lib, [0.0, 1.0])
        TwiceExp.apply(x).sum().backward()
        results.append(x.grad)
    _close(*results)


def test_saved_tensors_after_backward_raises():
    for lib in LIBS:
        y = make_exp(lib).apply(_leaf(lib, [0.5]))
        y.sum().backward()
        with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
            y.grad_fn.saved_tensors


def test_retain_graph_keeps_saved_tensors():
    results = []
    for lib in LIBS:
        x = _leaf(lib, [0.5, 2.0])
        y = make_cube(lib).apply(x).sum()
        y.backward(retain_graph=True)
        y.backward()
        results.append(x.grad)
    _close(*results)


@pytest.mark.parametrize("modified", ["output", "input"])
def test_modified_saved_tensor_raises(modified):
    for lib in LIBS:
        x = _leaf(lib, [0.5, 1.0])
        h = x * 1
        if modified == "output":
            y = make_exp(lib).apply(h)
            y.add_(1)
        else:
            y = make_cube(lib).apply(h)
            h.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_needs_input_grad_in_forward_and_backward():
    for lib in LIBS:
        class Product(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a, b, c):
                Product.in_forward = ctx.needs_input_grad
                ctx.save_for_backward(a, b, c)
                return a * b * c

            @staticmethod
            def backward(ctx, g):
                a, b, c = ctx.saved_tensors
                Product.in_backward = ctx.needs_input_grad
                return tuple(g * x * y if need else None
                             for need, (x, y) in zip(ctx.needs_input_grad, ((b, c), (a, c), (a, b))))

        a, b, c = _leaf(lib, [1.0]), lib.tensor([2.0]), _leaf(lib, [3.0])
        Product.apply(a, b, c).sum().backward()
        assert Product.in_forward == Product.in_backward == (True, False, True)
        assert _np(a.grad).tolist() == [6.0] and _np(c.grad).tolist() == [2.0] and b.grad is None


def test_ctx_attributes_visible_on_grad_fn():
    for lib in LIBS:
        x = _leaf(lib, [0.5, 1.0])
        y = make_scale(lib).apply(x, 3.0, True)
        assert y.grad_fn.k == -3.0
        assert y.grad_fn.needs_input_grad == (True, False, False)


# -- non-tensor arguments, multiple outputs, returning inputs ----------------------------------------------------------

def test_non_tensor_arguments():
    for lib in LIBS:
        x = _leaf(lib, [0.5, 1.0])
        make_scale(lib).apply(x, 3.0, True).sum().backward()
        assert _np(x.grad).tolist() == [-3.0, -3.0]


def test_next_functions_skip_non_tensor_arguments():
    for lib in LIBS:
        y = make_scale(lib).apply(_leaf(lib, [1.0]), 3.0)
        assert len(y.grad_fn.next_functions) == 1


def test_non_tensor_output_passes_through():
    for lib in LIBS:
        class WithCount(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return a * 2, 5

            @staticmethod
            def backward(ctx, g, g_count):
                return g * 2

        a = _leaf(lib, [1.0, 1.0])
        y, count = WithCount.apply(a)
        y.sum().backward()
        assert count == 5 and _np(a.grad).tolist() == [2.0, 2.0]


def test_multiple_outputs_share_one_node():
    results = []
    for lib in LIBS:
        fn = make_two_outputs(lib)
        a, b = _leaf(lib, [0.2, 0.7]), _leaf(lib, [1.2, -0.3])
        y1, y2 = fn.apply(a, b)
        assert y1.grad_fn is y2.grad_fn
        (y1 * y2).sum().backward()
        results.append((a.grad, b.grad))
    for x, y in zip(*results):
        _close(x, y)


def test_unused_output_gets_materialized_zeros():
    seen = []
    for lib in LIBS:
        fn = make_two_outputs(lib)
        a, b = _leaf(lib, [0.2, 0.7]), _leaf(lib, [1.2, -0.3])
        y1, _ = fn.apply(a, b)
        y1.sum().backward()
        seen.append(fn.seen)
    for x, y in zip(*seen):
        np.testing.assert_array_equal(x, y)
    assert seen[0][1].tolist() == [0.0, 0.0]


def test_set_materialize_grads_false_passes_none():
    for lib in LIBS:
        class NoMaterialize(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.set_materialize_grads(False)
                return x * 2, x * 3

            @staticmethod
            def backward(ctx, g1, g2):
                NoMaterialize.seen = (g1 is None, g2 is None)
                total = 0
                if g1 is not None:
                    total = total + g1 * 2
                if g2 is not None:
                    total = total + g2 * 3
                return total

        x = _leaf(lib, [1.0, 2.0])
        _, y2 = NoMaterialize.apply(x)
        y2.sum().backward()
        assert NoMaterialize.seen == (True, False)
        assert _np(x.grad).tolist() == [3.0, 3.0]


def test_returning_an_input_gives_it_new_history():
    for lib in LIBS:
        x = _leaf(lib, [1.0, 2.0])
        y = make_identity(lib).apply(x)
        assert y is not x and not y.is_leaf and type(y.grad_fn).__name__ == "IdentityBackward"
        assert y._base is x
        y.sum().backward()
        assert _np(x.grad).tolist() == [2.0, 2.0]


def test_returning_an_input_among_outputs():
    for lib in LIBS:
        class PassAndDouble(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                return a, b * 2

            @staticmethod
            def backward(ctx, ga, gb):
                return ga * 3, gb * 2

        a, b = _leaf(lib, [1.0, 1.0]), _leaf(lib, [1.0, 1.0])
        y, z = PassAndDouble.apply(a, b)
        (y + z).sum().backward()
        assert y is not a and not y.is_leaf
        assert _np(a.grad).tolist() == [3.0, 3.0] and _np(b.grad).tolist() == [2.0, 2.0]


def test_apply_without_inputs_requiring_grad_records_nothing():
    for lib in LIBS:
        y = make_cube(lib).apply(lib.ones(2))
        assert not y.requires_grad and y.grad_fn is None
        with lib.no_grad():
            y = make_cube(lib).apply(_leaf(lib, [1.0]))
        assert not y.requires_grad and y.grad_fn is None


def test_forward_runs_without_grad_mode():
    for lib in LIBS:
        class Probe(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                Probe.enabled = lib.is_grad_enabled()
                return a * 2

            @staticmethod
            def backward(ctx, g):
                return g

        Probe.apply(_leaf(lib, [1.0]))
        assert Probe.enabled is False
