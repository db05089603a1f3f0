"""``autograd.Function``: ``once_differentiable``, the ``setup_context`` style, higher-order gradients, node hooks,
``gradcheck``, and history regenerated for views, checked against PyTorch 2.13.
"""
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


def make_sin_setup_context(lib):
    class Sin(lib.autograd.Function):
        """The newer style: ``forward`` without ctx, plus ``setup_context``."""

        @staticmethod
        def forward(x, k):
            return x.sin() * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, k = inputs
            ctx.save_for_backward(x)
            ctx.k = k

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x.cos() * ctx.k, None

    return Sin


# -- once_differentiable, setup_context, higher order ------------------------------------------------------------------

def test_once_differentiable_backward_has_no_graph():
    for lib in LIBS:
        class Square(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x ** 2

            @staticmethod
            @lib.autograd.function.once_differentiable
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                Square.enabled = lib.is_grad_enabled()
                return 2 * x * g

        x = _leaf(lib, [1.0, 2.0])
        (g,) = lib.autograd.grad(Square.apply(x).sum(), x, create_graph=True)
        assert _np(g).tolist() == [2.0, 4.0]
        assert Square.enabled is False and not g.requires_grad


def test_setup_context_style():
    results = []
    for lib in LIBS:
        x = _leaf(lib, [1.0, 2.0])
        make_sin_setup_context(lib).apply(x, 2.0).sum().backward()
        results.append(x.grad)
    _close(*results)


@pytest.mark.parametrize("factory", [make_cube, make_exp])
def test_double_and_triple_backward_through_function(factory):
    results = []
    for lib in LIBS:
        x = _leaf(lib, [0.5, 2.0], dtype=lib.float64)
        y = factory(lib).apply(x).sum()
        (g1,) = lib.autograd.grad(y, x, create_graph=True)
        (g2,) = lib.autograd.grad(g1.sum(), x, create_graph=True)
        (g3,) = lib.autograd.grad(g2.sum(), x)
        results.append((g1, g2, g3))
    for a, b in zip(*results):
        _close(a, b)


def test_hooks_on_function_node():
    for lib in LIBS:
        a = _leaf(lib, [1.0, 1.0])
        y = make_scale(lib).apply(a, 2.0)
        y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0] * 10,) + tuple(grad_inputs[1:]))
        y.sum().backward()
        assert _np(a.grad).tolist() == [20.0, 20.0]


@pytest.mark.parametrize("factory", [make_cube, make_exp, make_two_outputs, make_sin_setup_context])
def test_gradcheck_and_gradgradcheck(factory):
    for lib in LIBS:
        fn = factory(lib)
        a = _leaf(lib, [0.2, 0.7], dtype=lib.float64)
        b = _leaf(lib, [1.2, -0.3], dtype=lib.float64)
        inputs = (a, b) if factory is make_two_outputs else (a, 1.5) if factory is make_sin_setup_context else (a,)
        assert lib.autograd.gradcheck(fn.apply, inputs)
        assert lib.autograd.gradgradcheck(fn.apply, inputs)


def test_gradcheck_detects_a_wrong_backward():
    for lib in LIBS:
        class WrongSquare(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x ** 2

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return 3 * x * g

        x = _leaf(lib, [0.5, 1.0], dtype=lib.float64)
        assert lib.autograd.gradcheck(WrongSquare.apply, (x,), raise_exception=False) is False
        with pytest.raises(RuntimeError, match="Jacobian mismatch"):
            lib.autograd.gradcheck(WrongSquare.apply, (x,))


def test_apply_regenerates_the_history_of_a_view_whose_base_was_written():
    grads = []
    for lib in LIBS:
        x = lib.ones(3, requires_grad=True)
        y = x * 1
        v = y[:2]
        y.mul_(3)  # v's history must include this write
        make_identity(lib).apply(v).sum().backward()  # its backward doubles
        grads.append(x.grad.tolist())
    assert grads[0] == grads[1] == [6.0, 6.0, 0.0]


def test_derivatives_of_a_polynomial_stay_in_the_graph_as_torch_until_they_vanish():
    # ATen's pow backward is y * x ** (y - 1) for y == 2 too: d2/dx2 of x ** 2 (the constant 2) still requires grad,
    # so a third derivative is zeros, not an error; x ** 3's fourth derivative leaves the graph as torch's does.
    import torch

    import jitorch

    for power, orders in ((2, 3), (3, 4)):
        flags = []
        for lib in (torch, jitorch):
            x = lib.tensor([1.0, -2.0], requires_grad=True)
            y, seen = (x ** power).sum(), []
            for order in range(orders):
                (g,) = lib.autograd.grad(y, x, create_graph=True)
                seen.append((g.requires_grad, g.tolist()))
                if not g.requires_grad:
                    break
                y = g.sum()
            flags.append(seen)
        assert flags[1] == flags[0]
