"""In-place ops on leaves (refused, or allowed under ``no_grad``) and on non-leaves and their views: the gradients
through ``copy_``, slices, diagonals, ``as_strided`` and sibling views, checked against PyTorch 2.13.
"""
from views_inplace_helpers import _raises_both, _same


# -- in-place on leaves ------------------------------------------------------------------------------------------------

def test_in_place_on_leaf_requiring_grad_raises():
    _raises_both(lambda lib: lib.ones(3, requires_grad=True).add_(1),
                 "a leaf Variable that requires grad is being used in an in-place operation")


def test_in_place_on_view_of_leaf_raises():
    _raises_both(lambda lib: lib.ones(3, requires_grad=True).narrow(0, 0, 1).add_(1),
                 "a view of a leaf Variable that requires grad is being used in an in-place operation")


def test_in_place_on_leaf_under_no_grad_is_allowed():
    def fn(lib):
        x = lib.ones(3, requires_grad=True)
        with lib.no_grad():
            x.narrow(0, 0, 1).add_(1)
            x.mul_(2)
        return x, x.is_leaf, x.requires_grad, x._version

    _same(fn)


# -- in-place on non-leaves: gradients ---------------------------------------------------------------------------------

def test_in_place_chain_on_non_leaf():
    def fn(lib):
        x = lib.tensor([0.1, 0.2], requires_grad=True)
        y = x * 1
        y.mul_(2)
        y.add_(1)
        y.exp_()
        y.sum().backward()
        return x.grad, type(y.grad_fn).__name__, y.is_leaf

    _same(fn)


def test_in_place_with_broadcast_operand_requiring_grad():
    def fn(lib):
        x = lib.ones(2, 3, requires_grad=True)
        b = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x * 1
        y.mul_(b)
        y.add_(b)
        (y * y).sum().backward()
        return x.grad, b.grad

    _same(fn)


def test_in_place_on_plain_tensor_with_grad_operand():
    def fn(lib):
        a = lib.ones(2)
        w = lib.tensor([2.0, 3.0], requires_grad=True)
        a.mul_(w)  # a had no history: it now requires grad through w
        a.sum().backward()
        return a.is_leaf, a.requires_grad, w.grad

    _same(fn)


def test_in_place_on_non_leaf_under_no_grad_keeps_history():
    def fn(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x * 1
        with lib.no_grad():
            y.add_(1)
        (y * 3).sum().backward()
        return x.grad, y, y.requires_grad

    _same(fn)


def test_in_place_on_slice_of_clone():
    def fn(lib):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x.clone()
        y.narrow(0, 0, 2).mul_(3)
        (y * y).sum().backward()
        return x.grad, type(y.grad_fn).__name__

    _same(fn)


def test_copy_into_buffer_gives_grads_to_source():
    def fn(lib):
        w = lib.tensor([1.5], requires_grad=True)
        buf = lib.zeros(3)
        buf.narrow(0, 0, 1).copy_(w * 2)
        (buf * lib.tensor([3.0, 4.0, 5.0])).sum().backward()
        return w.grad, buf.requires_grad, type(buf.grad_fn).__name__, buf

    _same(fn)


def test_copy_into_buffer_through_diagonal_and_transpose():
    def fn(lib):
        w = lib.tensor([1.5, 2.0], requires_grad=True)
        buf = lib.zeros(2, 3)
        buf.diagonal().copy_(w.exp())
        buf.t().narrow(0, 2, 1).add_(w.narrow(0, 0, 1) * 10)
        (buf * buf).sum().backward()
        return w.grad, buf

    _same(fn)


def test_copy_into_view_of_non_leaf_cuts_overwritten_gradient():
    def fn(lib):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        w = lib.tensor([5.0], requires_grad=True)
        y = x * 2
        y.narrow(0, 1, 1).copy_(w)
        (y * y).sum().backward()
        return x.grad, w.grad

    _same(fn)


def test_copy_broadcasts_source_and_casts_gradient():
    def fn(lib):
        w = lib.tensor([2.0], dtype=lib.float64, requires_grad=True)
        buf = lib.zeros(3)
        buf.copy_(w)
        (buf * lib.tensor([1.0, 2.0, 3.0])).sum().backward()
        return w.grad, w.grad.dtype == lib.float64, buf.dtype == lib.float32

    _same(fn)


def test_in_place_on_diagonal_of_non_leaf():
    def fn(lib):
        x = lib.ones(3, 3, requires_grad=True)
        y = x * 1
        y.diagonal().mul_(lib.tensor([1.0, 2.0, 3.0]))
        (y * y).sum().backward()
        return x.grad

    _same(fn)


def test_in_place_view_then_use_the_view():
    def fn(lib):
        x = lib.arange(4.0, requires_grad=True)
        y = x * 1
        v = y.narrow(0, 1, 2)
        v.mul_(3)
        (v * v).sum().backward()
        return x.grad

    _same(fn)


def test_double_backward_through_copy_slices():
    def fn(lib):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x.clone()
        y.narrow(0, 0, 2).mul_(x.narrow(0, 1, 2))
        (g,) = lib.autograd.grad((y ** 2).sum(), x, create_graph=True)
        (g2,) = lib.autograd.grad(g.sum(), x)
        return g, g2

    _same(fn)


def test_in_place_through_as_strided_gradient():
    def fn(lib):
        x = lib.arange(6.0, requires_grad=True)
        y = x * 1
        y.as_strided((2, 2), (2, 1), 1).mul_(10)
        (y * y).sum().backward()
        return x.grad, y

    _same(fn)


# Views taken BEFORE an in-place op on their base (or on a sibling view) must see the new history. torch regenerates a
# stale view's grad_fn when its version no longer matches; jitorch keeps the grad_fn from the view's creation, so the
# gradient silently misses the in-place op.


def test_view_created_before_in_place_on_base_sees_new_history():
    def fn(lib):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x * 1
        v = y.narrow(0, 0, 2)
        y.mul_(2)
        (v * 1).sum().backward()
        return x.grad

    _same(fn)


def test_sibling_view_sees_in_place_through_other_view():
    def fn(lib):
        x = lib.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
        y = x * 1
        whole = y.view(2, 2)
        y.narrow(0, 1, 2).mul_(x.narrow(0, 0, 2))
        (whole * whole).sum().backward()
        return x.grad

    _same(fn)


def test_in_place_through_transpose_of_a_view():
    # ``y`` is itself a view (of ``x * 1``); writing through ``y.t()`` rebases that hidden base, not ``y``.
    def fn(lib):
        x = lib.arange(6.0, requires_grad=True)
        y = (x * 1).view(2, 3)
        y.t().mul_(lib.tensor([1.0, 2.0]))
        (y * y).sum().backward()
        return x.grad

    _same(fn)
