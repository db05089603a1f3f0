"""Complex tensors under autograd, against torch: the real/imag/conj rows and views, ``abs``/``angle``/``sgn``,
``polar``/``complex``, and PyTorch's conjugate-Wirtinger gradients of holomorphic ops (random complex upstream
gradients come from ``check_op``)."""
import numpy as np
import pytest
import torch
from helpers import check_error, check_op, gradcheck_op, gradgradcheck_op, make_array

import jitorch

RNG = np.random.default_rng(7)
Z64 = make_array((3, 4), "complex64", RNG)
Z128 = make_array((3, 4), "complex128", RNG)
X = make_array((3, 4), "float64", RNG)
Y = make_array((3, 4), "float64", RNG)

UNARY = {
    "real": lambda t, z: z.real, "imag": lambda t, z: z.imag, "conj": lambda t, z: z.conj() * 1,
    "conj_physical": lambda t, z: t.conj_physical(z), "abs": lambda t, z: z.abs(), "angle": lambda t, z: z.angle(),
    "sgn": lambda t, z: z.sgn(), "view_as_real": lambda t, z: t.view_as_real(z),
    "view_as_real_of_view": lambda t, z: t.view_as_real(z.t()[1:]),
    "exp": lambda t, z: z.exp(), "log": lambda t, z: z.log(), "sqrt": lambda t, z: z.sqrt(),
    "sin": lambda t, z: z.sin(), "cos": lambda t, z: z.cos(), "tanh": lambda t, z: z.tanh(),
    "reciprocal": lambda t, z: z.reciprocal(), "pow": lambda t, z: z ** 3, "square": lambda t, z: z.square(),
    "abs_squared": lambda t, z: (z * z.conj()).real, "sum_mean": lambda t, z: z.sum(0) + z.mean(),
    "matmul": lambda t, z: z @ z.mT, "cat_flip": lambda t, z: t.cat([z, z.flip(1)]),
}


@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("z", [Z64, Z128], ids=["complex64", "complex128"])
def test_complex_unary_forward_and_grad(name, z):
    tol = 1e-5 if z.dtype == np.complex64 else 1e-10
    check_op(lambda a: UNARY[name](jitorch, a), lambda a: UNARY[name](torch, a), [z], atol=tol, rtol=tol)


BINARY = {
    "mul": lambda t, a, b: a * b, "div": lambda t, a, b: a / b, "pow": lambda t, a, b: a ** b,
    "add_sub": lambda t, a, b: a + b - a * 2j, "einsum": lambda t, a, b: t.einsum("ij,kj->ik", a, b),
}


@pytest.mark.parametrize("name", list(BINARY))
def test_complex_binary_grad(name):
    check_op(lambda a, b: BINARY[name](jitorch, a, b), lambda a, b: BINARY[name](torch, a, b),
             [Z128, Z128[::-1].copy()], atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("name", ["mul", "div", "add"])
def test_real_and_complex_operands_give_the_real_input_a_real_grad(name):
    # A real input of a complex op gets the real part of its complex gradient (torch's handle_r_to_c).
    fn = {"mul": lambda a, b: a * b, "div": lambda a, b: b / a, "add": lambda a, b: a + b}[name]
    out = check_op(fn, fn, [X + 2, Z128], atol=1e-10, rtol=1e-10)
    assert out is not None


REAL_TO_COMPLEX = {
    "complex": lambda t, x, y: t.complex(x, y), "polar": lambda t, x, y: t.polar(x.abs(), y),
    "view_as_complex": lambda t, x, y: t.view_as_complex(t.stack([x, y], -1)),
    "to_complex": lambda t, x, y: x.to(t.complex128) * y, "complex_then_abs": lambda t, x, y: t.complex(x, y).abs(),
}


@pytest.mark.parametrize("name", list(REAL_TO_COMPLEX))
def test_real_to_complex_grad(name):
    check_op(lambda x, y: REAL_TO_COMPLEX[name](jitorch, x, y), lambda x, y: REAL_TO_COMPLEX[name](torch, x, y),
             [X, Y], atol=1e-10, rtol=1e-10)


def test_real_and_imag_are_views_that_write_through():
    for lib in (jitorch, torch):
        z = lib.zeros(3, dtype=lib.complex64)
        z.real[1] = 2.0
        z.imag.add_(lib.tensor([1.0, 0.0, -1.0]))
        lib.view_as_real(z)[0, 1] = 5.0
        assert z.tolist() == [complex(0, 5), complex(2, 0), complex(0, -1)], lib.__name__


def test_inplace_write_through_real_view_keeps_gradient():
    def fn(lib, z):
        w = z * 1
        w.real.mul_(3.0)
        return lib.view_as_real(w)

    check_op(lambda z: fn(jitorch, z), lambda z: fn(torch, z), [Z128], atol=1e-10, rtol=1e-10)


def test_real_of_real_tensor_is_itself_and_imag_raises():
    x = jitorch.tensor([1.0, 2.0])
    assert x.real is x and x.conj() is x
    check_error(lambda a: a.imag, lambda a: a.imag, [np.array([1.0, 2.0])], match="imag")


@pytest.mark.parametrize("bad", ["shape", "dtype", "stride"])
def test_view_as_complex_rejects_bad_layouts(bad):
    arr = {"shape": np.zeros((3, 3)), "dtype": np.zeros((3, 2), np.int32), "stride": np.zeros((3, 4))}[bad]
    fn = {"stride": lambda t: lambda a: t.view_as_complex(a[:, ::2])}.get(bad, lambda t: t.view_as_complex)
    check_error(fn(jitorch), fn(torch), [arr], match="view_as_complex")


def test_view_as_real_rejects_real_tensors():
    check_error(jitorch.view_as_real, torch.view_as_real, [np.zeros(3)], match="complex")


@pytest.mark.parametrize("name", ["abs", "angle", "sgn", "exp", "view_as_real", "abs_squared", "matmul"])
def test_complex_gradcheck_and_gradgradcheck(name):
    z = make_array((2, 3), "complex128", RNG, low=0.5, high=2.0)
    fn = lambda a: UNARY[name](jitorch, a)  # noqa: E731
    gradcheck_op(fn, [z])
    gradgradcheck_op(fn, [z])


def test_gradcheck_catches_a_wrong_complex_gradient():
    from jitorch.ops import complex_ops

    z = jitorch.tensor(make_array((3,), "complex128", RNG), requires_grad=True)
    right = complex_ops.CONJ.backward
    complex_ops.CONJ.backward = lambda ctx, g: g  # the gradient of conj is conj(g): g alone is wrong
    try:
        assert not jitorch.autograd.gradcheck(lambda a: a.conj() * 1, (z,), raise_exception=False)
    finally:
        complex_ops.CONJ.backward = right


@pytest.mark.parametrize("name", ["angle", "sgn", "abs"])
def test_gradients_at_zero_match_torch(name):
    # torch defines angle(0) = sgn(0) = 0 with zero gradients (atan2's and the division's would be 0/0 there).
    z = np.array([0j, 1 + 1j, -2 + 0j, 0.5 - 0.25j, 0j])
    check_op(lambda a: UNARY[name](jitorch, a), lambda a: UNARY[name](torch, a), [z], atol=1e-12, rtol=1e-12)
