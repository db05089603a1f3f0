"""Custom ``autograd.Function``s, checked against PyTorch 2.13.

Each Function is defined by a factory ``make(lib)`` so the same source builds a jitorch and a torch version; the checks
then run with both and compare values, gradients and errors.
"""
import numpy as np
import pytest
import torch

import jitorch

LIBS = (jitorch, torch)


def _np(t):
    return None if t is None else np.asarray(t.detach().tolist(), dtype=np.float64)


def _close(a, b):
    np.testing.assert_allclose(_np(a), _np(b), rtol=1e-5, atol=1e-7)


def _leaf(lib, values, dtype=None):
    return lib.tensor(values, dtype=dtype or lib.float32, requires_grad=True)


# -- Function factories (one source for both libraries) ------------------------------------------------------------

def make_exp(lib):
    class Exp(lib.autograd.Function):
        """Saves its own output, like ExpBackward0."""

        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y

    return Exp


def make_cube(lib):
    class Cube(lib.autograd.Function):
        """Its backward is made of differentiable ops, so it supports double backward."""

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * g

    return Cube


def make_scale(lib):
    class Scale(lib.autograd.Function):
        """Non-tensor arguments are kept on ctx; their gradient slots are None."""

        @staticmethod
        def forward(ctx, x, k, negate=False):
            ctx.k = -k if negate else k
            return x * ctx.k

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k, None, None

    return Scale


def make_two_outputs(lib):
    class TwoOutputs(lib.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b.sin(), a + b

        @staticmethod
        def backward(ctx, g1, g2):
            a, b = ctx.saved_tensors
            TwoOutputs.seen = (_np(g1), _np(g2))
            return g1 * b.sin() + g2, g1 * a * b.cos() + g2

    return TwoOutputs


def make_add_one_in_place(lib):
    class AddOneInPlace(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    return AddOneInPlace


def make_identity(lib):
    class Identity(lib.autograd.Function):
        """Returns its input unchanged: the output still gets this Function's history."""

        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 2

    return Identity


def make_max_with_index(lib):
    class MaxWithIndex(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            idx = x.argmax()
            ctx.mark_non_differentiable(idx)
            ctx.save_for_backward(x, idx)
            return x.max(), idx

        @staticmethod
        def backward(ctx, g, g_idx):
            x, idx = ctx.saved_tensors
            onehot = lib.zeros_like(x)
            onehot.narrow(0, int(idx), 1).fill_(1)
            return onehot * g

    return MaxWithIndex


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


# -- mark_dirty, mark_non_differentiable -------------------------------------------------------------------------------

def test_mark_dirty_on_non_leaf():
    results = []
    for lib in LIBS:
        x = _leaf(lib, [0.5, 1.0])
        y = x * 1
        version = y._version
        z = make_add_one_in_place(lib).apply(y)
        assert z is y and y._version > version
        assert type(y.grad_fn).__name__ == "AddOneInPlaceBackward"
        (z * z).sum().backward()
        results.append((y, x.grad))
    for a, b in zip(*results):
        _close(a, b)


def test_mark_dirty_on_leaf_requiring_grad_raises():
    for lib in LIBS:
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad has been used in an in-place"):
            make_add_one_in_place(lib).apply(_leaf(lib, [1.0]))


def test_mark_dirty_on_saved_tensor_raises_at_backward():
    for lib in LIBS:
        x = _leaf(lib, [0.5, 1.0])
        y = x * 1
        w = y * y
        make_add_one_in_place(lib).apply(y)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            w.sum().backward()


def test_mark_dirty_on_view_rebases_base():
    results = []
    for lib in LIBS:
        class DoubleInPlace(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                a.mul_(2)
                ctx.mark_dirty(a)
                return a

            @staticmethod
            def backward(ctx, g):
                return g * 2

        x = _leaf(lib, [1.0, 1.0, 1.0, 1.0])
        y = x * 1
        DoubleInPlace.apply(y.narrow(0, 0, 2))
        (y * 1).sum().backward()
        results.append((y, x.grad))
    for a, b in zip(*results):
        _close(a, b)


def test_mark_non_differentiable():
    results = []
    for lib in LIBS:
        x = _leaf(lib, [0.5, 3.0, 1.0])
        top, idx = make_max_with_index(lib).apply(x)
        assert top.requires_grad and not idx.requires_grad and idx.grad_fn is None
        (top * 2).backward()
        results.append(x.grad)
    _close(*results)


# -- errors ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("returned", ["too_few", "too_many"])
def test_wrong_number_of_gradients_raises(returned):
    for lib in LIBS:
        class Wrong(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                return a * b

            @staticmethod
            def backward(ctx, g):
                return (g,) if returned == "too_few" else (g, g, g)

        a, b = _leaf(lib, [1.0]), _leaf(lib, [2.0])
        with pytest.raises(RuntimeError, match="returned an incorrect number of gradients"):
            Wrong.apply(a, b).sum().backward()


def test_extra_none_gradients_are_accepted():
    for lib in LIBS:
        class ExtraNone(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return a * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2, None

        a = _leaf(lib, [1.0])
        ExtraNone.apply(a).sum().backward()
        assert _np(a.grad).tolist() == [2.0]


def test_gradient_of_wrong_shape_raises():
    # The messages differ: torch names the invalid gradient, jitorch reports the failed reduction.
    for lib in LIBS:
        class BadShape(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return a.sum()

            @staticmethod
            def backward(ctx, g):
                return lib.ones(3)

        with pytest.raises(RuntimeError):
            BadShape.apply(_leaf(lib, [1.0, 2.0])).backward()


def test_backward_returning_none_for_input_requiring_grad():
    for lib in LIBS:
        class FirstOnly(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                return a * b

            @staticmethod
            def backward(ctx, g):
                return g, None

        a, b = _leaf(lib, [1.0]), _leaf(lib, [2.0])
        FirstOnly.apply(a, b).sum().backward()
        assert _np(a.grad).tolist() == [1.0] and b.grad is None


def test_vjp_instead_of_backward():
    for lib in LIBS:
        class Double(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return a * 2

            @staticmethod
            def vjp(ctx, g):
                return g * 2

        a = _leaf(lib, [1.0, 1.0])
        Double.apply(a).sum().backward()
        assert _np(a.grad).tolist() == [2.0, 2.0]


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
