"""``torch.sparse.softmax`` / ``log_softmax`` against torch: values, pattern and the values' gradients, with duplicate
entries, empty lines, 3-D tensors, dtype, and the errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch


def _pair(shape, nnz, seed):
    rng = np.random.default_rng(seed)
    i = np.stack([rng.integers(0, n, nnz) for n in shape])  # duplicates and empty lines included
    return i, rng.standard_normal(nnz).astype(np.float32), rng.standard_normal(nnz).astype(np.float32)


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape,dim", [((4, 5), 0), ((4, 5), 1), ((3, 4, 2), 1), ((3, 4, 2), 2)], ids=str)
def test_values_and_gradients_match_torch(fn, shape, dim):
    i, v, g = _pair(shape, 14, seed=len(shape) + dim)
    results = []
    for lib in (jitorch, torch):
        values = lib.tensor(v, requires_grad=True)
        out = getattr(lib.sparse, fn)(lib.sparse_coo_tensor(lib.tensor(i), values, shape), dim)
        dense = out.to_dense()
        (dense * lib.tensor(np.resize(g, shape))).sum().backward()
        results.append((dense.detach().numpy(), out.indices().numpy(), values.grad.numpy()))
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-5)


def test_a_negative_dim_is_the_same_dim():
    # (torch 2.13's backward of a negative dim differs from the same positive dim's: jitorch keeps them equal)
    i, v, g = _pair((4, 5), 14, seed=1)
    grads, values = [], []
    for dim in (1, -1):
        leaf = jitorch.tensor(v, requires_grad=True)
        out = jitorch.sparse.softmax(jitorch.sparse_coo_tensor(jitorch.tensor(i), leaf, (4, 5)), dim).to_dense()
        (out * jitorch.tensor(np.resize(g, (4, 5)))).sum().backward()
        grads.append(leaf.grad.numpy())
        values.append(out.detach().numpy())
    want = torch.sparse.softmax(torch.sparse_coo_tensor(torch.tensor(i), torch.tensor(v), (4, 5)), -1).to_dense()
    np.testing.assert_allclose(values[1], want.numpy(), atol=1e-6)
    np.testing.assert_array_equal(values[0], values[1])
    np.testing.assert_array_equal(grads[0], grads[1])


def test_dtype_and_errors():
    s = jitorch.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], (2, 2))
    assert jitorch.sparse.softmax(s, 0, dtype=jitorch.float64).dtype == jitorch.float64
    with pytest.raises(IndexError):
        jitorch.sparse.softmax(s, 2)
    with pytest.raises(RuntimeError, match="sparse_coo"):
        jitorch.sparse.softmax(jitorch.ones(2, 2), 0)


def test_compressed_layouts_are_refused_by_name():
    for make in (lambda: jitorch.sparse_csr_tensor([0, 1], [0], [1.0]), lambda: jitorch.ones(2, 2).to_sparse_csr(),
                 lambda: jitorch.sparse_bsc_tensor([0], [0], [1.0]), lambda: jitorch.ones(2, 2).to_sparse_csc()):
        with pytest.raises(NotImplementedError, match="sparse_coo"):
            make()
