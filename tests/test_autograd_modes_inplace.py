"""Grad modes meeting in-place writes, against PyTorch 2.13: inference tensors refused where autograd would need
them, views made in no_grad mode refused as targets of tracked in-place writes, ``detach_`` refused on views."""
import pytest
import torch

import jitorch
from helpers import same_error


def _inference_ones(lib):
    with lib.inference_mode():
        return lib.ones(2)


def test_inference_tensor_saved_for_backward_is_refused():
    same_error(lambda lib: lib.tensor([1.0, 2.0], requires_grad=True) * _inference_ones(lib))


def test_inference_tensor_not_saved_is_fine():
    for lib in (torch, jitorch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        (x + _inference_ones(lib)).sum().backward()
        assert x.grad.tolist() == [1.0, 1.0]


def test_inference_tensor_saved_by_a_function_is_refused():
    def fn(lib):
        class F(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, a):
                ctx.save_for_backward(a)
                return x * a

            @staticmethod
            def backward(ctx, g):
                return g, None
        F.apply(lib.tensor([1.0, 2.0], requires_grad=True), _inference_ones(lib))
    for lib in (torch, jitorch):
        with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
            fn(lib)


@pytest.mark.parametrize("write", ["add_", "setitem", "view"])
def test_inplace_on_inference_tensor_outside_inference_mode_is_refused(write):
    def fn(lib):
        a = _inference_ones(lib)
        if write == "add_":
            a.add_(1)
        elif write == "setitem":
            a[0] = 3.0
        else:
            a[:1].mul_(2)
    same_error(fn)


def test_inference_tensor_inplace_inside_inference_mode_and_requires_grad():
    for lib in (torch, jitorch):
        a = _inference_ones(lib)
        with lib.inference_mode():
            a.add_(1)
        assert a.tolist() == [2.0, 2.0]
    same_error(lambda lib: _inference_ones(lib).requires_grad_())


def _nograd_view_write(case):
    def fn(lib):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        w = lib.tensor([1.0, 2.0], requires_grad=True)
        base = x * 1 if case != "plain_base" else lib.tensor([1.0, 2.0, 3.0])
        with lib.no_grad():
            v = base[:2]
        if case == "view_of_view":
            v[:1].mul_(2)
        elif case == "plain_base":
            v.mul_(w)
        elif case == "not_differentiable":
            v.eq_(2)
        else:
            v.mul_(2)
    return fn


@pytest.mark.parametrize("case", ["view", "view_of_view", "plain_base", "not_differentiable"])
def test_view_made_in_no_grad_written_with_grad_mode_is_refused(case):
    same_error(_nograd_view_write(case))


def test_view_made_and_written_in_no_grad_is_fine():
    for lib in (torch, jitorch):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x * 1
        with lib.no_grad():
            y[:2].mul_(2)
        plain = lib.zeros(3)
        with lib.no_grad():
            v = plain[:2]
        v.add_(1)  # nothing requires grad: not tracked, allowed
        y.sum().backward()
        assert x.grad.tolist() == [1.0, 1.0, 1.0] and plain.tolist() == [1.0, 1.0, 0.0]


def test_detach_inplace_is_refused_on_any_view():
    same_error(lambda lib: lib.tensor([1.0, 2.0])[:1].detach_())
