"""``binary_cross_entropy_with_logits`` as one row (forward and backward expressions) against PyTorch: values and
both gradients with random upstream gradients, saturated and special logits, layouts, double backward, the compiled
(fused) form against eager, and the half types' composite."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import check_op, gradcheck_op, gradgradcheck_op

F, TF = jitorch.nn.functional, torch.nn.functional
RNG = np.random.default_rng(0)


def _pair(shape, dtype, scale=4.0):
    return np.asarray(RNG.standard_normal(shape) * scale, dtype), np.asarray(RNG.uniform(0, 1, shape), dtype)


@pytest.mark.parametrize("shape", [(), (0, 3), (7,), (64, 33), (300, 200)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_matches_torch_with_both_gradients(shape, dtype, reduction):
    x, y = _pair(shape, dtype)
    tol = 1e-6 if dtype == "float32" else 1e-12
    check_op(lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction=reduction),
             lambda a, b: TF.binary_cross_entropy_with_logits(a, b, reduction=reduction), [x, y], atol=tol, rtol=1e-5)


@pytest.mark.parametrize("layout", ["transposed", "sliced"])
def test_non_contiguous_operands(layout):
    x, y = _pair((40, 30), "float32")
    check_op(lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction="none"),
             lambda a, b: TF.binary_cross_entropy_with_logits(a, b, reduction="none"), [x, y], layout=layout,
             atol=1e-6, rtol=1e-5)


def test_saturated_and_special_logits():
    x = np.array([0, -0.0, 1e-30, 20, -20, 30, 90, -90, 17, -17, np.inf, -np.inf, np.nan] * 300, np.float32)
    y = np.array([1, 0, 0.5, 1, 0, 1, 1, 0, 1, 0, 1, 0, 1] * 300, np.float32)
    got = F.binary_cross_entropy_with_logits(jitorch.tensor(x), jitorch.tensor(y), reduction="none").numpy()
    # The exact loss: log1p(exp(-|x|)) keeps the small terms (torch's float32 kernel rounds some of them to 0).
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(invalid="ignore"):
        exact = (1 - yd) * xd - np.minimum(xd, 0) + np.log1p(np.exp(-np.abs(xd)))
    finite = np.isfinite(exact)
    np.testing.assert_allclose(got[finite], exact[finite], rtol=2e-6, atol=1e-44)
    assert np.array_equal(np.isnan(got), np.isnan(exact))
    ref = TF.binary_cross_entropy_with_logits(torch.from_numpy(x), torch.from_numpy(y), reduction="none").numpy()
    np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-5, atol=1e-7)
    xt = jitorch.tensor(x, requires_grad=True)
    F.binary_cross_entropy_with_logits(xt, jitorch.tensor(y), reduction="sum").backward()
    xr = torch.from_numpy(x).requires_grad_()
    TF.binary_cross_entropy_with_logits(xr, torch.from_numpy(y), reduction="sum").backward()
    np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-6, atol=1e-12)


def test_gradcheck_and_double_backward():
    x, y = _pair((5, 4), "float64", scale=2.0)
    fn = lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction="none")  # noqa: E731
    gradcheck_op(fn, [x, y])
    gradgradcheck_op(fn, [x, y])
    assert F.binary_cross_entropy_with_logits(jitorch.tensor(x, requires_grad=True), jitorch.tensor(y)).grad_fn \
        .name() == "BinaryCrossEntropyWithLogitsBackward0"


def test_compiled_matches_eager():
    x, y = _pair((128, 64), "float32")
    fn = lambda a, b: F.binary_cross_entropy_with_logits(a * 2 + 1, b)  # noqa: E731
    xs = [jitorch.tensor(x, requires_grad=True) for _ in range(2)]
    eager = fn(xs[0], jitorch.tensor(y))
    compiled = jitorch.compile(fn)(xs[1], jitorch.tensor(y))
    np.testing.assert_allclose(compiled.item(), eager.item(), rtol=1e-6)
    eager.backward()
    compiled.backward()
    np.testing.assert_allclose(xs[1].grad.numpy(), xs[0].grad.numpy(), rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_types_round_each_step_as_aten(dtype):
    x = torch.randn(50, 20, generator=torch.Generator().manual_seed(0)).to(getattr(torch, dtype)) * 20
    y = torch.rand(50, 20, generator=torch.Generator().manual_seed(1)).to(x.dtype)
    got = F.binary_cross_entropy_with_logits(jitorch.tensor(x.float().numpy()).to(getattr(jitorch, dtype)),
                                             jitorch.tensor(y.float().numpy()).to(getattr(jitorch, dtype)),
                                             reduction="none")
    ref = TF.binary_cross_entropy_with_logits(x, y, reduction="none")
    np.testing.assert_allclose(got.float().numpy(), ref.float().numpy(), rtol=1e-2, atol=1e-3)
