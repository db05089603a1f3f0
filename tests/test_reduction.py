"""Every public function of jitorch/_reduction.py against PyTorch: dims (None, int, negative, tuple), keepdim, dtype=,
0-d and empty inputs, every dtype; backward, gradcheck, double backward; numerical stability; bad inputs."""
import numpy as np
import pytest
import torch
from helpers import (DTYPES, FLOAT_DTYPES, LAYOUTS, check_error, check_op, gradcheck_op, gradgradcheck_op,
                     make_array)

import jitorch

# torch warns when a correction leaves no degrees of freedom; those cases are tested on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0:UserWarning")
SHAPES = [(), (0,), (3, 4), (2, 0, 3), (2, 3, 4)]
_TOL = {"float16": (1e-2, 1e-2), "bfloat16": (6e-2, 6e-2), "float64": (1e-10, 1e-10)}


def _tol(dtype):
    return _TOL.get(dtype, (1e-5, 1e-5))


def _dims_for(ndim, tuple_ok=True, empty_tuple=True):
    dims = [0, -1]
    if ndim >= 2 and tuple_ok:
        dims += [(0, -1), (-1, 1)] + ([()] if empty_tuple else [])
    return dims


# name -> (accepts a tuple of dims, takes keepdim)
DIM_REDUCTIONS = {
    "sum": (True, True), "nansum": (True, True), "mean": (True, True), "nanmean": (True, True),
    "prod": (False, True), "amax": (True, True), "amin": (True, True), "all": (True, True), "any": (True, True),
    "var": (True, True), "std": (True, True), "var_mean": (True, True), "std_mean": (True, True),
    "logsumexp": (True, True), "count_nonzero": (True, False),
    "max": (False, True), "min": (False, True), "argmax": (False, True), "argmin": (False, True),
}
ALONG_DIM = ["softmax", "log_softmax", "cumsum", "cumprod"]
FULL_REDUCTIONS = ["sum", "nansum", "mean", "nanmean", "prod", "amax", "amin", "all", "any", "var", "std", "var_mean",
                   "std_mean", "count_nonzero", "max", "min", "argmax", "argmin", "aminmax"]


def _pair(name, *args, **kwargs):
    return (lambda x: getattr(jitorch, name)(x, *args, **kwargs)), (lambda x: getattr(torch, name)(x, *args, **kwargs))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(DIM_REDUCTIONS))
def test_reduce_over_dims(name, dtype, rng):
    tuple_ok, keep_ok = DIM_REDUCTIONS[name]
    atol, rtol = _tol(dtype)
    for shape in SHAPES:
        a = make_array(shape, dtype, rng)
        # torch's logsumexp(x, ()) fails inside its own out= resize; dim=() is tested for the others.
        for dim in _dims_for(len(shape), tuple_ok, empty_tuple=name != "logsumexp"):
            for keepdim in (False, True) if keep_ok else (None,):
                kw = {} if keepdim is None else {"keepdim": keepdim}
                check_op(*_pair(name, dim, **kw), [a], atol=atol, rtol=rtol, grad=False)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FULL_REDUCTIONS)
def test_reduce_everything(name, dtype, rng):
    atol, rtol = _tol(dtype)
    for shape in SHAPES:
        check_op(*_pair(name), [make_array(shape, dtype, rng)], atol=atol, rtol=rtol, grad=False)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ALONG_DIM)
def test_along_dim(name, dtype, rng):
    atol, rtol = _tol(dtype)
    for shape in SHAPES:
        for dim in (0, -1):
            check_op(*_pair(name, dim), [make_array(shape, dtype, rng, -2, 2)], atol=atol, rtol=rtol, grad=False)


GRAD_CASES = {
    "sum": [(), ((0, 2),), (-1, True)], "mean": [(), (1,), ((0, -1), True)], "prod": [(), (1,), (0, True)],
    "amax": [(), (1,), ((0, 2), True)], "amin": [(), (-1,)], "max": [(), (1,), (0, True)], "min": [(), (2,)],
    "var": [(), (1,), ((0, 2), True)], "std": [(), (-1,)], "logsumexp": [(1,), ((0, 2), True)],
    "softmax": [(1,), (-1,)], "log_softmax": [(0,), (2,)], "cumsum": [(1,), (-1,)], "cumprod": [(0,), (2,)],
    "nansum": [(), (1,)], "norm": [(), (2, 1)], "var_mean": [(1,)], "std_mean": [(), (0,)],
    "aminmax": [()],
}


def _grad_pair(name, args):
    if name == "aminmax":
        return (lambda x: jitorch.aminmax(x, dim=1)), (lambda x: torch.aminmax(x, dim=1))
    return _pair(name, *args)


@pytest.mark.parametrize("dtype", ("float32", "float64"))
@pytest.mark.parametrize("name", [n for n in GRAD_CASES if n != "norm"])
def test_reduction_backward(name, dtype, rng):
    atol, rtol = (1e-4, 1e-4) if dtype == "float32" else (1e-9, 1e-9)
    a = make_array((2, 3, 4), dtype, rng, 0.5, 2)
    for args in GRAD_CASES[name] or [()]:
        for layout in LAYOUTS:
            check_op(*_grad_pair(name, args), [a], atol=atol, rtol=rtol, layout=layout)


@pytest.mark.parametrize("name", [n for n in GRAD_CASES if n != "norm"])
def test_reduction_gradcheck(name, rng):
    a = make_array((2, 3, 2), "float64", rng, 0.5, 2)
    for args in GRAD_CASES[name] or [()]:
        gradcheck_op(_grad_pair(name, args)[0], [a])


def test_prod_and_cumprod_gradients_with_zeros(rng):
    a = make_array((3, 4), "float64", rng, 0.5, 2)
    for zeros in ([(0, 1)], [(0, 1), (0, 2)], [(1, 1), (2, 3)]):
        b = a.copy()
        for idx in zeros:
            b[idx] = 0.0
        for fn in (lambda T, x: T.prod(x), lambda T, x: T.prod(x, 1), lambda T, x: T.cumprod(x, 1),
                   lambda T, x: T.cumprod(x, 0)):
            check_op(lambda x: fn(jitorch, x), lambda x: fn(torch, x), [b], atol=1e-10, rtol=1e-10)


def test_extrema_ties_and_named_tuples():
    a = np.array([[1.0, 5.0, 5.0], [3.0, 3.0, 2.0]], dtype=np.float64)
    for name in ("max", "min"):
        res = check_op(lambda x: getattr(jitorch, name)(x, 1), lambda x: getattr(torch, name)(x, 1), [a])
        jt = res[0]
        assert type(jt).__name__ == name and jt.values is jt[0] and jt.indices is jt[1]
    for name in ("amax", "amin"):  # ties share the gradient evenly
        check_op(lambda x: getattr(jitorch, name)(x, 1), lambda x: getattr(torch, name)(x, 1), [a])
    res = check_op(lambda x: jitorch.aminmax(x, dim=0), lambda x: torch.aminmax(x, dim=0), [a], grad=False)
    assert res[0].min is res[0][0] and res[0].max is res[0][1]
    check_op(lambda x: x.max(dim=1, keepdim=True), lambda x: x.max(dim=1, keepdim=True), [a])


def test_var_std_correction_and_unbiased(rng):
    a = make_array((3, 5), "float64", rng)
    variants = [((), {}), ((1,), {"unbiased": False}), ((1,), {"correction": 0}), ((0,), {"correction": 2}),
                ((None,), {"correction": 3, "keepdim": True}), ((False,), {}), (((0, 1),), {"unbiased": True})]
    for name in ("var", "std", "var_mean", "std_mean"):
        for args, kw in variants:
            check_op(lambda x: getattr(jitorch, name)(x, *args, **kw), lambda x: getattr(torch, name)(x, *args, **kw),
                     [a], atol=1e-10, rtol=1e-10)
        # No degrees of freedom left: inf/nan values (torch warns); the gradient there is not part of the contract.
        check_op(lambda x: getattr(jitorch, name)(x, 1, correction=5), lambda x: getattr(torch, name)(x, 1,
                 correction=5), [a], grad=False)


def test_std_gradient_is_zero_where_std_is_zero():
    a = np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0]])
    check_op(lambda x: jitorch.std(x, 1), lambda x: torch.std(x, 1), [a])


@pytest.mark.parametrize("name", ["sum", "prod", "cumsum", "cumprod", "mean", "nansum"])
def test_dtype_argument(name, rng):
    for src in ("bool", "int8", "int32", "float16", "float32"):
        a = make_array((3, 4), src, rng, -2, 2)
        for dt in ("int64", "float32", "float64"):
            args = (1,) if name in ("cumsum", "cumprod") else ()
            check_op(lambda x: getattr(jitorch, name)(x, *args, dtype=getattr(jitorch, dt)),
                     lambda x: getattr(torch, name)(x, *args, dtype=getattr(torch, dt)), [a], atol=1e-2, rtol=1e-2,
                     grad=False)


def test_nan_aware_reductions():
    a = np.array([[1.0, np.nan, 2.0], [np.nan, np.nan, np.nan], [0.5, 0.5, np.inf]], dtype=np.float32)
    for name in ("nansum", "nanmean", "sum", "mean", "amax", "max", "logsumexp", "softmax"):
        for dim in (0, 1):
            check_op(*_pair(name, dim), [a], grad=False)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp"])
def test_stability_on_large_inputs(name):
    a = np.array([[1e4, 1e4 - 1, -1e4], [-1e4, -1e4, -1e4 + 2], [0.0, -np.inf, 1.0]], dtype=np.float32)
    for dtype in ("float32", "float64"):
        # torch's float32 logsumexp gradient exp(x - lse) loses ~1e-4 relative at |x| = 1e4 (lse's rounding).
        res = check_op(*_pair(name, 1), [a.astype(dtype)], atol=1e-5, rtol=1e-5, grad_atol=1e-3, grad_rtol=1e-3)
        finite = np.isfinite(res[1].detach().numpy()[:2])
        assert finite.all(), f"{name} overflowed on inputs of magnitude 1e4"
    check_op(*_pair(name, 1), [np.full((2, 3), -np.inf, np.float32)], grad=False)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp"])
def test_softmax_double_backward(name, rng):
    a = make_array((2, 3), "float64", rng)
    gradgradcheck_op(lambda x: getattr(jitorch, name)(x, 1), [a])
    jx, tx = jitorch.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    w = make_array((2, 3) if name != "logsumexp" else (2,), "float64", rng)
    (jg,) = jitorch.autograd.grad((getattr(jx, name)(1) * jitorch.tensor(w)).sum(), jx, create_graph=True)
    (tg,) = torch.autograd.grad((getattr(tx, name)(1) * torch.tensor(w)).sum(), tx, create_graph=True)
    np.testing.assert_allclose(jitorch.autograd.grad((jg * jg).sum(), jx)[0].numpy(),
                               torch.autograd.grad((tg * tg).sum(), tx)[0].numpy(), rtol=1e-10, atol=1e-10)


def test_softmax_dtype_and_implicit_dim(rng):
    a = make_array((2, 3), "float16", rng)
    check_op(lambda x: jitorch.softmax(x, 1, dtype=jitorch.float32), lambda x: torch.softmax(x, 1, dtype=torch.float32),
             [a], atol=1e-3, rtol=1e-3, grad=False)
    check_op(lambda x: x.log_softmax(-1, dtype=jitorch.float64), lambda x: x.log_softmax(-1, dtype=torch.float64),
             [make_array((2, 3), "int64", rng)], grad=False)


def test_trace_count_nonzero_sum_to_size(rng):
    a = make_array((3, 4), "float64", rng)
    check_op(jitorch.trace, torch.trace, [a])
    check_op(jitorch.trace, torch.trace, [make_array((3, 3), "int32", rng)])
    check_op(lambda x: jitorch.count_nonzero(x, (0, 1)), lambda x: torch.count_nonzero(x, (0, 1)),
             [make_array((3, 4), "int8", rng, -1, 1)])
    for size in ((1, 4), (3, 1), (4,), (1, 1)):
        check_op(lambda x: x.sum_to_size(size), lambda x: x.sum_to_size(size), [a])
    check_error(lambda x: x.sum_to_size(2, 4), lambda x: x.sum_to_size(2, 4), [a])


def test_norm_matches_torch(rng):
    pytest.importorskip("jitorch.linalg", reason="jitorch.linalg is another engineer's module")
    a = make_array((3, 4), "float64", rng)
    for p, dim, keep in (("fro", None, False), (2, 1, False), (1, 0, True), (float("inf"), 1, False)):
        check_op(lambda x: jitorch.norm(x, p, dim, keep), lambda x: torch.norm(x, p, dim, keep), [a])


# -- bad inputs ---------------------------------------------------------------------------------------------------
def test_dim_errors(rng):
    a = make_array((2, 3), "float32", rng)
    for name in ("sum", "mean", "amax", "softmax", "cumsum", "argmax", "max", "var", "logsumexp"):
        check_error(*_pair(name, 2), [a], match=["2"])
        check_error(*_pair(name, -3), [a])
    for name in ("sum", "amax", "mean"):
        check_error(*_pair(name, (0, 0)), [a], match=["0"])


def test_dtype_errors(rng):
    i = make_array((2, 3), "int64", rng)
    check_error(jitorch.mean, torch.mean, [i], match="Long")
    check_error(lambda x: jitorch.mean(x, dtype=jitorch.int32), lambda x: torch.mean(x, dtype=torch.int32),
                [make_array((2,), "float32", rng)])
    check_error(jitorch.var, torch.var, [i], match="floating point")
    check_error(jitorch.nanmean, torch.nanmean, [i], match="Long")
    check_error(lambda x: jitorch.softmax(x, 0), lambda x: torch.softmax(x, 0), [i], match="Long")
    check_error(jitorch.argmax, torch.argmax, [make_array((3,), "bool", rng)], match="bool")
    check_error(lambda x: jitorch.prod(x, (0, 1)), lambda x: torch.prod(x, (0, 1)), [i])


def test_empty_reduction_errors():
    e = np.zeros((0, 3), dtype=np.float32)
    for name in ("amax", "amin", "max", "min", "argmax", "argmin", "aminmax"):
        check_error(*_pair(name), [e], match=name)
    for name in ("amax", "max", "argmax", "argmin"):
        check_error(*_pair(name, 0), [e], match=["0", "non-zero size"])
        check_op(*_pair(name, 1), [e], grad=False)  # reducing a non-empty dim of an empty tensor is fine


def test_backward_of_non_scalar_needs_gradient(rng):
    a = make_array((2, 3), "float32", rng)
    for fn in (lambda T, x: x.sum(0), lambda T, x: T.softmax(x, 1), lambda T, x: x.cumsum(0)):
        check_error(lambda x: fn(jitorch, x.requires_grad_()).backward(),
                    lambda x: fn(torch, x.requires_grad_()).backward(), [a], match="scalar outputs")
    check_error(lambda x: x.sum(0).backward(jitorch.ones(3)), lambda x: x.sum(0).backward(torch.ones(3)), [a],
                match="does not require grad")
    check_error(lambda x: x.requires_grad_().sum(0).backward(jitorch.ones(2)),
                lambda x: x.requires_grad_().sum(0).backward(torch.ones(2)), [a], match=["[3]", "[2]"])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_half_precision_sums_accumulate_in_float32(dtype):
    a = np.full((4096,), 0.1, dtype=np.float32).astype(dtype if dtype != "bfloat16" else np.float32)
    if dtype == "bfloat16":
        import ml_dtypes

        a = a.astype(ml_dtypes.bfloat16)
    check_op(jitorch.sum, torch.sum, [a], atol=1, rtol=2e-2, grad=False)
    check_op(jitorch.mean, torch.mean, [a], atol=1e-3, rtol=2e-2, grad=False)
