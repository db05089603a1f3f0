"""Pointwise and search edges found by compatibility sweeps, each against torch 2.13: clamp on bool tensors (which
ATen overload, hence which kernel error), lerp with a complex 0-d weight, nansum/nanmean gradients over all-NaN
slices, and searchsorted/bucketize with NaN in the boundaries (ATen's binary search, not NumPy's NaN-last order)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import check_error, check_op

import jitorch

BOOLS = np.array([True, False, True])


# -- clamp on bool tensors ---------------------------------------------------------------------------------------
def _bounds(lib, spec):
    """A bound from its spec: a Python value, ``"t:<value>"`` a 0-d bool tensor, ``"v"`` a 1-d bool tensor."""
    if isinstance(spec, str) and spec.startswith("t:"):
        return lib.tensor(spec == "t:True")
    if spec == "v":
        return lib.tensor([False, True, False])
    return spec


BOOL_CLAMPS = [  # (min, max): Python bounds take the Scalar kernels (no bool), tensor bounds maximum/minimum
    (False, None), (None, True), (False, True), ("t:True", None), (None, "t:False"), ("v", None), ("t:True", False),
    (False, "t:True"), ("t:False", "t:True"), ("v", "v"), (0, 1), (0.5, None), ("t:True", 0.5),
]


@pytest.mark.parametrize("lo,hi", BOOL_CLAMPS)
@pytest.mark.parametrize("spelling", ["clamp", "clip", "method", "inplace"])
def test_clamp_of_a_bool_tensor_as_torch(lo, hi, spelling):
    def run(lib):
        def fn(x):
            a, b = _bounds(lib, lo), _bounds(lib, hi)
            if spelling == "method":
                return x.clamp(a, b)
            if spelling == "inplace":
                return x.clone().clamp_(a, b)
            return getattr(lib, spelling)(x, a, b)
        return fn
    check_op(run(jitorch), run(torch), [BOOLS], grad=False)


@pytest.mark.parametrize("which,bound", [("clamp_min", False), ("clamp_max", True), ("clamp_min", "t:True"),
                                         ("clamp_max", "t:False"), ("clamp_min", 0), ("clamp_max", 0.5)])
def test_clamp_min_and_max_of_a_bool_tensor_as_torch(which, bound):
    check_op(lambda x: getattr(jitorch, which)(x, _bounds(jitorch, bound)),
             lambda x: getattr(torch, which)(x, _bounds(torch, bound)), [BOOLS], grad=False)


@pytest.mark.parametrize("lo,hi,kernel", [(False, None, "clamp_min_scalar_cpu"), (None, True, "clamp_max_scalar_cpu"),
                                          (False, True, "clamp_scalar_cpu"), ("t:False", "t:True", "clamp_cpu")])
def test_clamp_of_a_bool_tensor_names_torchs_kernel(lo, hi, kernel):
    check_error(lambda x: x.clamp(_bounds(jitorch, lo), _bounds(jitorch, hi)),
                lambda x: x.clamp(_bounds(torch, lo), _bounds(torch, hi)), [BOOLS], match=[kernel, "Bool"])


def test_clamp_without_bounds_says_so():
    check_error(lambda x: jitorch.clamp(x), lambda x: torch.clamp(x), [BOOLS], match="At least one of 'min' or 'max'")


# -- lerp with a complex weight ----------------------------------------------------------------------------------
@pytest.mark.parametrize("in_dtype", ["float32", "float64", "bfloat16", "complex64"])
@pytest.mark.parametrize("w", [0.2 + 1j, 0.7 - 0.3j, 1.0 + 0j])
@pytest.mark.parametrize("w_dtype", ["complex64", "complex128"])
def test_lerp_with_a_complex_0d_weight_promotes_as_torch(in_dtype, w, w_dtype):
    rng = np.random.default_rng(0)
    start, end = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))

    def run(lib):
        def fn():
            dt = getattr(lib, in_dtype)
            return lib.lerp(lib.tensor(start).to(dt), lib.tensor(end).to(dt),
                            lib.tensor(w, dtype=getattr(lib, w_dtype)))
        return fn
    tol = 1e-2 if in_dtype == "bfloat16" else 1e-6
    check_op(run(jitorch), run(torch), [], atol=tol, rtol=tol, grad=False)


@pytest.mark.parametrize("code", [
    "lib.lerp(a, b, 0.5 + 1j)", "lib.lerp(a, b, 1 + 0j)",
    "lib.lerp(a.to(lib.complex64), b.to(lib.complex64), 0.5 + 1j)",
    "lib.lerp(a.to(lib.complex64), b.to(lib.complex64), 0.7)", "a.clone().lerp_(b, lib.tensor(0.5 + 1j))",
    "lib.lerp(a.half(), b.half(), lib.tensor(0.5 + 1j))",
    "lib.lerp(a, b, lib.tensor(0.2 + 0.1j), out=lib.empty(3))",
])
def test_lerp_complex_scalar_and_inplace_forms_as_torch(code):
    def run(lib):
        return lambda: eval(code, {"lib": lib, "a": lib.tensor([1.0, 2.0, -1.0]), "b": lib.tensor([3.0, 4.0, 0.5])})
    check_op(run(jitorch), run(torch), [], grad=False)


# -- nansum / nanmean gradients ----------------------------------------------------------------------------------
NAN_ROWS = np.array([[np.nan, np.nan, np.nan], [1.0, np.nan, 2.0], [np.inf, 3.0, -1.0]], dtype=np.float32)


@pytest.mark.parametrize("fn", ["nansum", "nanmean"])
@pytest.mark.parametrize("kw", [{}, {"dim": 1}, {"dim": 0}, {"dim": 1, "keepdim": True}, {"dim": (0, 1)}])
def test_nan_reductions_gradients_over_all_nan_slices_as_torch(fn, kw):
    check_op(lambda x: getattr(jitorch, fn)(x, **kw), lambda x: getattr(torch, fn)(x, **kw), [NAN_ROWS])


def test_nansum_gradient_carries_a_nonfinite_upstream_gradient_as_torch():
    # ATen multiplies the upstream gradient by the not-NaN mask: inf * 0 is NaN at the NaN positions.
    grads = []
    for lib in (torch, jitorch):
        x = lib.tensor(NAN_ROWS, requires_grad=True)
        lib.nansum(x, 1).backward(lib.tensor([np.inf, 1.0, -np.inf]))
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])
    assert type(jitorch.nansum(jitorch.tensor(NAN_ROWS, requires_grad=True)).grad_fn).__name__ == "NansumBackward0"


# -- searchsorted / bucketize with NaN ---------------------------------------------------------------------------
NAN, INF = float("nan"), float("inf")
SEQUENCES = [[1.0, 2.0, NAN], [NAN, NAN], [1.0, NAN, NAN], [-INF, 0.0, INF, NAN], [NAN], [1.0, 1.0, 2.0, 2.0, NAN],
             [1.0, NAN, 2.0], [1.0, 2.0, 3.0], [[1.0, NAN, 3.0], [NAN, 0.0, 1.0]]]
VALUES = np.array([[NAN, 1.0, 2.5, 0.0], [INF, -INF, 1.0, 2.0]], dtype=np.float32)


@pytest.mark.parametrize("seq", SEQUENCES, ids=str)
@pytest.mark.parametrize("kw", [{}, {"right": True}, {"side": "right"}, {"side": "left", "out_int32": True}])
def test_searchsorted_with_nan_as_torch(seq, kw):
    seq = np.array(seq, dtype=np.float32)
    check_op(lambda s, v: jitorch.searchsorted(s, v, **kw), lambda s, v: torch.searchsorted(s, v, **kw),
             [seq, VALUES], grad=False)
    check_op(lambda s: jitorch.searchsorted(s, NAN, **kw), lambda s: torch.searchsorted(s, NAN, **kw), [seq],
             grad=False)


@pytest.mark.parametrize("kw", [{}, {"right": True}, {"out_int32": True}])
def test_bucketize_with_nan_boundaries_as_torch(kw):
    check_op(lambda v, b: jitorch.bucketize(v, b, **kw), lambda v, b: torch.bucketize(v, b, **kw),
             [VALUES, np.array([1.0, 2.0, NAN], dtype=np.float32)], grad=False)


@pytest.mark.parametrize("seq,sorter", [([3.0, NAN, 1.0, 2.0], [2, 3, 0, 1]), ([3.0, NAN, NAN, 2.0], [3, 0, 1, 2]),
                                        ([[3.0, NAN, 1.0], [NAN, 1.0, 2.0]], [[2, 0, 1], [1, 2, 0]])])
@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_with_a_sorter_and_nan_as_torch(seq, sorter, right):
    seq = np.array(seq, dtype=np.float64)
    values = np.array([[NAN, 1.5, 3.0, 0.0]] * (1 if seq.ndim == 1 else seq.shape[0]))
    values = values[0] if seq.ndim == 1 else values
    check_op(lambda s, v, o: jitorch.searchsorted(s, v, right=right, sorter=o),
             lambda s, v, o: torch.searchsorted(s, v, right=right, sorter=o),
             [seq, values, np.array(sorter, dtype=np.int64)], grad=False)


@pytest.mark.parametrize("seq,values,sorter,match", [
    ([1.0, 2.0, 3.0], [1.0], [0, 1], "boundary and sorter must have the same size"),
    ([1.0, 2.0, 3.0], [1.0], [0, 1, 5], "sorter index out of range"),
    ([1.0, 2.0, 3.0], [1.0], [0.0, 1.0, 2.0], "sorter must be a tensor of long dtype"),
    ([True, False], [True], None, "not implemented for 'Bool'"),
    ([1 + 0j, 2 + 0j], [1 + 0j], None, "not implemented for 'ComplexFloat'"),
])
def test_searchsorted_argument_errors_as_torch(seq, values, sorter, match):
    arrays = [np.array(seq), np.array(values)]
    if arrays[0].dtype == np.complex128:
        arrays = [a.astype(np.complex64) for a in arrays]
    if sorter is None:
        check_error(jitorch.searchsorted, torch.searchsorted, arrays, match=match)
    else:
        check_error(lambda s, v, o: jitorch.searchsorted(s, v, sorter=o),
                    lambda s, v, o: torch.searchsorted(s, v, sorter=o), arrays + [np.array(sorter)], match=match)


# -- two Python numbers ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, args, kwargs", [
    ("add", (3, 1), {}), ("add", (3, 1.5), {}), ("add", (True, 2), {}), ("add", (True, False), {}),
    ("add", (1.5, 2j), {}), ("sub", (3, 1), {"alpha": 2}), ("subtract", (2.5, 1), {}), ("mul", (2.0, 3), {}),
    ("multiply", (1j, 2), {}), ("div", (3, 2), {}), ("div", (7, -2), {"rounding_mode": "floor"}),
    ("div", (7, -2), {"rounding_mode": "trunc"}), ("divide", (1, 4), {}), ("true_divide", (3, 2), {}),
    ("floor_divide", (7, 2), {}),
])
def test_arithmetic_of_two_python_numbers_gives_a_tensor(name, args, kwargs):
    # torch's argument parser lets exactly these ops take a number as ``input``: the result is a 0-d tensor.
    want = getattr(torch, name)(*args, **kwargs)
    got = getattr(jitorch, name)(*args, **kwargs)
    assert isinstance(got, jitorch.Tensor) and got.shape == ()
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert got.item() == want.item()
