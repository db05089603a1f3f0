"""``grad_fn._saved_<name>``, the saved-tensor introspection of the autograd-mechanics docs (and torchviz's
``show_saved``), against torch: the names jitorch's nodes offer exist in torch with equal values, ``is`` identity
for saved inputs, a copy for saved results, and torch's errors once freed or modified in place."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

CASES = {
    "pow_scalar": lambda lib, x, w: x.pow(2),
    "pow_tensor": lambda lib, x, w: x.abs().pow(w),
    "exp": lambda lib, x, w: x.exp(),
    "mul": lambda lib, x, w: x * w,
    "div": lambda lib, x, w: x / w,
    "sin": lambda lib, x, w: x.sin(),
    "sigmoid": lambda lib, x, w: x.sigmoid(),
    "tanh": lambda lib, x, w: x.tanh(),
    "mm": lambda lib, x, w: lib.mm(x.view(5, 1), w.view(1, 5)),
    "dot": lambda lib, x, w: lib.dot(x, w),
    "log": lambda lib, x, w: x.abs().log(),
}


def _leaves(lib):
    rng = np.random.default_rng(0)
    x = lib.from_numpy(rng.standard_normal(5).astype(np.float32)).requires_grad_()
    w = lib.from_numpy(rng.standard_normal(5).astype(np.float32)).requires_grad_()
    return x, w


def _value(v):
    return v.detach().numpy() if hasattr(v, "detach") else v


@pytest.mark.parametrize("case", sorted(CASES))
def test_saved_names_exist_in_torch_with_equal_values(case):
    jx, jw = _leaves(jitorch)
    tx, tw = _leaves(torch)
    jy, ty = CASES[case](jitorch, jx, jw), CASES[case](torch, tx, tw)
    jnames = [a for a in dir(jy.grad_fn) if a.startswith("_saved_")]
    tnames = set(a for a in dir(ty.grad_fn) if a.startswith("_saved_"))
    assert jnames, case
    assert set(jnames) <= tnames, (case, jnames, tnames)
    for name in jnames:
        np.testing.assert_allclose(_value(getattr(jy.grad_fn, name)), _value(getattr(ty.grad_fn, name)), rtol=1e-6)


@pytest.mark.parametrize("lib", [jitorch, torch], ids=["jitorch", "torch"])
def test_the_docs_example(lib):
    x = lib.randn(5, requires_grad=True)
    y = x.pow(2)
    assert x.equal(y.grad_fn._saved_self) and x is y.grad_fn._saved_self
    assert y.grad_fn._saved_exponent == 2
    y = x.exp()
    assert y.equal(y.grad_fn._saved_result) and y is not y.grad_fn._saved_result
    assert not hasattr(y.grad_fn, "_saved_nonexistent")
    y.sum().backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.grad_fn._saved_result


@pytest.mark.parametrize("lib", [jitorch, torch], ids=["jitorch", "torch"])
def test_saved_input_modified_in_place_raises(lib):
    x = lib.randn(5, requires_grad=True)
    a = x * 1
    y = a.sin()
    a.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.grad_fn._saved_self
