"""Softplus and Mish rows (jitorch/ops/softplus_ops.py): forward, backward with random upstream gradients, double
backward and the special values, against torch, through the native float32 kernel (7680 elements, contiguous) and
the NumPy formulas (small, float64, transposed, half precision)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as JF
import torch.nn.functional as TF

from helpers import check_double_backward, check_op, gradcheck_op, gradgradcheck_op, make_array

CASES = {
    "softplus": (JF.softplus, TF.softplus),
    "softplus_beta2_thr5": (lambda x: JF.softplus(x, 2.0, 5.0), lambda x: TF.softplus(x, 2.0, 5.0)),
    "softplus_beta_half_thr100": (lambda x: JF.softplus(x, 0.5, 100.0), lambda x: TF.softplus(x, 0.5, 100.0)),
    "mish": (JF.mish, TF.mish),
}
SPECIAL = [-np.inf, -1e4, -200.0, -30.0, -1.0, 0.0, 2.5, 5.0, 19.9, 20.0, 20.5, 50.0, 90.0, 1e4, np.inf, np.nan]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("shape", [(), (7,), (96, 80)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_matches_torch_forward_and_backward(name, shape, dtype, layout):
    jf, tf = CASES[name]
    x = make_array(shape, dtype, np.random.default_rng(len(shape)), -12.0, 12.0)
    tol = 2e-6 if dtype == "float32" else 1e-12
    check_op(jf, tf, [x], layout=layout, atol=tol, rtol=tol, grad_atol=4 * tol, grad_rtol=4 * tol)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_special_values_match_torch(name, dtype):
    jf, tf = CASES[name]
    x = np.tile(np.array(SPECIAL, dtype), 40)  # 640 elements: the native kernel in float32
    g = np.random.default_rng(0).standard_normal(x.size).astype(dtype)
    got, want = [], []
    for lib, fn, out in ((jitorch, jf, got), (torch, tf, want)):
        xt = lib.tensor(x, requires_grad=True)
        fn(xt).backward(lib.tensor(g))
        out += [fn(lib.tensor(x)).numpy(), xt.grad.numpy()]
    for a, b, what in zip(got, want, ("value", "grad")):
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-30, equal_nan=True, err_msg=f"{name} {what}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_double_backward_matches_torch(name):
    jf, tf = CASES[name]
    rng = np.random.default_rng(1)
    check_double_backward(name, jf, tf, (rng.standard_normal(9000) * 4).astype(np.float32), rng)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradcheck_and_gradgradcheck_in_float64(name):
    jf, _ = CASES[name]
    x = make_array((4, 3), "float64", np.random.default_rng(2), -4.0, 4.0)
    gradcheck_op(jf, [x])
    gradgradcheck_op(jf, [x])


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_matches_torch(name, dtype):
    jf, tf = CASES[name]
    x = make_array((64, 80), "float32", np.random.default_rng(3), -5.0, 5.0)
    cast = {"float16": (jitorch.float16, torch.float16), "bfloat16": (jitorch.bfloat16, torch.bfloat16)}[dtype]
    check_op(lambda a: jf(a.to(cast[0])).float(), lambda a: tf(a.to(cast[1])).float(), [x], atol=1e-2, rtol=1e-2)
