"""In-place pointwise forms (values, gradients, result-type and leaf checks) and the errors of bad pointwise inputs
(broadcast shapes, operand types, mixed devices), checked against PyTorch 2.13.
"""
import numpy as np
import pytest
import torch
from helpers import (check_error, check_op, make_array)

import jitorch

from pointwise_cases import BINARY, BITWISE, NONDIFF_BINARY, NONDIFF_UNARY, UNARY, _domain, _fns


# -- in-place forms -----------------------------------------------------------------------------------------------
def _inplace_cases():
    """(method, self's domain, other operand kind) for every in-place pointwise method both frameworks have."""
    cases = []
    for name in UNARY:
        if hasattr(torch.Tensor, name + "_") and hasattr(jitorch.Tensor, name + "_"):
            cases.append((name + "_", UNARY[name], None))
    for name in BINARY:
        if hasattr(torch.Tensor, name + "_") and hasattr(jitorch.Tensor, name + "_"):
            cases.append((name + "_", _domain(BINARY, name, 0), _domain(BINARY, name, 1)))
    cases += [("clamp_", None, "bounds"), ("clip_", None, "bounds"), ("clamp_min_", None, "scalar"),
              ("clamp_max_", None, "scalar"), ("addcmul_", None, "pair"), ("addcdiv_", None, "pair"),
              ("lerp_", None, "weight")]
    return cases


def _inplace_args(kind, dtype, rng):
    if kind is None:
        return []
    if kind == "bounds":
        return [-1, 1]
    if kind == "scalar":
        return [0.5]
    if kind == "pair":
        return [make_array((4,), dtype, rng, 0.5, 2), make_array((3, 1), dtype, rng, 0.5, 2)]
    if kind == "weight":
        return [make_array((4,), dtype, rng), 0.25]
    return [make_array((4,), dtype, rng, *kind)]  # the other operand: a broadcast (4,) against self's (3, 4)


# torch has no derivative for these in-place forms (it raises at backward); jitorch differentiates them.
NO_TORCH_INPLACE_GRAD = {"acosh_", "asinh_", "atanh_", "arccosh_", "arcsinh_", "arctanh_", "floor_divide_"}
INPLACE_CASES = _inplace_cases()


@pytest.mark.parametrize("method,self_dom,other", INPLACE_CASES, ids=[c[0] for c in INPLACE_CASES])
def test_inplace_matches_torch(method, self_dom, other, rng):
    """``(x * 1).op_(...)``: values, that self is returned, and gradients through the in-place op."""
    name = method[:-1]
    nondiff = name in NONDIFF_UNARY or name in NONDIFF_BINARY
    for dtype in ("int64",) if name in BITWISE else ("float32", "int64"):
        a = make_array((3, 4), dtype, rng, *(self_dom or (-3, 3)))
        args = _inplace_args(other, dtype, rng)

        def run(x, *rest):
            y = x * 1
            out = getattr(y, method)(*rest)
            assert out is y
            return out.detach() if nondiff else out  # gradients after non-differentiable in-place ops: see below
        grad = dtype == "float32" and method not in NO_TORCH_INPLACE_GRAD
        check_op(run, run, [a] + args, atol=1e-5, rtol=1e-5, grad=grad)


@pytest.mark.parametrize("method", ["eq_", "lt_", "ge_"])
def test_gradient_after_nondifferentiable_inplace_is_zero(method, rng):
    a, b = make_array((3, 4), "float32", rng), make_array((4,), "float32", rng)
    run = lambda x, y: getattr(x * 1, method)(y)  # noqa: E731
    check_op(run, run, [a, b])


@pytest.mark.parametrize("method,args", [("add_", (1.5,)), ("mul_", (0.5,)), ("div_", (2,)), ("sqrt_", ()),
                                         ("exp_", ()), ("sub_", (np.ones(3, np.float32),)), ("clamp_", (0.5, 2.5)),
                                         ("pow_", (0.5,))])
def test_inplace_result_type_cannot_be_cast(method, args, rng):
    """``int_tensor.add_(1.5)``: the result type Float can't be cast to Long -> RuntimeError, as torch."""
    err = check_error(lambda x, *r: getattr(x, method)(*r), lambda x, *r: getattr(x, method)(*r),
                      [make_array((3,), "int64", rng)] + list(args), match="Long")
    assert method.rstrip("_") in str(err) or "cast" in str(err)


def test_inplace_bool_and_int_targets(rng):
    check_error(lambda x: x.add_(1), lambda x: x.add_(1), [make_array((3,), "bool", rng)])
    check_error(lambda x: x.add_(1.0), lambda x: x.add_(1.0), [make_array((3,), "uint8", rng)])
    check_op(lambda x: x.add_(True), lambda x: x.add_(True), [make_array((3,), "int8", rng)])


def test_inplace_broadcast_shape_error_names_shapes(rng):
    small, big = make_array((3,), "float32", rng), make_array((2, 3), "float32", rng)
    check_error(lambda x, y: x.add_(y), lambda x, y: x.add_(y), [small, big], match=["[3]", "[2, 3]"])
    check_error(lambda x, y: x.mul_(y), lambda x, y: x.mul_(y), [small.astype(np.int64), big.astype(np.int64)],
                match=["[3]", "[2, 3]"])


def test_inplace_on_leaf_requiring_grad_raises():
    for j, t in ((jitorch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)),):
        with pytest.raises(RuntimeError, match="leaf"):
            t.add_(1)
        with pytest.raises(RuntimeError, match="leaf"):
            j.add_(1)
        with jitorch.no_grad():
            j.mul_(2)  # allowed without grad mode, as in torch
        assert j.tolist() == [2.0, 2.0, 2.0]


def test_inplace_on_saved_tensor_fails_at_backward():
    j, t = jitorch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    jy, ty = j.exp(), t.exp()  # exp saves its output
    jy.add_(1)
    ty.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        ty.sum().backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        jy.sum().backward()


# -- bad inputs ---------------------------------------------------------------------------------------------------
# add, sub and div go through ``apply``; the others through the float fast path.
_BROADCAST_CASES = [(n, d) for n in ("add", "sub", "div") for d in ("int64", "bfloat16", "float32")] + [
    (n, d)
    for n in ("mul", "maximum", "eq") for d in ("int64", "bfloat16", "float32")]


@pytest.mark.parametrize("name,dtype", _BROADCAST_CASES)
def test_broadcast_error_names_op_and_shapes(name, dtype, rng):
    a, b = make_array((2, 3), dtype, rng, 1, 3), make_array((4,), dtype, rng, 1, 3)
    check_error(*_fns(name), [a, b], match=[name, "(2, 3)", "(4,)"])


@pytest.mark.parametrize("dtype", ["int64", "float32"])
def test_operator_broadcast_error(dtype, rng):
    a, b = make_array((2, 3), dtype, rng, 1, 3), make_array((2,), dtype, rng, 1, 3)
    check_error(lambda x, y: x + y, lambda x, y: x + y, [a, b], match=["(2, 3)", "(2,)"])


def test_bad_operand_types_and_values(rng):
    a = make_array((3,), "int64", rng, 1, 3)
    check_error(lambda x: jitorch.add(x, "a"), lambda x: torch.add(x, "a"), [a])
    check_error(lambda x: x // 0, lambda x: x // 0, [a], match="floor_divide")
    check_error(lambda x: x % 0, lambda x: x % 0, [a], match="remainder")
    check_error(lambda x: x ** -1, lambda x: x ** -1, [a])
    check_error(lambda x: x - x.bool(), lambda x: x - x.bool(), [a], match="bool")


@pytest.mark.cuda
def test_mixed_device_operands_raise():
    with pytest.raises(RuntimeError, match="same device"):
        jitorch.ones(2) + jitorch.ones(2, device="cuda")


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_large_float32_erf_and_exact_gelu_match_torch_through_the_native_eager_kernel(layout):
    # From 4096 contiguous float32 elements erf runs a generated kernel (jitorch/ops/native_eager.py) instead of
    # SciPy's loop; non-contiguous inputs keep SciPy's, and their layout.
    x = make_array((96, 80), "float32", np.random.default_rng(4), -9.0, 9.0)
    check_op(jitorch.erf, torch.erf, [x], layout=layout)
    check_op(jitorch.nn.functional.gelu, torch.nn.functional.gelu, [x], layout=layout, atol=2e-6)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -4.5, 3.9], np.float32)
    big = np.resize(special, 8192)
    got = jitorch.erf(jitorch.tensor(big)).numpy()
    np.testing.assert_allclose(got[:8], torch.erf(torch.tensor(special)).numpy(), rtol=2e-7, atol=0)  # nan, inf
    assert np.signbit(got[1]) and got.shape == big.shape
