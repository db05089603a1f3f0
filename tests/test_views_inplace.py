"""Views, in-place ops and version counters, checked against PyTorch 2.13.

Each check is written once as ``fn(lib)`` and run with ``lib = jitorch`` and ``lib = torch``; the results (tensors
turned into float64 arrays, compared with a float32 tolerance) must be equal, or both runs must raise the same kind
of error.
"""
import pytest

from views_inplace_helpers import _raises_both, _same


MODIFIED = "one of the variables needed for gradient computation has been modified by an inplace operation"


# -- writes through views reach the base -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["view", "transpose", "t", "narrow", "diagonal", "as_strided", "permute", "select",
                                  "squeeze_unsqueeze", "chain"])
def test_write_through_view_reaches_base(name):
    make = {
        "view": lambda b: b.view(12).narrow(0, 1, 2),
        "transpose": lambda b: b.transpose(0, 1).narrow(0, 3, 1),
        "t": lambda b: b.t(),
        "narrow": lambda b: b.narrow(1, 1, 2),
        "diagonal": lambda b: b.diagonal(),
        "as_strided": lambda b: b.as_strided((2, 2), (5, 1), 1),
        "permute": lambda b: b.permute(1, 0).narrow(1, 2, 1),
        "select": lambda b: b.select(1, 2),
        "squeeze_unsqueeze": lambda b: b.unsqueeze(0).narrow(1, 1, 1).squeeze(0),
        "chain": lambda b: b.view(2, 6).t().narrow(0, 2, 3).diagonal(),
    }[name]

    def fn(lib):
        base = lib.arange(12.0).reshape(3, 4)
        view = make(base)
        view.mul_(-1)
        view.add_(100)
        return base, view, view._base is base

    _same(fn)


def test_unfold_view_writes_reach_base():
    def fn(lib):
        base = lib.arange(6.0)
        windows = base.unfold(0, 2, 2)
        windows.add_(10)
        return base, windows.stride(), windows._base is base

    _same(fn)


def test_expand_reads_the_base():
    def fn(lib):
        base = lib.tensor([1.0, 2.0, 3.0])
        wide = base.expand(2, 3)
        base.add_(1)
        return wide, wide.stride(), wide._base is base

    _same(fn)


def test_in_place_on_expanded_view_raises():
    # Several elements of the expanded view share one memory location.
    _raises_both(lambda lib: lib.zeros(3).expand(2, 3).add_(1), "more than one element|read-only")


@pytest.mark.parametrize("name", ["transpose", "narrow_inner", "narrow_outer", "diagonal", "expand", "unsqueeze",
                                  "select", "flatten", "as_strided", "chain"])
def test_view_geometry(name):
    make = {
        "transpose": lambda b: b.transpose(0, 2),
        "narrow_inner": lambda b: b.narrow(2, 1, 2),
        "narrow_outer": lambda b: b.narrow(0, 1, 1).view(3, 4),
        "diagonal": lambda b: b.diagonal(0, 1, 2),
        "expand": lambda b: b.expand(2, 2, 3, 4),
        "unsqueeze": lambda b: b.unsqueeze(1),
        "select": lambda b: b.permute(1, 0, 2).select(1, 1),
        "flatten": lambda b: b.flatten(),
        "as_strided": lambda b: b.as_strided((2, 3), (1, 5), 3),
        "chain": lambda b: b.narrow(1, 1, 2).transpose(0, 1).narrow(2, 1, 3).diagonal(0, 1, 2),
    }[name]

    def fn(lib):
        base = lib.arange(24.0).reshape(2, 3, 4)
        view = make(base)
        return (view.shape, view.stride(), view.storage_offset(), view.is_contiguous(),
                (view.data_ptr() - base.data_ptr()) // base.element_size(), view._base is base, view)

    _same(fn)


def test_data_ptr_is_shared_by_views_and_detach():
    def fn(lib):
        base = lib.zeros(2, 3)
        return (base.data_ptr() == base.view(6).data_ptr() == base.detach().data_ptr() == base.t().data_ptr(),
                base.narrow(1, 1, 1).data_ptr() - base.data_ptr(), base.clone().data_ptr() == base.data_ptr())

    _same(fn)


def test_base_of_non_views_and_of_views_of_views():
    def fn(lib):
        base = lib.arange(12.0)
        view = base.view(3, 4).narrow(0, 1, 2).t()
        return base._base is None, view._base is base, view.storage_offset(), base.clone()._base is None

    _same(fn)


# -- version counters -------------------------------------------------------------------------------------------------

def test_version_counter_is_shared_by_views_and_detach():
    def fn(lib):
        base = lib.zeros(4)
        view = base.narrow(0, 1, 2)
        alias = base.detach()
        versions = [(base._version, view._version, alias._version)]
        view.add_(1)
        versions.append((base._version, view._version, alias._version))
        alias.mul_(2)
        versions.append((base._version, view._version, alias._version))
        base.zero_()
        versions.append((base._version, view._version, alias._version))
        base.view(2, 2).t().fill_(3)
        versions.append((base._version, view._version, alias._version))
        return versions

    _same(fn)


def test_out_of_place_ops_do_not_bump_version():
    def fn(lib):
        x = lib.ones(3)
        _ = x + 1, x * 2, x.view(3), x.clone(), x.t()
        return x._version

    _same(fn)


def test_data_alias_has_its_own_version_counter():
    def fn(lib):
        x = lib.ones(3)
        x.data.add_(1)
        return x._version, x

    _same(fn)


# -- saved tensors modified in place -----------------------------------------------------------------------------------

def test_modified_saved_output_raises():
    def fn(lib):
        x = lib.ones(3, requires_grad=True)
        y = x.exp()  # ExpBackward0 saves its output
        y.add_(1)
        y.sum().backward()

    _raises_both(fn, MODIFIED)


def test_modified_saved_input_raises():
    def fn(lib):
        a = lib.ones(3, requires_grad=True) * 1
        b = lib.ones(3, requires_grad=True)
        y = a * b  # MulBackward0 saves both inputs
        a.add_(1)
        y.sum().backward()

    _raises_both(fn, MODIFIED)


@pytest.mark.parametrize("how", ["plain", "through_view", "through_detach", "base_of_saved_view", "under_no_grad"])
def test_modified_saved_tensor_raises(how):
    def fn(lib):
        a = lib.ones(4)
        b = lib.ones(2, requires_grad=True)
        saved = a.narrow(0, 0, 2) if how == "base_of_saved_view" else a
        y = saved * (b.sum() if how != "base_of_saved_view" else b)
        if how == "plain":
            a.add_(1)
        elif how == "through_view":
            a.narrow(0, 3, 1).add_(1)  # even elements the op did not read
        elif how == "through_detach":
            a.detach().mul_(2)
        elif how == "base_of_saved_view":
            a.add_(1)
        else:
            with lib.no_grad():
                a.add_(1)
        y.sum().backward()

    _raises_both(fn, MODIFIED)


def test_modifying_unsaved_input_is_fine():
    def fn(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x * 1
        z = y + 2  # AddBackward0 saves nothing
        y.add_(1)
        z.sum().backward()
        return x.grad

    _same(fn)


def test_modifying_through_data_is_not_detected():
    def fn(lib):
        a = lib.ones(3)
        b = lib.ones(3, requires_grad=True)
        y = a * b
        a.data.add_(1)
        y.sum().backward()
        return b.grad

    _same(fn)


def test_self_multiply_in_place_saves_overwritten_operand():
    # ``y.mul_(y)``: the op saves ``other`` (which is y) and then overwrites it, so torch refuses the backward.
    def fn(lib):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x * 2
        y.mul_(y)
        y.sum().backward()

    _raises_both(fn, MODIFIED)


def test_in_place_unary_on_saved_output_raises():
    def fn(lib):
        x = lib.tensor([0.1, 0.2], requires_grad=True)
        y = x * 1
        y.exp_()  # saves its result ...
        y.sigmoid_()  # ... which this overwrites
        y.sum().backward()

    _raises_both(fn, MODIFIED)
