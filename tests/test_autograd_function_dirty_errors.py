"""``autograd.Function``: ``mark_dirty``, ``mark_non_differentiable``, and the errors of wrong backward results
(count, shape, missing gradients), checked against PyTorch 2.13.
"""
import pytest

from autograd_function_helpers import LIBS, _close, _leaf, _np


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
