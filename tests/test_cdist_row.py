"""``cdist`` for p != 2 (and p = 2 without the matrix product) as a row: values and both gradients against PyTorch
with random upstream gradients, for every p family (0, < 1, 1, < 2, 2, > 2, inf), ties and zero distances, batch
dims (broadcast too), empty inputs, both float types and sizes that take the generated kernel; ATen's missing double
backward; and the node's name."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import check_op

PS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")]
SHAPES = [((5, 3), (4, 3)), ((2, 5, 3), (2, 4, 3)), ((2, 1, 5, 3), (3, 4, 3)), ((0, 3), (4, 3)), ((5, 0), (4, 0)),
          ((40, 30), (50, 30)), ((3, 30, 17), (3, 25, 17))]


def _inputs(s1, s2, dtype, rounded, seed=0):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(s1).astype(dtype), rng.standard_normal(s2).astype(dtype)
    return (np.round(a), np.round(b)) if rounded else (a, b)  # rounded: ties, zero differences, zero distances


@pytest.mark.parametrize("p", PS)
@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("rounded", [False, True])
def test_values_and_gradients_match_torch_float64(p, shapes, rounded):
    a, b = _inputs(*shapes, "float64", rounded)
    mode = "donot_use_mm_for_euclid_dist"  # p = 2 through the row too
    check_op(lambda x, y: jitorch.cdist(x, y, p=p, compute_mode=mode),
             lambda x, y: torch.cdist(x, y, p=p, compute_mode=mode), [a, b], atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("p", PS)
def test_float32_through_the_generated_kernel(p):
    a, b = _inputs((70, 40), (60, 40), "float32", False, seed=1)
    # (p < 1: |d|^(p - 1) is huge for a small difference, and float32 sums of such terms differ by order of addition)
    tol = 3e-3 if p < 1 else 1e-4
    check_op(lambda x, y: jitorch.cdist(x, y, p=p), lambda x, y: torch.cdist(x, y, p=p), [a, b], atol=tol, rtol=tol)


def test_node_name_and_missing_double_backward():
    a, b = _inputs((6, 3), (5, 3), "float64", False)
    x, y = jitorch.tensor(a, requires_grad=True), jitorch.tensor(b)
    out = jitorch.cdist(x, y, p=1)
    assert out.grad_fn.name() == torch.cdist(torch.tensor(a, requires_grad=True), torch.tensor(b), p=1).grad_fn \
        .name() == "CdistBackward0"
    (g,) = jitorch.autograd.grad(out.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="the derivative for '_cdist_backward' is not implemented"):
        g.sum().backward()


@pytest.mark.parametrize("p", [1.0, 2.0, float("inf")])
@pytest.mark.parametrize("which", [0, 1])
def test_one_input_needing_grad_through_the_generated_backward(p, which):
    a, b = _inputs((2, 40, 30), (2, 50, 30), "float32", p == float("inf"), seed=2)
    g = np.random.default_rng(3).standard_normal((2, 40, 50)).astype(np.float32)
    mode = "donot_use_mm_for_euclid_dist"
    got, want = [], []
    for lib, out in ((jitorch, got), (torch, want)):
        x, y = lib.tensor(a, requires_grad=which == 0), lib.tensor(b, requires_grad=which == 1)
        lib.cdist(x, y, p=p, compute_mode=mode).backward(lib.tensor(g))
        out.append((x if which == 0 else y).grad.numpy())
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("p", [1.0, 2.0, float("inf")])
@pytest.mark.parametrize("layout", ["transposed", "sliced", "broadcast batch"])
def test_strided_and_broadcast_inputs_through_the_generated_backward(p, layout):
    # The generated backward reads contiguous copies of strided inputs: the copies must outlive the kernel.
    rng = np.random.default_rng(4)
    if layout == "transposed":
        a, b = rng.standard_normal((24, 300)).astype(np.float32), rng.standard_normal((200, 24)).astype(np.float32)
        first = lambda x: x.t()  # noqa: E731
    elif layout == "sliced":
        a, b = rng.standard_normal((300, 48)).astype(np.float32), rng.standard_normal((200, 24)).astype(np.float32)
        first = lambda x: x[:, ::2]  # noqa: E731
    else:
        a = rng.standard_normal((1, 300, 24)).astype(np.float32)
        b = rng.standard_normal((5, 200, 24)).astype(np.float32)
        first = lambda x: x  # noqa: E731
    mode = "donot_use_mm_for_euclid_dist"
    grads = []
    for lib in (jitorch, torch):
        x, y = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
        out = lib.cdist(first(x), y, p=p, compute_mode=mode)
        out.backward(lib.tensor(np.random.default_rng(5).standard_normal(tuple(out.shape)).astype(np.float32)))
        grads.append((x.grad.numpy(), y.grad.numpy()))
    for got, want in zip(grads[0], grads[1]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
