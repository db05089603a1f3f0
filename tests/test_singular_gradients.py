"""Gradients at the points where an op's textbook derivative is 0 * inf or 0 / 0 and PyTorch masks it to zero.

Each case runs a first and a second derivative in jitorch and in torch on a grid that includes those points, with
a non-uniform upstream gradient, and compares them NaN-aware (a nan left where torch has 0 poisons a whole backward).
"""
import itertools

import numpy as np
import pytest
import torch

import jitorch

# Bases and exponents, crossed: 0 and -0 with exponents 0, positive, negative and fractional.
_X, _Y = np.array(list(itertools.product([0.0, -0.0, 1.0, -2.0, 2.5], [0.0, 1.0, 2.0, -1.0, 0.5, 3.0]))).T

CASES = {
    "x ** y": lambda L, x, y: x ** y,
    "x ** 0-d y": lambda L, x, y: x ** y[0],
    "x ** 0.0": lambda L, x, y: x ** 0.0,
    "x ** 0": lambda L, x, y: x ** 0,
    "x ** 2.5": lambda L, x, y: x ** 2.5,
    "x ** -1": lambda L, x, y: x ** -1,
    "pow(x, y) broadcast": lambda L, x, y: L.pow(x.unsqueeze(1), y[:6]),
    "0.0 ** y": lambda L, x, y: 0.0 ** y,
    "2.0 ** y": lambda L, x, y: 2.0 ** y,
    "(-2.0) ** y": lambda L, x, y: (-2.0) ** y,
    "atan2": lambda L, x, y: L.atan2(x, y),
    "atan2 underflowing squares": lambda L, x, y: L.atan2(x * 1e-30, y * 1e-30),
}


def _first_and_second(lib, fn, dtype):
    x = lib.tensor(_X, dtype=dtype, requires_grad=True)
    y = lib.tensor(_Y, dtype=dtype, requires_grad=True)
    out = fn(lib, x, y)
    up = lib.tensor(np.linspace(0.5, 1.5, out.numel()), dtype=dtype).reshape(out.shape)
    first = lib.autograd.grad(out, (x, y), up, create_graph=True, allow_unused=True)
    # A weighted sum of the first derivatives, so each one's second derivative shows in the result.
    total = sum((g * (i + 1.25)).sum() for i, g in enumerate(first) if g is not None and g.requires_grad)
    second = lib.autograd.grad(total, (x, y), allow_unused=True) if torch.is_tensor(total) or \
        isinstance(total, jitorch.Tensor) else (None, None)
    return [None if g is None else g.detach().double().numpy() for g in (*first, *second)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_gradients_match_torch_at_zero(case, dtype):
    jt = _first_and_second(jitorch, CASES[case], getattr(jitorch, dtype))
    th = _first_and_second(torch, CASES[case], getattr(torch, dtype))
    rtol = 1e-5 if dtype == "float32" else 1e-12  # second derivatives compose the backward's ops in another order
    for what, a, b in zip(("d/dx", "d/dy", "d2/dx", "d2/dy"), jt, th):
        if a is None or b is None:  # no gradient and an all-zero one are the same answer
            assert not np.any(b if a is None else a), f"{case} {what}: only one framework has a nonzero gradient"
            continue
        np.testing.assert_allclose(a, b, rtol=rtol, atol=0, equal_nan=True, err_msg=f"{case} {what}")


def test_polynomial_features_at_zero_have_finite_gradients():
    # x ** arange(3) at x == 0: the constant feature's 0 * 0 ** -1 must not turn the whole gradient into nan.
    grads = []
    for lib in (jitorch, torch):
        x = lib.tensor([0.0, 1.5], requires_grad=True)
        (x.unsqueeze(1) ** lib.arange(3.0)).sum().backward()
        grads.append(x.grad.tolist())
    assert grads[0] == grads[1] == [1.0, 4.0]


def test_atan2_of_zero_and_zero():
    a, b = jitorch.zeros(3, requires_grad=True), jitorch.tensor([0.0, 1.0, -2.0], requires_grad=True)
    jitorch.atan2(a, b).sum().backward()
    ta, tb = torch.zeros(3, requires_grad=True), torch.tensor([0.0, 1.0, -2.0], requires_grad=True)
    torch.atan2(ta, tb).sum().backward()
    assert a.grad.tolist() == ta.grad.tolist() == [0.0, 1.0, -0.5]
    assert b.grad.tolist() == tb.grad.tolist()
