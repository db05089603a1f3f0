"""Grad modes (``no_grad``, ``enable_grad``, ``set_grad_enabled``, inference mode) and a tensor's leaf state
(``detach``, ``requires_grad``, ``.data``), checked against PyTorch 2.13.
"""
import pytest
import torch

import jitorch

from autograd_helpers import _np


# torch warns where these tests deliberately do what it warns about (non-leaf .grad, backward with create_graph).
pytestmark = [
    pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning"),
    pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning"),
]


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


@pytest.mark.parametrize("name", ["inference_mode", "enable_grad", "no_grad"])
def test_grad_mode_switches_decorate_without_parentheses_as_torch(name):
    for lib in (torch, jitorch):
        @getattr(lib, name)
        def f(x):
            return lib.is_grad_enabled(), lib.is_inference_mode_enabled(), (x * 2).requires_grad

        with lib.set_grad_enabled(name != "enable_grad"):
            got = f(lib.ones(2, requires_grad=True))
        if lib is torch:
            want = got
        else:
            assert got == want and f.__name__ == "f"
