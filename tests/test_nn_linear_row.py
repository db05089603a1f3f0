"""The ``linear`` row of ``jitorch/ops/nn_linear.py`` against torch: values and gradients in float32 and float64 for
1-D, 2-D and 3-D inputs, with and without bias, partial ``requires_grad``, and gradcheck/gradgradcheck in float64."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as F
from jitorch.autograd import gradcheck, gradgradcheck
from jitorch.ops.nn_linear import LINEAR

RTOL = {np.float32: 1e-5, np.float64: 1e-12}


def _pair(a, grad):
    return jitorch.tensor(a.copy(), requires_grad=grad), torch.tensor(a.copy(), requires_grad=grad)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xshape", [(3,), (5, 3), (2, 4, 3), (0, 3)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("grads", [(True, True, True), (True, False, False), (False, True, True)])
def test_linear_matches_torch(dtype, xshape, bias, grads):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(xshape), rng.standard_normal((4, 3)), rng.standard_normal(4)]
    pairs = [_pair(a.astype(dtype), g) for a, g in zip(arrays, grads)]
    if not bias:
        pairs[2] = (None, None)
    out_j = F.linear(*[p[0] for p in pairs])
    out_t = torch.nn.functional.linear(*[p[1] for p in pairs])
    # the fused row ran, shown under the name at::linear's decomposition gives for this input (AddmmBackward0...)
    assert isinstance(out_j.grad_fn, LINEAR.node_cls) and out_j.grad_fn.name() == out_t.grad_fn.name()
    tol = RTOL[dtype]
    np.testing.assert_allclose(out_j.detach().numpy(), out_t.detach().numpy(), rtol=tol, atol=tol)
    w = rng.standard_normal(tuple(out_t.shape)).astype(dtype)
    (out_j * jitorch.tensor(w)).sum().backward()
    (out_t * torch.tensor(w)).sum().backward()
    for (pj, pt), g in zip(pairs, grads):
        if pj is not None and g:
            np.testing.assert_allclose(pj.grad.numpy(), pt.grad.numpy(), rtol=tol * 10, atol=tol * 10)
        elif pj is not None:
            assert pj.grad is None


def test_linear_other_dtypes_and_bias_shapes_keep_the_composite():
    x = jitorch.ones(2, 3, dtype=jitorch.float16)
    assert F.linear(x, jitorch.ones(4, 3, dtype=jitorch.float16)).shape == (2, 4)
    # A broadcastable (1, out) bias is not the row's layout: the composite handles it, as torch does.
    out = F.linear(jitorch.ones(2, 3), jitorch.ones(4, 3), jitorch.ones(1, 4))
    np.testing.assert_array_equal(out.numpy(), np.full((2, 4), 4.0, np.float32))


@pytest.mark.parametrize("xshape", [(3,), (2, 3), (2, 2, 3)])
def test_linear_gradcheck_gradgradcheck(xshape):
    rng = np.random.default_rng(3)
    x, w, b = (jitorch.tensor(rng.standard_normal(s), requires_grad=True) for s in (xshape, (4, 3), (4,)))
    assert gradcheck(F.linear, (x, w, b))
    assert gradgradcheck(F.linear, (x, w, b))


def test_linear_backward_row_double_backward():
    # The backward row's own backward (reached when its outputs are differentiated directly).
    from jitorch._dispatch import apply
    from jitorch.ops.nn_linear import LINEAR_BACKWARD

    rng = np.random.default_rng(4)
    g, x, w = (jitorch.tensor(rng.standard_normal(s), requires_grad=True) for s in ((2, 5, 4), (2, 5, 3), (4, 3)))

    def fn(g, x, w):
        return apply(LINEAR_BACKWARD, g, x, w, needs=(True, True, True))

    assert gradcheck(fn, (g, x, w))


def test_linear_row_keeps_half_dtypes_forward_and_backward():
    from jitorch._dispatch import apply
    from jitorch.ops.nn_linear import LINEAR

    for dt in (jitorch.bfloat16, jitorch.float16):
        x = jitorch.ones(2, 3, dtype=dt, requires_grad=True)
        w = jitorch.ones(4, 3, dtype=dt, requires_grad=True)
        b = jitorch.zeros(4, dtype=dt, requires_grad=True)
        out = apply(LINEAR, x, w, b)
        assert out.dtype == dt
        out.backward(jitorch.ones(2, 4, dtype=dt))
        assert x.grad.dtype == w.grad.dtype == b.grad.dtype == dt
        assert x.grad.tolist() == [[4.0] * 3] * 2 and b.grad.tolist() == [2.0] * 4


def test_linear_reads_views_of_tensors_changed_in_place():
    # The direct path must see an in-place change of a view's base made after the view was taken.
    results = []
    for lib in (torch, jitorch):
        base = lib.arange(24.0).reshape(4, 6)
        x, w = base[:2, :3], base[1:, 3:].t()  # views: rows of x, a transposed (3, 3) weight
        b = base[3, :3]
        base.mul_(0.5)
        with lib.no_grad():
            plain = lib.nn.functional.linear(x, w, b)
        with lib.inference_mode():
            inference = lib.nn.functional.linear(x, w)
        results.append((plain.tolist(), inference.tolist(), inference.is_inference(), plain.requires_grad))
    assert results[1] == results[0]


def test_linear_direct_path_records_parameters_and_bias_only_grads():
    rng = np.random.default_rng(5)
    xa, wa, ba = rng.standard_normal((3, 2, 5)), rng.standard_normal((4, 5)), rng.standard_normal(4)
    grads = []
    for lib in (torch, jitorch):
        w, b = lib.nn.Parameter(lib.tensor(wa)), lib.tensor(ba, requires_grad=True)
        out = lib.nn.functional.linear(lib.tensor(xa).permute(1, 0, 2), w, b)  # a non-contiguous batch
        out.backward(lib.tensor(np.arange(24.0).reshape(2, 3, 4)))
        grads.append((out.grad_fn.name(), w.grad.numpy(), b.grad.numpy(), out.detach().numpy()))
    assert grads[1][0] == grads[0][0]
    for j, t in zip(grads[1][1:], grads[0][1:]):
        np.testing.assert_allclose(j, t, rtol=1e-12)
