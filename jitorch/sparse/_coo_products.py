"""Products of sparse_coo tensors with dense ones (``mm``, ``matmul``, ``mv``, ``addmm``, ``F.linear``, ``spmm``):
the ``sparse_mm`` row (jitorch/ops/sparse_ops.py) for a sparse matrix on either side, with torch's checks and
messages; the result is dense, differentiable in the dense operand and the sparse operand's values.

>>> import jitorch
>>> s = jitorch.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
>>> jitorch.mm(s, jitorch.ones(2, 1)), jitorch.ones(1, 2) @ s
(tensor([[2.],
        [3.]]), tensor([[3., 2.]]))
"""
from __future__ import annotations

from .._dispatch import TORCH_TYPE_NAMES, apply
from .._tensor import Tensor
from ..ops.sparse_ops import SPARSE_MM
from ._coo import SparseCooTensor

__all__ = ["mm", "matmul", "mv", "addmm", "linear", "product"]


def _is_sparse(t):
    return isinstance(t, SparseCooTensor)


def _checkproduct(name, s, d):
    if s.sparse_dim() != 2 or s.dense_dim() != 0:
        raise RuntimeError(f"{name}: matrices expected, got a sparse_coo tensor of {s.sparse_dim()} sparse and "
                           f"{s.dense_dim()} dense dims (size {list(s.shape)})")
    if _is_sparse(d):
        raise NotImplementedError(f"{name}: sparse @ sparse is not supported in jitorch; convert one operand with "
                                  ".to_dense()")
    if not isinstance(d, Tensor) or d.dim() != 2:
        raise RuntimeError(f"{name}: matrices expected, got {d.dim() if isinstance(d, Tensor) else type(d)}D "
                           "tensor")
    if s.dtype is not d.dtype:
        raise RuntimeError(f"expected scalar type {TORCH_TYPE_NAMES[s.dtype.name]} but found "
                           f"{TORCH_TYPE_NAMES[d.dtype.name]}")
    if s.device != d.device:
        raise RuntimeError(f"{name}: Expected all tensors to be on the same device, but found at least two devices, "
                           f"{s.device} and {d.device}! Move them with .to(device) first.")


def _sparse_dense(s, d, name):
    _checkproduct(name, s, d)
    if s.shape[1] != d.shape[0]:  # torch's words, "addmm" whatever the product
        raise RuntimeError(f"addmm: Argument #3 (dense): Expected dim 0 size {s.shape[1]}, got {d.shape[0]}")
    return apply(SPARSE_MM, s._sp_indices, s._sp_values, d, rows=s.shape[0], cols=s.shape[1], transpose=False,
                 coalesced=s._sp_coalesced)


def _dense_sparse(d, s, name):
    # d @ s = (s^T @ d^T)^T: the same matrix, transposed product.
    _checkproduct(name, s, d)
    if d.shape[1] != s.shape[0]:
        raise RuntimeError(f"{name}: mat1 and mat2 shapes cannot be multiplied ({d.shape[0]}x{d.shape[1]} and "
                           f"{s.shape[0]}x{s.shape[1]})")
    return apply(SPARSE_MM, s._sp_indices, s._sp_values, d.t(), rows=s.shape[0], cols=s.shape[1], transpose=True,
                 coalesced=s._sp_coalesced).t()


def mm(mat1, mat2):
    """``mat1 @ mat2`` where either is a 2-D sparse_coo tensor (``torch.sparse.mm``, ``torch.mm``, ``torch.spmm``);
    the result is dense, differentiable in the dense operand and in the sparse operand's values.

    >>> import jitorch
    >>> s = jitorch.sparse_coo_tensor([[0, 1], [1, 1]], [2.0, 3.0], (2, 2))
    >>> mm(s, jitorch.eye(2)), mm(jitorch.ones(1, 2), s)
    (tensor([[0., 2.],
            [0., 3.]]), tensor([[0., 5.]]))
    """
    return product(mat1, mat2, "mm")


def product(mat1, mat2, name):
    if _is_sparse(mat1):
        return _sparse_dense(mat1, mat2, name)
    if _is_sparse(mat2):
        return _dense_sparse(mat1, mat2, name)
    from .. import _linalg

    return _linalg.mm(mat1, mat2)


def matmul(a, b):
    """``a @ b`` with a sparse_coo matrix on either side and a dense vector or matrix on the other.

    >>> import jitorch
    >>> s = jitorch.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
    >>> matmul(s, jitorch.ones(2)), jitorch.ones(2) @ s
    (tensor([2., 3.]), tensor([3., 2.]))
    """
    if _is_sparse(a) and isinstance(b, Tensor) and not _is_sparse(b) and b.dim() == 1:
        return product(a, b[:, None], "matmul")[:, 0]
    if _is_sparse(b) and isinstance(a, Tensor) and not _is_sparse(a) and a.dim() == 1:
        return product(a[None], b, "matmul")[0]
    for x in (a, b):
        if isinstance(x, Tensor) and not _is_sparse(x) and x.dim() > 2:
            raise RuntimeError("matmul: a sparse_coo matrix multiplies a dense matrix or vector only (expand is "
                               f"unsupported for Sparse tensors), got a {x.dim()}-D dense operand")
    return product(a, b, "matmul")


def mv(input, vec):
    """``input @ vec`` for a matrix and a vector, either sparse_coo (``torch.mv``); the result is dense.

    >>> import jitorch
    >>> s = jitorch.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
    >>> mv(s, jitorch.ones(2)), mv(jitorch.ones(1, 2), s.sum(0))
    (tensor([2., 3.]), tensor([5.]))
    """
    if input.dim() != 2 or vec.dim() != 1:
        kinds = ["SparseTensor" if _is_sparse(t) else "Tensor" for t in (input, vec)]
        raise RuntimeError(f"mv: two tensor dim should be 2 and 1, but got {kinds[0]} Dim: {input.dim()}{kinds[1]} "
                           f"Dim: {vec.dim()}")
    if _is_sparse(vec) and not _is_sparse(input):  # a dense matrix: the vector's entries scattered first
        from .. import _linalg

        return _linalg.mv(input, vec.to_dense())
    return matmul(input, vec)


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat1 @ mat2)`` with a sparse_coo ``mat1`` (``torch.sparse.addmm``, ``torch.addmm``);
    ``input`` broadcasts to the product's shape, and is ignored when ``beta`` is 0, as in torch.

    >>> import jitorch
    >>> s = jitorch.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
    >>> addmm(jitorch.ones(2), s, jitorch.eye(2), beta=2)
    tensor([[2., 4.],
            [5., 2.]])
    """
    out = product(mat1, mat2, "addmm")
    if alpha != 1:
        out = out * alpha
    if beta == 0:  # ignored, yet it must broadcast to the product, as torch checks
        input.expand(tuple(out.shape))
        return out
    return out + (input if beta == 1 else input * beta)


def linear(input, weight, bias=None):
    """``F.linear`` of a 2-D sparse_coo input: ``input @ weight.T + bias`` (torch's addmm)."""
    out = product(input, weight.t(), "linear")
    return out if bias is None else out + bias
