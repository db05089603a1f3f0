"""``jitorch.sparse`` (``torch.sparse``): sparse_coo tensors and their products.

A sparse_coo tensor (``jitorch.sparse_coo_tensor``, ``dense.to_sparse()``) is a Tensor whose layout is
``jitorch.sparse_coo``: an index tensor and a values tensor, with autograd through the values (``_coo.py``).
Products with dense matrices run on SciPy's sparse kernels on the CPU and cuSPARSE (``cupyx``) on CUDA.

>>> import jitorch
>>> adj = jitorch.sparse_coo_tensor([[0, 1, 1], [1, 0, 1]], [1.0, 1.0, 2.0], (2, 2))
>>> jitorch.sparse.mm(adj, jitorch.ones(2, 3))
tensor([[1., 1., 1.],
        [3., 3., 3.]])
>>> jitorch.sparse.sum(adj)
tensor(4.)
"""
from __future__ import annotations

from .. import _dtype
from . import _coo_add, _coo_grad  # noqa: F401 - install add_/mul_/zero_/detach_; .grad, the hooks and retain_grad
from ._coo import SparseCooTensor
from ._coo_math import sparse_sum as _sparse_sum
from ._coo_products import addmm as _addmm, mm, product as _product
from ._coo_softmax import log_softmax, softmax
from ._creation import (check_sparse_tensor_invariants, legacy_constructor,
                        rebuild_sparse_coo as _rebuild_sparse_coo, sparse_coo_tensor)

__all__ = ["mm", "addmm", "sum", "softmax", "log_softmax", "FloatTensor", "DoubleTensor", "LongTensor",
           "SparseCooTensor", "spmm", "sparse_coo_tensor", "check_sparse_tensor_invariants"]


def addmm(mat, mat1, mat2, *, beta=1.0, alpha=1.0):
    """``beta * mat + alpha * (mat1 @ mat2)`` for a sparse_coo ``mat1`` and dense ``mat2`` (dense result).

    >>> import jitorch
    >>> s = jitorch.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
    >>> jitorch.sparse.addmm(jitorch.ones(2, 1), s, jitorch.ones(2, 1), alpha=2)
    tensor([[5.],
            [7.]])
    """
    return _addmm(mat, mat1, mat2, beta=beta, alpha=alpha)


def sum(input, dim=None, dtype=None):  # noqa: A001 - torch.sparse.sum
    """The sum of a sparse_coo tensor over ``dim`` (all dims by default): a dense tensor when every sparse dim is
    reduced, else a coalesced sparse_coo tensor over the sparse dims left, as torch's.

    >>> import jitorch
    >>> s = jitorch.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [1.0, 2.0, 3.0], (2, 3))
    >>> jitorch.sparse.sum(s), jitorch.sparse.sum(s, 0).to_dense()
    (tensor(6.), tensor([2., 0., 4.]))
    """
    if not isinstance(input, SparseCooTensor):
        raise RuntimeError(f"sparse.sum: expected a sparse_coo tensor, got layout {input.layout}")
    return _sparse_sum(input, dim, dtype=dtype)


def spmm(input, mat2):
    """``torch.spmm``: the product of a sparse_coo (or dense) matrix and a dense one.

    >>> import jitorch
    >>> s = jitorch.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
    >>> jitorch.spmm(s, jitorch.eye(2))
    tensor([[0., 2.],
            [3., 0.]])
    """
    return _product(input, mat2, "spmm")


FloatTensor = legacy_constructor("FloatTensor", _dtype.float32)
DoubleTensor = legacy_constructor("DoubleTensor", _dtype.float64)
LongTensor = legacy_constructor("LongTensor", _dtype.int64)
_ = _rebuild_sparse_coo  # pickled sparse tensors name it (SparseCooTensor.__reduce_ex__)
